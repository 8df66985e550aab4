// `actorpipe certs --out DIR HOST...`: a cluster's CA and a certificate for the coordinator and each host
// (Note [cluster certificates] in network/certificates.hpp), made with OpenSSL's library.
#include <iostream>
#include <memory>

#include "cli/checks.hpp"
#include "cli/commands.hpp"
#include "network/certificates.hpp"

namespace ap::cli {

void add_certs_command(CLI::App& app) {
  struct options {
    std::string out;
    std::vector<std::string> hosts;
    int days = 365;
  };
  auto o = std::make_shared<options>();
  auto* cmd = app.add_subcommand("certs", "make a CA and a certificate for the coordinator and each host (mutual TLS)");
  cmd->add_option("--out", o->out, "folder for ca.pem, ca.key and NAME.pem / NAME.key (an existing CA there is reused)")
      ->required();
  cmd->add_option("--days", o->days, "validity")->check(whole_number(1, 36500))->capture_default_str();
  cmd->add_option("hosts", o->hosts, "host names or addresses, one certificate each (and one for 'coordinator')");
  cmd->callback([o] {
    std::vector<std::string> names{"coordinator"};
    for (const std::string& h : o->hosts)
      if (h != "coordinator") names.push_back(h);
    const made_certificates made = make_certificates(o->out, names, o->days);
    std::cout << "certificates in " << o->out << ": ca.pem (" << (made.reused_ca ? "the CA already there" : "a new CA")
              << ", ca.key private)";
    for (const std::string& n : made.names) std::cout << ", " << n << ".pem";
    std::cout << " (keys: .key, owner only)\n";
  });
}

}  // namespace ap::cli
