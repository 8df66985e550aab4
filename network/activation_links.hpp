// Activations and their gradients between stages of two processes on data links of their own, beside CAF
// (Note [activations on data links]).

// Note [activations on data links]: a tensor inside CAF's message is serialised, framed and deserialised on each
// process's one I/O thread (docs/performance.md, "Across processes"). So a sender whose destination stage runs in
// another process writes the tensor straight from its memory on its link to that stage (`activation_outbox`, one
// link per destination, TLS when the node's transport has it) and sends the task through CAF as before, with an
// empty tensor and a ticket (the sender's rank in the high 16 bits, a count below). The stage's `activation_inbox`
// reads the tensor into a fresh one and keeps it until the processor takes it, waiting at most the stage's timeout,
// and less when the sender's link ends without it (a lost node fails the step at once). Tasks stay CAF's, ordered
// as before. The coordinator sends this way too but listens for no link (a node may not reach it); small tensors,
// tasks within one process, and tensors after a link failed travel inside the message; an aborted step's tensors
// are dropped when a later step begins.

// Note [one copy on one machine]: between two processes of one host a tensor written on a socket is copied twice.
// Where a link's two ends have one address (data_link::same_host), the sender offers the tensor where it lies
// (its process id and address) and waits for one byte: the inbox copies it with one `process_vm_readv`
// (network/process_memory.hpp), which also reads a 16-byte token the inbox gave that link, and answers 1; or 0,
// and the bytes come on the link and the link stops offering. The token keeps another process (or PID namespace)
// from passing for the sender; the sender's memory is read only while it waits, so the tensor cannot change.
// Where ptrace between the two is not allowed (another user, Yama's ptrace_scope >= 1) the kernel refuses and the
// link copies as before.
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
  // Listens on `host` (a free port) for links to stage `stage`; `log` (may be empty) hears of each link opened or
  // connection dropped. Throws link_error.
  activation_inbox(int stage, const std::string& host, std::shared_ptr<tls_context> tls, std::chrono::milliseconds timeout,
                   std::function<void(const std::string&)> log = {});
  // Stops accepting and reading at once (the listener and every link interrupted) and joins its threads: a stage's
  // processor, which owns its inbox, ends without delay (Note [a node's shutdown] in actors/run_node.cpp).
  ~activation_inbox();
  activation_inbox(const activation_inbox&) = delete;
  activation_inbox& operator=(const activation_inbox&) = delete;

  std::uint16_t port() const { return port_; }
  // The tensor sent under `ticket`, waiting up to the timeout for it, or until the link its sender's tensors came
  // on closed without it (the sending stage's process went). Throws std::runtime_error naming the stage, the
  // ticket and what the links said; a runtime_failure of code lost_node when that link's bytes came damaged (a
  // record failed its checksum or MAC), so that recovery replays the step (Note [checked records]).
  tensor take(std::uint64_t ticket);
  // Drops the tensors of steps before `step` (an aborted step's, never taken).
  void forget_before(std::uint64_t step);
  // How many tensors came straight from their sender's memory (Note [one copy on one machine]).
  std::size_t copied_from_senders() const;

 private:
  struct arrival {
    std::uint64_t step = 0;
    tensor data;
  };
  void accept_loop();
  void read_loop(std::unique_ptr<data_link> link);
  std::string stopped() const;
  void note_problem(std::string what);  // one of the last few; the caller holds mutex_

  int stage_;
  std::chrono::milliseconds timeout_;
  std::function<void(const std::string&)> log_;
  std::unique_ptr<link_listener> listener_;
  std::uint16_t port_ = 0;
  mutable std::mutex mutex_;
  std::condition_variable arrived_;
  std::map<std::uint64_t, arrival> tensors_;
  std::vector<std::string> problems_;  // what the links said when they ended badly (the last few)
  std::size_t copied_ = 0;             // tensors copied from their senders' memory (Note [one copy on one machine])
  std::vector<data_link*> open_;       // the links being read, interrupted when the inbox stops
  std::map<int, std::string> closed_;  // by sending stage: how its last link ended, until it opens another
  std::map<int, bool> corrupted_;      // ... and whether its bytes came damaged (Note [checked records])
  bool stopping_ = false;
  std::vector<std::thread> readers_;
  std::thread acceptor_;
};

// Note [offers without waiting]: the sender of an offered tensor waited for its answer before its task went
// through CAF: a round trip on every hop between stages, and a sleep and a wake-up of the CAF worker that runs
// the stage's sender. On a machine whose cores all compute every such wake-up takes a core from a stage: 2 node
// processes training the heavy MLP on this 2-vCPU machine switched contexts 56.5k times in 100 steps against
// 24.5k for one process (`perf stat -a`), their stages' threads preempted ~50 times a step each; with this
// change and Note [quiet scheduler]'s longer poll, 48.6-50.1k (docs/performance.md).
// Once a link's inbox has copied one offer, the outbox no longer waits: it keeps each tensor it offers,
// unchanged, until the answer comes, and reads the answers that have come, on every link, before each later
// tensor (a link whose stage went is dropped then, with what it kept), and as it ends waits for the rest, at most
// 2 s. Only a link's first offers are answered 0 with the bytes following on the link; a copy that fails after
// one succeeded (the sending process went) ends the link, and the wait for that tensor fails at once, naming it.
class activation_outbox {
 public:
  activation_outbox(int stage, std::shared_ptr<tls_context> tls, std::chrono::milliseconds timeout);
  // Waits for the answers to tensors still lent (Note [offers without waiting]).
  ~activation_outbox();
  activation_outbox(const activation_outbox&) = delete;
  activation_outbox& operator=(const activation_outbox&) = delete;
  // A ticket for the next tensor.
  std::uint64_t next_ticket() { return (static_cast<std::uint64_t>(stage_ + 1) << 48) | ++count_; }
  // Writes `t` of `step` under `ticket` on the link to stage `to` at `address` ("host:port"), connected at the
  // first use. A tensor offered in place may be moved from (kept until its inbox copied it); otherwise, and
  // whenever it throws, `t` is left as it was. Throws link_error (the link is then dropped; the next tensor
  // connects again).
  void send(int to, const std::string& address, std::uint64_t ticket, std::uint64_t step, tensor&& t);
  // Tensors kept for their answers, on every link (Note [offers without waiting]).
  std::size_t lent() const;

 private:
  struct link_to {
    std::unique_ptr<data_link> link;
    bool offer = false;  // offers tensors where they lie (Note [one copy on one machine])
    bool copied_one = false;  // the inbox copied an offer: later ones are lent, not waited for
    memory_token token{};  // the inbox's, read beside each tensor it copies from this process
    std::deque<tensor> lent;  // offered and not yet answered, in order
  };
  // Reads the answer to the oldest lent tensor, waiting at most `wait`, and frees it. Throws link_error.
  void take_answer(link_to& out, std::chrono::milliseconds wait);
  // Takes every answer that has come on `out`, without waiting. Throws link_error.
  void take_answers_come(link_to& out);

  int stage_;
  std::shared_ptr<tls_context> tls_;
  std::chrono::milliseconds timeout_;
  std::uint64_t count_ = 0;
  std::map<std::string, link_to> links_;  // by address (a map's entries stay where they are: `token`'s address)
};

}  // namespace ap
