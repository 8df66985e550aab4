// How coordinators and nodes talk: mutual TLS, or plain TCP only with --insecure.
//
// Note [mutual TLS]: each side presents its certificate and requires one signed by the shared CA from its peer
// (SSL_VERIFY_PEER | FAIL_IF_NO_PEER_CERT), so a peer without one fails in the TLS handshake, before CAF's BASP
// layer or any actor. No host name is checked: the CA is the cluster. Plain TCP lets anyone who reaches a node's
// port drive it.
#pragma once

#include <string>

namespace ap {

struct transport_security {
  std::string ca_file;           // --tls-ca: PEM certificate(s) of the CA that signs every peer's certificate
  std::string certificate_file;  // --tls-cert: this side's PEM certificate (chain), signed by the CA
  std::string key_file;          // --tls-key: its private key (PEM, unencrypted)
  bool insecure = false;         // --insecure: plain TCP, no authentication (tests, trusted networks)

  bool tls() const { return !insecure; }
  std::string describe() const;  // "mutual TLS (CA ca.pem)" or "plain TCP (--insecure: ...)"
};

// Throws std::invalid_argument, before any work, naming the flag and the file: a missing or contradictory flag, an
// unreadable or non-PEM file, a key not matching its certificate, a certificate the CA did not sign. `who` names
// the command ("node", "train --nodes").
void check_transport_security(const transport_security& s, const std::string& who);

// The warning printed whenever --insecure is used.
std::string insecure_warning(const std::string& who);

}  // namespace ap
