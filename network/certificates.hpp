// A cluster's certificates, made with OpenSSL's library (`actorpipe certs`): a certificate authority and a
// CA-signed certificate per name, the files mutual TLS reads (Note [mutual TLS] in transport_security.hpp).
#pragma once

#include <string>
#include <vector>

namespace ap {

// Note [cluster certificates]: make_certificates writes into `dir` ca.pem and ca.key (ca.pem goes to every machine
// as --tls-ca; ca.key stays with whoever adds machines) and NAME.pem, NAME.key per name. An existing CA is reused,
// so later certificates join the same cluster. Keys are EC P-256, unencrypted, mode 0600; certificates X.509 v3,
// SHA-256, valid `days`; each name's has serverAuth and clientAuth (a process is both) and the name as
// subjectAltName. Throws std::runtime_error naming the file and OpenSSL's reason; std::invalid_argument for a bad
// name or days outside 1..36500.
struct made_certificates {
  std::string ca_file;                 // dir/ca.pem
  bool reused_ca = false;              // the CA was there already
  std::vector<std::string> names;      // in order; each has dir/NAME.pem and dir/NAME.key
};
made_certificates make_certificates(const std::string& dir, const std::vector<std::string>& names, int days = 365);

}  // namespace ap
