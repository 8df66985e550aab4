#include "network/transport_security.hpp"

#include <stdexcept>

#include "network/tls_session.hpp"

namespace ap {

std::string transport_security::describe() const {
  if (insecure) return "plain TCP (--insecure: no authentication, no encryption)";
  return "mutual TLS (CA " + ca_file + ", certificate " + certificate_file + ")";
}

std::string insecure_warning(const std::string& who) {
  return "warning: " + who + " --insecure: plain TCP without authentication or encryption; anyone who can reach "
         "the nodes' ports can run code on them and read the model. Use --tls-ca/--tls-cert/--tls-key "
         "(scripts/make_test_certs.sh) outside a trusted network.";
}

void check_transport_security(const transport_security& s, const std::string& who) {
  const bool any_file = !s.ca_file.empty() || !s.certificate_file.empty() || !s.key_file.empty();
  if (s.insecure) {
    if (any_file)
      throw std::invalid_argument(who + ": --insecure (plain TCP) contradicts --tls-ca/--tls-cert/--tls-key: "
                                  "pass either the three TLS files or --insecure");
    return;
  }
  if (!any_file)
    throw std::invalid_argument(who + ": no transport security given: pass --tls-ca CA.pem --tls-cert CERT.pem "
                                "--tls-key KEY.pem (mutual TLS; scripts/make_test_certs.sh makes test "
                                "certificates), or --insecure for plain TCP without authentication");
  tls_context check{s, who};  // loads and cross-checks the three files exactly as every connection will
}

}  // namespace ap
