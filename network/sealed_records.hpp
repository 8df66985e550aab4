// The records a TLS data link's bytes travel in after its handshake: AES-128-GCM under keys exported from the
// link's TLS session (Note [sealed records]).
//
// Note [sealed records]:
// A data link over TLS (Note [data links]) used OpenSSL's records for its bytes: SSL_write copies each 16 KB of
// plaintext into its buffer, encrypts it there and writes it with one system call; SSL_read decrypts in its
// buffer and copies out. Sender and receiver each spent 0.6 s of CPU a GB on loopback here, where plain TCP
// spends 0.2-0.3 and AES-128-GCM alone 0.16 (6.2 GB/s, `openssl speed`): activations moved at 1.3-1.6 GB/s,
// both vCPUs busy. Kernel TLS, which would take the records off OpenSSL's hands, is not offered by this kernel.
// So the link does what kernel TLS does: the TLS handshake (mutual, as every connection: Note [mutual TLS])
// authenticates both ends and agrees on the secrets, and the bytes then travel in records of the link's own,
// sealed with the same AEAD and key sizes TLS 1.3 uses:
// - Keys: each direction's 32-byte secret is exported from the session (RFC 5705/8446 exporter, label
//   `record_exporter_label`, context "client" or "server": the side that writes), so the two directions never
//   share a key and no other use of the session can derive them. A record's key and nonce base come from its
//   direction's secret and its epoch (65,536 records, at most 16 GB) by HMAC-SHA256, so no key seals more than
//   TLS 1.3's limit for AES-GCM (2^24.5 full records of 16 KB, about 380 GB) allows.
// - A record: its plaintext length (4 bytes, little-endian, 1 to `max_record_bytes`), the ciphertext, the 16-byte
//   tag. The length is the record's additional data, so it cannot be altered unseen. The nonce is the epoch's
//   nonce base XOR the record's sequence number (TLS 1.3's construction), counted by both ends and never sent:
//   a record replayed, dropped, reordered or moved to the other direction fails its tag.
// - The receiver reads a record whose plaintext the caller's read will hold whole straight into the caller's
//   memory and decrypts it there (in place); a record larger than what is asked goes to a buffer of the link's.
//   A record that fails its tag ends the link (link_error failed); the caller's tensor is then dropped, never
//   used. The sender encrypts from the caller's memory into its buffer (the copy TLS makes anyway) and writes
//   header, ciphertext and tag in one call.
// - A truncated stream shows as a peer that hung up: every reader knows how many bytes it waits for.
// Measured on this 2-vCPU machine (loopback, mutual TLS, each figure two runs): docs/performance.md.
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

// The secrets of the two directions of a TLS session whose handshake is done: what the client writes, what the
// server writes. Throws link_error failed with OpenSSL's reason.
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
  // Seals n bytes (1 to max_record_bytes) of `plain` into `out`, which holds n + record_overhead bytes: header,
  // ciphertext, tag.
  void seal(const void* plain, std::size_t n, unsigned char* out);
};

class record_opener : public record_cipher {
 public:
  explicit record_opener(const record_secret& secret) : record_cipher(secret, false) {}
  // The plaintext length a record's header announces. Throws link_error failed when it is 0 or above
  // max_record_bytes.
  static std::size_t announced(const unsigned char* header);
  // Opens the record in place: `data` holds its n bytes of ciphertext and becomes its plaintext. False when the
  // tag does not match (the record is forged, altered, replayed or out of order); `data` is then garbage.
  bool open(const unsigned char* header, unsigned char* data, std::size_t n, const unsigned char* tag);
};

}  // namespace ap
