// The records of a TLS data link after its handshake.

// Note [sealed records]: OpenSSL's records copy through its buffers, and kernel TLS is not always available. So a
// TLS data link does what kernel TLS does: after the mutual TLS handshake the bytes travel in the link's own
// AES-128-GCM records, under a secret exported per direction (RFC 5705, `record_exporter_label`), with a key per
// epoch of 65,536 records (HMAC-SHA256). A record is its length (4 bytes LE, the additional data), ciphertext and
// tag; the nonce counts records, so a replayed, dropped or reordered record fails its tag and ends the link.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

typedef struct ssl_st SSL;
typedef struct evp_cipher_ctx_st EVP_CIPHER_CTX;

namespace ap {

inline constexpr std::size_t max_record_bytes = std::size_t{256} << 10;  // plaintext of one record, at most
inline constexpr std::size_t record_header_bytes = 4, record_tag_bytes = 16;
inline constexpr std::size_t record_overhead = record_header_bytes + record_tag_bytes;
inline constexpr const char* record_exporter_label = "EXPORTER-actorpipe-data-link-records";

using record_secret = std::array<unsigned char, 32>;

// Client's and server's write secrets of a finished handshake. Throws link_error failed with OpenSSL's reason.
std::pair<record_secret, record_secret> export_record_secrets(SSL* ssl);

// One direction's keys and sequence (shared by the sealer and the opener of that direction).
class record_cipher {
 public:
  record_cipher(const record_secret& secret, bool encrypt);
  ~record_cipher();
  record_cipher(const record_cipher&) = delete;
  record_cipher& operator=(const record_cipher&) = delete;

 protected:
  // Sets the next record's key (at each epoch's start) and nonce; advances the sequence.
  void next_record();
  EVP_CIPHER_CTX* ctx_;

 private:
  record_secret secret_;
  bool encrypt_;
  std::uint64_t sequence_ = 0;
  std::array<unsigned char, 12> nonce_base_{};
};

class record_sealer : public record_cipher {
 public:
  explicit record_sealer(const record_secret& secret) : record_cipher(secret, true) {}
  // Seals n bytes (1 to max_record_bytes) into `out` (n + record_overhead bytes).
  void seal(const void* plain, std::size_t n, unsigned char* out);
};

class record_opener : public record_cipher {
 public:
  explicit record_opener(const record_secret& secret) : record_cipher(secret, false) {}
  // The plaintext length a header announces. Throws link_error failed for 0 or above max_record_bytes.
  static std::size_t announced(const unsigned char* header);
  // Opens the record in place: `data`'s n bytes of ciphertext become its plaintext. False when the tag does not
  // match (forged, altered, replayed or out of order); `data` is then garbage.
  bool open(const unsigned char* header, unsigned char* data, std::size_t n, const unsigned char* tag);
};

}  // namespace ap
