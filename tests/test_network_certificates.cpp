// The files `actorpipe certs` makes pass the checks mutual TLS runs before it starts (the key is its certificate's, the
// CA signed it), a second run reuses the CA so new machines join the cluster, another folder's CA does not vouch for
// them, keys are the owner's only, and bad names are refused (Note [cluster certificates]).
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "network/certificates.hpp"
#include "network/transport_security.hpp"
#include "test_support.hpp"

using namespace ap;

namespace {

transport_security files(const std::string& dir, const std::string& name, const std::string& ca_dir = "") {
  transport_security s;
  s.ca_file = (ca_dir.empty() ? dir : ca_dir) + "/ca.pem";
  s.certificate_file = dir + "/" + name + ".pem";
  s.key_file = dir + "/" + name + ".key";
  return s;
}

// What OpenSSL reads in a certificate and its key file: the properties docs/cluster.md names.
struct certificate_facts {
  long version = 0;               // X.509 v3 is 2
  std::string key_type;           // "EC P-256" for an EC key on prime256v1
  std::string signature;          // "ecdsa-with-SHA256"
  bool ca = false;                // basicConstraints CA:TRUE
  bool server_and_client = false; // extendedKeyUsage serverAuth and clientAuth
  std::vector<std::string> alt_names;  // "DNS:node1", "IP:10.0.0.7"
  bool signed_by_ca = false;      // its signature checks with the CA's key
  bool key_matches = false;       // the key file's key is the certificate's
  unsigned key_mode = 0;          // the key file's permission bits
};

certificate_facts read_certificate(const std::string& dir, const std::string& name) {
  const auto read_x509 = [](const std::string& path) {
    std::unique_ptr<FILE, decltype(&std::fclose)> f(std::fopen(path.c_str(), "r"), &std::fclose);
    REQUIRE_MESSAGE(f, "cannot open " << path);
    std::unique_ptr<X509, decltype(&X509_free)> cert(PEM_read_X509(f.get(), nullptr, nullptr, nullptr), &X509_free);
    REQUIRE_MESSAGE(cert, path << " holds no PEM certificate");
    return cert;
  };
  auto cert = read_x509(dir + "/" + name + ".pem");
  auto ca = read_x509(dir + "/ca.pem");
  certificate_facts facts;
  facts.version = X509_get_version(cert.get());
  EVP_PKEY* key = X509_get0_pubkey(cert.get());
  REQUIRE(key);
  char group[64] = "";
  std::size_t group_length = 0;
  if (EVP_PKEY_get_base_id(key) == EVP_PKEY_EC && EVP_PKEY_get_group_name(key, group, sizeof group, &group_length) == 1)
    facts.key_type = std::string("EC ") + (std::string(group) == "prime256v1" ? "P-256" : group);
  else
    facts.key_type = OBJ_nid2sn(EVP_PKEY_get_base_id(key));
  facts.signature = OBJ_nid2ln(X509_get_signature_nid(cert.get()));
  facts.ca = X509_check_ca(cert.get()) != 0;
  const std::uint32_t usage = X509_get_extended_key_usage(cert.get());
  facts.server_and_client = usage != UINT32_MAX && (usage & XKU_SSL_SERVER) && (usage & XKU_SSL_CLIENT);
  if (auto* names = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert.get(), NID_subject_alt_name, nullptr, nullptr))) {
    for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
      const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
      if (n->type == GEN_DNS)
        facts.alt_names.push_back("DNS:" + std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(n->d.dNSName)),
                                                       static_cast<std::size_t>(ASN1_STRING_length(n->d.dNSName))));
      if (n->type == GEN_IPADD && ASN1_STRING_length(n->d.iPAddress) == 4) {
        const unsigned char* b = ASN1_STRING_get0_data(n->d.iPAddress);
        facts.alt_names.push_back("IP:" + std::to_string(b[0]) + "." + std::to_string(b[1]) + "." + std::to_string(b[2]) +
                                  "." + std::to_string(b[3]));
      }
    }
    GENERAL_NAMES_free(names);
  }
  facts.signed_by_ca = X509_verify(cert.get(), X509_get0_pubkey(ca.get())) == 1;
  const std::string key_path = dir + "/" + name + ".key";
  std::unique_ptr<FILE, decltype(&std::fclose)> kf(std::fopen(key_path.c_str(), "r"), &std::fclose);
  REQUIRE_MESSAGE(kf, "cannot open " << key_path);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> private_key(PEM_read_PrivateKey(kf.get(), nullptr, nullptr, nullptr),
                                                                  &EVP_PKEY_free);
  facts.key_matches = private_key && X509_check_private_key(cert.get(), private_key.get()) == 1;
  struct stat st {};
  if (stat(key_path.c_str(), &st) == 0) facts.key_mode = st.st_mode & 0777;
  return facts;
}

// Every property docs/cluster.md gives the certificates of `actorpipe certs`, and scripts/make_test_certs.sh
// (which makes the same with the openssl command): EC P-256 keys readable by their owner only, X.509 v3 signed
// with SHA-256 by the CA, usable as TLS server and client, the name as subjectAltName.
void check_documented(const std::string& dir, const std::string& name, const std::string& alt_name) {
  INFO(dir << "/" << name << ".pem");
  const certificate_facts c = read_certificate(dir, name);
  CHECK(c.version == 2);
  CHECK(c.key_type == "EC P-256");
  CHECK(c.signature == "ecdsa-with-SHA256");
  CHECK_FALSE(c.ca);
  CHECK(c.server_and_client);
  CHECK(c.alt_names == std::vector<std::string>{alt_name});
  CHECK(c.signed_by_ca);
  CHECK(c.key_matches);
  CHECK(c.key_mode == 0600);
}

}  // namespace

TEST_CASE("the certificates of actorpipe certs and of make_test_certs.sh are what docs/cluster.md says, read with OpenSSL") {
  test::scratch_dir scratch{"certificate_facts"};
  const std::string made = scratch.file("made"), scripted = scratch.file("scripted");
  make_certificates(made, {"coordinator", "node1", "10.0.0.7"});
  const std::string script = std::string(AP_SOURCE_DIR) + "/scripts/make_test_certs.sh";
  REQUIRE(std::system((script + " " + scripted + " coordinator node1 10.0.0.7 > /dev/null").c_str()) == 0);
  for (const std::string& dir : {made, scripted}) {
    check_documented(dir, "coordinator", "DNS:coordinator");
    check_documented(dir, "node1", "DNS:node1");
    check_documented(dir, "10.0.0.7", "IP:10.0.0.7");
    const certificate_facts ca = read_certificate(dir, "ca");  // the CA's own: self-signed, a CA
    CHECK(ca.version == 2);
    CHECK(ca.key_type == "EC P-256");
    CHECK(ca.signature == "ecdsa-with-SHA256");
    CHECK(ca.ca);
    CHECK(ca.signed_by_ca);
    CHECK(ca.key_mode == 0600);
  }
}

TEST_CASE("certificates made here pass mutual TLS's checks, a second run joins the same CA, another CA refuses") {
  test::scratch_dir scratch{"certificates"};
  const std::string dir = scratch.file("cluster"), other = scratch.file("other");
  const made_certificates made = make_certificates(dir, {"coordinator", "node1", "10.0.0.7"}, 30);
  CHECK_FALSE(made.reused_ca);
  CHECK(made.names == std::vector<std::string>{"coordinator", "node1", "10.0.0.7"});
  for (const std::string name : {"coordinator", "node1", "10.0.0.7"}) {
    INFO(name);
    CHECK_NOTHROW(check_transport_security(files(dir, name), "test"));
    struct stat key {};
    REQUIRE(stat((dir + "/" + name + ".key").c_str(), &key) == 0);
    CHECK((key.st_mode & 0777) == 0600);
  }
  const made_certificates later = make_certificates(dir, {"node2"});
  CHECK(later.reused_ca);
  CHECK_NOTHROW(check_transport_security(files(dir, "node2"), "test"));
  CHECK_NOTHROW(check_transport_security(files(dir, "node1"), "test"));  // the CA is the same one

  make_certificates(other, {"intruder"});
  const std::string refused = test::error_of([&] { check_transport_security(files(other, "intruder", dir), "test"); });
  CHECK(test::contains(refused, "--tls-cert"));
  CHECK(test::contains(test::error_of([&] { make_certificates(dir, {"../escape"}); }), "cannot name a certificate"));
  CHECK(test::contains(test::error_of([&] { make_certificates(dir, {"ca"}); }), "cannot name a certificate"));
  CHECK(test::contains(test::error_of([&] { make_certificates(dir, {"a"}, 0); }), "--days must be 1..36500"));
}
