// Activations and their gradients between stages of two processes on data links of their own, beside CAF
// (Note [activations on data links]).
//
// Note [activations on data links]:
// A forward_task or backward_task between stages on two nodes used to carry its tensor inside CAF's message:
// BASP serialised it into its buffer on the sending process's one I/O thread, framed it (and encrypted it under
// TLS), and the receiving I/O thread deserialised it out of a zero-filled buffer (docs/performance.md: 1.5-2.1
// GB/s at 1-64 MB on loopback, 0.5-0.9 of what the socket alone moves). Now a stage on a node listens for
// activation links (its `activation_inbox`, on the host the coordinator reaches its node by, with the node's
// transport's TLS when it has one, mutual as every connection: Note [data links]); a sender whose destination
// stage runs in another process writes the tensor on its link to that stage (its `activation_outbox`, one link
// per destination, opened at the first tensor) straight from the tensor's memory, then sends the task through
// CAF as before, with an empty tensor and the tensor's ticket. The inbox's reader reads each tensor straight
// into a fresh tensor and keeps it under its ticket until the stage's processor, about to run the task, takes
// it (waiting, at most the stage's timeout, for bytes still on their way). So the messages stay CAF's typed
// forward_task and backward_task, ordered and delivered by CAF as before; only the bytes travel beside them.
// - The coordinator, where the stages run on nodes, sends its tasks the same way (its own outbox): the inputs of
//   the first stage and the gradients of the outputs for the last (the heavy MLP's 400 KB microbatches of
//   inputs, a GPT's 1 MB of logits' gradients at batch 64 and 8 microbatches), copied once out of its memory on
//   one machine where BASP copied them four times (actors/send_beside.hpp). Tasks *to* the coordinator stay
//   inside their messages: it listens for no link (a node may not reach its process).
// - Tensors under `inline_bytes` and tasks between stages of one process stay inside the message (a local
//   message is not serialised at all).
// - A link that fails is dropped (the node's log says so), and the tensor goes inside its message instead: a
//   dead stage is CAF's to name (its down message), not the link's.
// - Tensors of an aborted step that nobody takes are dropped when the stage begins a later step.
// - A wait for a tensor ends early when its sender's link ends without it (the sending process went), so a
//   lost node fails the step at once instead of after the timeout; a link opened since forgets that.
// - A ticket is the sending stage's rank (the coordinator's: the stage count) in its high 16 bits and a count in
//   the rest: unique per inbox.
//
// Note [one copy on one machine]:
// Between two processes of one machine (nodes sharing a host, as `bench_network`'s or a 16-core machine split in
// four nodes) a tensor written on a socket is copied twice and crosses loopback TCP: 2.1-4.4 GB/s here at 1-64
// MB, about what the socket alone moves, where one copy runs at 4-9 GB/s. So where a link's two ends have one
// address (data_link::same_host), the sender offers the tensor where it lies: the frame says so and gives its
// process id and the tensor's address, and the sender waits for one byte of answer. The inbox's reader copies
// the bytes straight into the fresh tensor from the sender's memory (cross-memory attach, `process_vm_readv`:
// network/process_memory.hpp), in one system call that also reads a token there, and answers 1 when the token
// matched and every byte came. Otherwise it answers 0 and the sender writes the bytes on the link as before;
// the link then stops offering (the node's log says why, once). The kernel refuses where ptrace between the two
// is not allowed (another user; Yama's ptrace_scope 1 or more, as on Ubuntu: `sysctl kernel.yama.ptrace_scope=0`
// allows it, as Open MPI's single-copy transport also asks).
// - The token: 16 random bytes the inbox writes to each link as it opens and the outbox keeps for that link. A
//   process id of another PID namespace cannot pass for the sender, nor can a peer make the inbox read a process
//   it only names: the token is in no other process's memory.
// - The inbox takes offers only on a link whose ends have one address, and none after it refused one: a frame
//   that does otherwise ends the link.
// - The sender's memory is read only while it waits for the answer, so the tensor cannot change or go meanwhile.
//   Under TLS the offer is sealed as every frame (Note [sealed records]); the bytes never leave the machine.
//   Ordering and tickets are unchanged: a frame's bytes are in its tensor before the next frame is read.
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
