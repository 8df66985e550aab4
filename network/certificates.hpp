// A cluster's certificates, made with OpenSSL's library (`actorpipe certs`): a certificate authority and a
// CA-signed certificate per name, the files mutual TLS reads (Note [mutual TLS] in transport_security.hpp).
#pragma once

#include <string>
#include <vector>

namespace ap {

// Note [cluster certificates]:
// make_certificates writes into `dir` (made if missing) ca.pem and ca.key (the authority: ca.pem goes to every
// machine as --tls-ca, ca.key stays with whoever adds machines) and, for each name, NAME.pem and NAME.key
// (--tls-cert, --tls-key). An existing ca.pem with its ca.key is reused, so certificates made later for new
// machines join the same cluster. Keys are EC P-256, unencrypted, readable by their owner only (0600);
// certificates are X.509 v3 signed with SHA-256, valid from now for `days`: the CA's with CA:TRUE and
// keyCertSign, each name's with CA:FALSE, serverAuth and clientAuth (a process is both: a coordinator dials
// nodes, a node answers) and the name as subjectAltName (IP: for an address, DNS: otherwise), though mutual TLS
// here checks the CA's signature, not names. Throws std::runtime_error naming the file and OpenSSL's reason;
// std::invalid_argument for a name that cannot be a file name or days outside 1..36500.
struct made_certificates {
  std::string ca_file;                 // dir/ca.pem
  bool reused_ca = false;              // the CA was there already
  std::vector<std::string> names;      // in order; each has dir/NAME.pem and dir/NAME.key
};
made_certificates make_certificates(const std::string& dir, const std::vector<std::string>& names, int days = 365);

}  // namespace ap
