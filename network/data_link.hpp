// A one-way byte stream between two processes beside CAF's connections, for bulk bytes (Note [data links]).
//
// Note [data links]: a ring's chunks travel on TCP connections of their own, one per neighbour and direction, read
// and written by the group's threads in the collective's buffers instead of CAF's one I/O thread; control stays on
// CAF. TLS when the group's transport is (Note [sealed records]), else plain TCP (Note [checked records]). The
// connecting side's hello names group and rank, so a stray connection is dropped and named. Every wait is bounded.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

typedef struct ssl_st SSL;

namespace ap {

class tls_context;

class link_error : public std::runtime_error {
 public:
  enum class kind { timed_out, closed, stopped, failed };
  link_error(kind k, const std::string& what, bool corrupted_bytes = false)
      : std::runtime_error(what), reason(k), corrupted(corrupted_bytes) {}
  kind reason;
  // A record failed its checksum or MAC; the step fails as for a lost link, so recovery replays it.
  bool corrupted = false;
};

// Non-empty: why a wait should stop now (the group failed, or is being closed).
using stop_check = std::function<std::string()>;

class record_sealer;
class record_opener;

class data_link {
 public:
  // Over fd (connected, non-blocking), which the link then owns. With `ssl` (handshake done; still the caller's),
  // records are sealed with keys exported from it; null: plain TCP. Throws link_error (fd stays the caller's).
  data_link(int fd, SSL* ssl, bool accepted);
  ~data_link();
  data_link(const data_link&) = delete;
  data_link& operator=(const data_link&) = delete;

  // Moves all n bytes, or throws link_error: timed_out when no byte moved for `idle`, closed when the peer hung up,
  // stopped when `stop` gave a reason, failed otherwise (system or OpenSSL reason, or a damaged record).
  void write(const void* data, std::size_t n, std::chrono::milliseconds idle, const stop_check& stop);
  void read(void* data, std::size_t n, std::chrono::milliseconds idle, const stop_check& stop);
  // From another thread: ends a waiting read or write at once (link_error closed).
  void interrupt();
  // Whether both ends have the same address (one machine).
  bool same_host() const;
  // Whether a read would find bytes (or a hang-up) now.
  bool readable() const;
  // Note [writes without waiting]: on a plain link, writes what the socket takes now of the pieces and returns the
  // bytes; a TLS link takes 0, keeping encryption on the writer thread. The next write() reports errors and
  // continues a record taken in part. A ring sends so and hands only the rest to its writer, saving a wake-up.
  struct piece {
    const void* data;
    std::size_t size;
  };
  std::size_t write_now(const piece* pieces, std::size_t count);

 private:
  // The socket's own bytes; read_bytes continues `crc` (when not null) over them.
  void write_bytes(const void* data, std::size_t n, std::chrono::milliseconds idle, const stop_check& stop);
  void read_bytes(void* data, std::size_t n, std::chrono::milliseconds idle, const stop_check& stop,
                  std::uint32_t* crc = nullptr);
  // A plain link's write and read (Note [checked records]).
  void write_checked(const unsigned char* p, std::size_t n, std::chrono::milliseconds idle, const stop_check& stop);
  void read_checked(unsigned char* p, std::size_t n, std::chrono::milliseconds idle, const stop_check& stop);
  // Sends the open record's rest; computes the next record's header while the socket is full.
  void send_open_record(const unsigned char* p, std::size_t payload, std::chrono::milliseconds idle, const stop_check& stop,
                        const unsigned char* next_p, std::size_t next_n, unsigned char* next, bool* next_ready);

  int fd_;
  std::unique_ptr<record_sealer> sealer_;  // both null: plain TCP
  std::unique_ptr<record_opener> opener_;
  std::vector<unsigned char> sealed_;      // a record being written
  std::vector<unsigned char> opened_;      // plaintext not yet all taken
  std::size_t opened_taken_ = 0;
  // Plain links: the record being written (Note [checked records]).
  unsigned char out_head_[8] = {};
  std::size_t out_head_sent_ = 8, out_left_ = 0;
};

// Connects (retrying until `deadline`), handshakes when `tls` is set, sends `hello`. Throws link_error naming
// host:port.
std::unique_ptr<data_link> connect_link(const std::string& host, std::uint16_t port, const std::shared_ptr<tls_context>& tls,
                                        const std::string& hello, std::chrono::steady_clock::time_point deadline);

class link_listener {
 public:
  // Listens on host (empty: every interface), a free port. Throws link_error.
  link_listener(const std::string& host, std::shared_ptr<tls_context> tls);
  ~link_listener();
  link_listener(const link_listener&) = delete;
  link_listener& operator=(const link_listener&) = delete;
  std::uint16_t port() const { return port_; }

  // The first connection that completes its handshake and sends exactly `hello` before `deadline`; others are
  // closed, each adding a line to `dropped`. Throws link_error timed_out at the deadline.
  std::unique_ptr<data_link> accept(const std::string& hello, std::chrono::steady_clock::time_point deadline,
                                    std::vector<std::string>& dropped);
  // From another thread: ends an accept now or later (link_error stopped).
  void interrupt();

 private:
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::shared_ptr<tls_context> tls_;
};

}  // namespace ap
