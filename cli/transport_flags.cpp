#include "cli/transport_flags.hpp"

namespace ap::cli {

std::vector<CLI::Option*> add_transport_flags(CLI::App* cmd, transport_security& s) {
  const std::string group = "Transport (mutual TLS, or --insecure)";
  return {
      cmd->add_option("--tls-ca", s.ca_file, "PEM certificate of the CA that signs every node's and coordinator's certificate")
          ->group(group),
      cmd->add_option("--tls-cert", s.certificate_file, "this process's PEM certificate, signed by --tls-ca")->group(group),
      cmd->add_option("--tls-key", s.key_file, "the private key of --tls-cert (PEM, unencrypted)")->group(group),
      cmd->add_flag("--insecure", s.insecure, "plain TCP: no authentication, no encryption (trusted networks, tests)")
          ->group(group),
  };
}

}  // namespace ap::cli
