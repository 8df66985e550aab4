// A cluster's CA and certificates for mutual TLS (`actorpipe certs`), made with OpenSSL's library.
#pragma once

#include <string>
#include <vector>

namespace ap {

// Note [cluster certificates]: make_certificates writes ca.pem, ca.key (kept by whoever adds machines) and NAME.pem,
// NAME.key per name into `dir`; an existing CA is reused, so later certificates join the same cluster. Keys are EC
// P-256, mode 0600; each certificate has serverAuth and clientAuth (a process is both). Throws std::runtime_error
// naming the file and OpenSSL's reason; std::invalid_argument for a bad name or days outside 1..36500.
struct made_certificates {
  std::string ca_file;                 // dir/ca.pem
  bool reused_ca = false;              // the CA was there already
  std::vector<std::string> names;      // in order; each has dir/NAME.pem and dir/NAME.key
};
made_certificates make_certificates(const std::string& dir, const std::vector<std::string>& names, int days = 365);

}  // namespace ap
