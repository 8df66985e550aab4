#include "network/sealed_records.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/ssl.h>

#include <cstring>
#include <new>
#include <string>

#include "network/data_link.hpp"
#include "network/tls_session.hpp"

namespace ap {
namespace {

constexpr std::uint64_t records_per_epoch = std::uint64_t{1} << 16;  // 16 GB a key at most (Note [sealed records])

[[noreturn]] void fail(const std::string& what) {
  throw link_error(link_error::kind::failed, what + " (" + openssl_errors() + ")");
}

record_secret exported(SSL* ssl, const char* side) {
  record_secret s{};
  const auto* context = reinterpret_cast<const unsigned char*>(side);
  if (SSL_export_keying_material(ssl, s.data(), s.size(), record_exporter_label, std::strlen(record_exporter_label),
                                 context, std::strlen(side), 1) != 1)
    fail("cannot export the link's record secrets from its TLS session");
  return s;
}

}  // namespace

std::pair<record_secret, record_secret> export_record_secrets(SSL* ssl) {
  return {exported(ssl, "client"), exported(ssl, "server")};
}

record_cipher::record_cipher(const record_secret& secret, bool encrypt)
    : ctx_(EVP_CIPHER_CTX_new()), secret_(secret), encrypt_(encrypt) {
  if (!ctx_) throw std::bad_alloc();
  const int ok = encrypt ? EVP_EncryptInit_ex(ctx_, EVP_aes_128_gcm(), nullptr, nullptr, nullptr)
                         : EVP_DecryptInit_ex(ctx_, EVP_aes_128_gcm(), nullptr, nullptr, nullptr);
  if (ok != 1) {
    EVP_CIPHER_CTX_free(ctx_);
    fail("cannot set up AES-128-GCM");
  }
}

record_cipher::~record_cipher() {
  EVP_CIPHER_CTX_free(ctx_);
  OPENSSL_cleanse(secret_.data(), secret_.size());
}

void record_cipher::next_record() {
  const std::uint64_t seq = sequence_++;
  const unsigned char* key = nullptr;
  unsigned char derived[32];  // the epoch's key (16 bytes) and nonce base (12)
  if (seq % records_per_epoch == 0) {
    // HKDF-Expand's one block: HMAC(secret, info || 0x01), info naming the epoch.
    unsigned char info[24] = "actorpipe record key";  // 20 characters, then the epoch's 4 bytes
    const std::uint64_t epoch = seq / records_per_epoch;
    for (int i = 0; i < 4; ++i) info[20 + i] = static_cast<unsigned char>(epoch >> (8 * (3 - i)));
    unsigned char message[sizeof info + 1];
    std::memcpy(message, info, sizeof info);
    message[sizeof info] = 0x01;
    unsigned int length = 0;
    if (!HMAC(EVP_sha256(), secret_.data(), static_cast<int>(secret_.size()), message, sizeof message, derived, &length) ||
        length != sizeof derived)
      fail("cannot derive a record key");
    key = derived;
    std::memcpy(nonce_base_.data(), derived + 16, nonce_base_.size());
  }
  std::array<unsigned char, 12> nonce = nonce_base_;
  for (int i = 0; i < 8; ++i) nonce[4 + i] ^= static_cast<unsigned char>(seq >> (8 * (7 - i)));
  const int ok = encrypt_ ? EVP_EncryptInit_ex(ctx_, nullptr, nullptr, key, nonce.data())
                          : EVP_DecryptInit_ex(ctx_, nullptr, nullptr, key, nonce.data());
  OPENSSL_cleanse(derived, sizeof derived);
  if (ok != 1) fail("cannot start a record");
}

void record_sealer::seal(const void* plain, std::size_t n, unsigned char* out) {
  if (n == 0 || n > max_record_bytes) throw link_error(link_error::kind::failed, "a record of " + std::to_string(n) + " bytes");
  next_record();
  const auto length = static_cast<std::uint32_t>(n);
  for (int i = 0; i < 4; ++i) out[i] = static_cast<unsigned char>(length >> (8 * i));
  int written = 0;
  if (EVP_EncryptUpdate(ctx_, nullptr, &written, out, record_header_bytes) != 1 ||
      EVP_EncryptUpdate(ctx_, out + record_header_bytes, &written, static_cast<const unsigned char*>(plain), static_cast<int>(n)) != 1 ||
      EVP_EncryptFinal_ex(ctx_, out + record_header_bytes + written, &written) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_GET_TAG, record_tag_bytes, out + record_header_bytes + n) != 1)
    fail("cannot seal a record");
}

std::size_t record_opener::announced(const unsigned char* header) {
  std::uint32_t length = 0;
  for (int i = 0; i < 4; ++i) length |= std::uint32_t{header[i]} << (8 * i);
  if (length == 0 || length > max_record_bytes)
    throw link_error(link_error::kind::failed, "a record of " + std::to_string(length) + " bytes announced, not 1 to " +
                                                   std::to_string(max_record_bytes) + ": not what a peer of this version sends");
  return length;
}

bool record_opener::open(const unsigned char* header, unsigned char* data, std::size_t n, const unsigned char* tag) {
  next_record();
  int written = 0;
  if (EVP_DecryptUpdate(ctx_, nullptr, &written, header, record_header_bytes) != 1 ||
      EVP_DecryptUpdate(ctx_, data, &written, data, static_cast<int>(n)) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_SET_TAG, record_tag_bytes, const_cast<unsigned char*>(tag)) != 1)
    fail("cannot open a record");
  return EVP_DecryptFinal_ex(ctx_, data + written, &written) == 1;
}

}  // namespace ap
