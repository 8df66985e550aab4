// Activations and their gradients between stages of two processes on data links of their own, beside CAF.

// Note [activations on data links]: a tensor inside a CAF message is serialised on the process's one I/O thread
// (docs/performance.md, "Across processes"). So a sender whose destination stage is in another process writes the
// tensor on its own link to that stage (`activation_outbox`, TLS when the node's transport is) and sends the task
// through CAF with an empty tensor and a ticket (sender's rank in the high 16 bits, a count below). The stage's
// `activation_inbox` keeps the tensor until the processor takes it. Small tensors, tasks within a process and
// tensors after a link failed travel inside the message.

// Note [one copy on one machine]: between two processes of one host the sender offers the tensor where it lies;
// the inbox copies it with one `process_vm_readv`, also reading a 16-byte token it gave that link (so no other
// process can pass for the sender), and answers 1; or answers 0, and the bytes follow on the link, which stops
// offering. Where the kernel refuses, the link copies as before.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "network/data_link.hpp"
#include "network/process_memory.hpp"
#include "tensor/tensor.hpp"

namespace ap {

// Tensors smaller than this stay inside their message (their link would cost a second write for little).
inline constexpr std::size_t inline_bytes = 64 << 10;

// The hello a sender's link to `stage` says (link_listener drops any other).
std::string activation_hello(int stage);

class activation_inbox {
 public:
  // Listens on `host` (a free port); `log` (may be empty) hears of links opened and dropped. Throws link_error.
  activation_inbox(int stage, const std::string& host, std::shared_ptr<tls_context> tls, std::chrono::milliseconds timeout,
                   std::function<void(const std::string&)> log = {});
  // Interrupts every link and joins its threads, so the owning processor ends without delay.
  ~activation_inbox();
  activation_inbox(const activation_inbox&) = delete;
  activation_inbox& operator=(const activation_inbox&) = delete;

  std::uint16_t port() const { return port_; }
  // The tensor sent under `ticket`, waiting up to the timeout or until its sender's link closed. Throws
  // std::runtime_error naming the stage and ticket; runtime_failure(lost_node) for damaged bytes.
  tensor take(std::uint64_t ticket);
  // Drops the tensors of steps before `step` (an aborted step's, never taken).
  void forget_before(std::uint64_t step);
  std::size_t copied_from_senders() const;

 private:
  struct arrival {
    std::uint64_t step = 0;
    tensor data;
  };
  void accept_loop();
  void read_loop(std::unique_ptr<data_link> link);
  std::string stopped() const;
  void note_problem(std::string what);  // the caller holds mutex_

  int stage_;
  std::chrono::milliseconds timeout_;
  std::function<void(const std::string&)> log_;
  std::unique_ptr<link_listener> listener_;
  std::uint16_t port_ = 0;
  mutable std::mutex mutex_;
  std::condition_variable arrived_;
  std::map<std::uint64_t, arrival> tensors_;
  std::vector<std::string> problems_;  // the last few bad link endings
  std::size_t copied_ = 0;
  std::vector<data_link*> open_;       // interrupted when the inbox stops
  std::map<int, std::string> closed_;  // by sending stage: how its last link ended
  std::map<int, bool> corrupted_;      // ... and whether its bytes came damaged
  bool stopping_ = false;
  std::vector<std::thread> readers_;
  std::thread acceptor_;
};

// Note [offers without waiting]: waiting for each offer's answer costs a round trip per hop and a wake-up of the CAF
// worker. So once a link's inbox has copied one offer, the outbox keeps each offered tensor unchanged until its
// answer comes, reads the answers that came before each later tensor, and waits for the rest (at most 2 s) as it
// ends. A copy failing after one succeeded ends the link, and the wait for that tensor fails at once.
class activation_outbox {
 public:
  activation_outbox(int stage, std::shared_ptr<tls_context> tls, std::chrono::milliseconds timeout);
  // Waits for the answers to tensors still lent (Note [offers without waiting]).
  ~activation_outbox();
  activation_outbox(const activation_outbox&) = delete;
  activation_outbox& operator=(const activation_outbox&) = delete;
  // A ticket for the next tensor.
  std::uint64_t next_ticket() { return (static_cast<std::uint64_t>(stage_ + 1) << 48) | ++count_; }
  // Writes `t` on the link to stage `to` at `address` ("host:port"), connecting at first use. `t` may be moved from
  // when offered in place, else is left as it was. Throws link_error (the next tensor connects again).
  void send(int to, const std::string& address, std::uint64_t ticket, std::uint64_t step, tensor&& t);
  std::size_t lent() const;

 private:
  struct link_to {
    std::unique_ptr<data_link> link;
    bool offer = false;  // Note [one copy on one machine]
    bool copied_one = false;  // later offers are lent, not waited for
    memory_token token{};  // the inbox's
    std::deque<tensor> lent;  // offered, not yet answered, in order
  };
  // Reads the answer to the oldest lent tensor, waiting at most `wait`, and frees it. Throws link_error.
  void take_answer(link_to& out, std::chrono::milliseconds wait);
  // Takes every answer that has come on `out`, without waiting. Throws link_error.
  void take_answers_come(link_to& out);

  int stage_;
  std::shared_ptr<tls_context> tls_;
  std::chrono::milliseconds timeout_;
  std::uint64_t count_ = 0;
  std::map<std::string, link_to> links_;  // by address; a map keeps `token`'s address stable
};

}  // namespace ap
