#include "network/certificates.hpp"

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <regex>
#include <stdexcept>

namespace ap {
namespace {

using key_ptr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using cert_ptr = std::unique_ptr<X509, decltype(&X509_free)>;

std::string openssl_reason() {
  std::string text;
  for (unsigned long e; (e = ERR_get_error()) != 0;) {
    char buffer[256];
    ERR_error_string_n(e, buffer, sizeof buffer);
    text += (text.empty() ? "" : "; ") + std::string(buffer);
  }
  return text.empty() ? "no reason given" : text;
}

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error("certs: " + what + ": " + openssl_reason()); }

key_ptr new_key() {
  key_ptr key(EVP_EC_gen("P-256"), EVP_PKEY_free);
  if (!key) fail("cannot make an EC P-256 key");
  return key;
}

void add_extension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (!ext || X509_add_ext(cert, ext, -1) != 1) {
    X509_EXTENSION_free(ext);
    fail("cannot add the extension " + value);
  }
  X509_EXTENSION_free(ext);
}

// A certificate for `key` named `name`, signed by `issuer_key` (itself when `issuer` is null: the CA).
cert_ptr new_certificate(EVP_PKEY* key, const std::string& name, X509* issuer, EVP_PKEY* issuer_key, int days) {
  cert_ptr cert(X509_new(), X509_free);
  if (!cert || X509_set_version(cert.get(), 2) != 1) fail("cannot make a certificate");
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof serial) != 1) fail("no random serial number");
  serial[0] &= 0x7f;  // positive
  std::unique_ptr<BIGNUM, decltype(&BN_free)> number(BN_bin2bn(serial, sizeof serial, nullptr), BN_free);
  if (!number || !BN_to_ASN1_INTEGER(number.get(), X509_get_serialNumber(cert.get()))) fail("cannot set the serial");
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -60);  // a minute of clock skew between machines
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(days) * 24 * 3600);
  X509_NAME* subject = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), issuer ? X509_get_subject_name(issuer) : subject);
  if (X509_set_pubkey(cert.get(), key) != 1) fail("cannot set the public key");
  X509* signer = issuer ? issuer : cert.get();
  if (!issuer) {
    add_extension(cert.get(), signer, NID_basic_constraints, "critical,CA:TRUE");
    add_extension(cert.get(), signer, NID_key_usage, "critical,keyCertSign,cRLSign");
    add_extension(cert.get(), signer, NID_subject_key_identifier, "hash");
  } else {
    add_extension(cert.get(), signer, NID_basic_constraints, "critical,CA:FALSE");
    add_extension(cert.get(), signer, NID_key_usage, "critical,digitalSignature,keyEncipherment");
    add_extension(cert.get(), signer, NID_ext_key_usage, "serverAuth,clientAuth");
    const bool address = std::regex_match(name, std::regex(R"([0-9.]+|[0-9a-fA-F:]*:[0-9a-fA-F:.]*)"));
    add_extension(cert.get(), signer, NID_subject_alt_name, (address ? "IP:" : "DNS:") + name);
  }
  if (X509_sign(cert.get(), issuer_key, EVP_sha256()) == 0) fail("cannot sign the certificate of " + name);
  return cert;
}

std::unique_ptr<FILE, decltype(&std::fclose)> open_for(const std::string& path, mode_t mode) {
  std::filesystem::remove(path);
  const mode_t old = umask(mode == 0600 ? 077 : 022);
  std::unique_ptr<FILE, decltype(&std::fclose)> f(std::fopen(path.c_str(), "w"), std::fclose);
  umask(old);
  if (!f) throw std::runtime_error("certs: cannot write " + path);
  chmod(path.c_str(), mode);
  return f;
}

void write_key(const std::string& path, EVP_PKEY* key) {
  auto f = open_for(path, 0600);
  if (PEM_write_PrivateKey(f.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) fail("cannot write " + path);
}

void write_certificate(const std::string& path, X509* cert) {
  auto f = open_for(path, 0644);
  if (PEM_write_X509(f.get(), cert) != 1) fail("cannot write " + path);
}

}  // namespace

made_certificates make_certificates(const std::string& dir, const std::vector<std::string>& names, int days) {
  if (days < 1 || days > 36500) throw std::invalid_argument("certs: --days must be 1..36500, got " + std::to_string(days));
  const std::regex file_name(R"([A-Za-z0-9][A-Za-z0-9._:-]*)");
  for (const std::string& name : names)
    if (!std::regex_match(name, file_name) || name == "ca")
      throw std::invalid_argument("certs: '" + name + "' cannot name a certificate (letters, digits, '.', '_', ':', "
                                  "'-'; not 'ca')");
  std::filesystem::create_directories(dir);
  made_certificates made;
  made.ca_file = dir + "/ca.pem";
  const std::string ca_key_file = dir + "/ca.key";
  key_ptr ca_key(nullptr, EVP_PKEY_free);
  cert_ptr ca(nullptr, X509_free);
  if (std::filesystem::exists(made.ca_file) && std::filesystem::exists(ca_key_file)) {
    std::unique_ptr<FILE, decltype(&std::fclose)> c(std::fopen(made.ca_file.c_str(), "r"), std::fclose),
        k(std::fopen(ca_key_file.c_str(), "r"), std::fclose);
    if (!c || !k) throw std::runtime_error("certs: cannot read " + made.ca_file + " or " + ca_key_file);
    ca.reset(PEM_read_X509(c.get(), nullptr, nullptr, nullptr));
    ca_key.reset(PEM_read_PrivateKey(k.get(), nullptr, nullptr, nullptr));
    if (!ca || !ca_key) fail("cannot read the CA in " + dir);
    if (X509_check_private_key(ca.get(), ca_key.get()) != 1) fail(ca_key_file + " is not the key of " + made.ca_file);
    made.reused_ca = true;
  } else {
    ca_key = new_key();
    ca = new_certificate(ca_key.get(), "actorpipe CA", nullptr, ca_key.get(), days);
    write_key(ca_key_file, ca_key.get());
    write_certificate(made.ca_file, ca.get());
  }
  for (const std::string& name : names) {
    key_ptr key = new_key();
    cert_ptr cert = new_certificate(key.get(), name, ca.get(), ca_key.get(), days);
    write_key(dir + "/" + name + ".key", key.get());
    write_certificate(dir + "/" + name + ".pem", cert.get());
    made.names.push_back(name);
  }
  return made;
}

}  // namespace ap
