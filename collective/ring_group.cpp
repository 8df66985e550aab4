#include "collective/ring_group.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include <unistd.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "collective/comm_thread.hpp"
#include "collective/group_checks.hpp"
#include "collective/ring_schedule.hpp"
#include "collective/shard.hpp"
#include "network/connect_retry.hpp"
#include "network/data_link.hpp"
#include "network/guarded_transport.hpp"
#include "network/process_memory.hpp"
#include "network/ring_messages.hpp"

namespace ap {

namespace {

using clock_type = std::chrono::steady_clock;

// The lower ranks' endpoints and link ports, from their hellos (Note [one connection per pair]).
class peer_table {
 public:
  explicit peer_table(int size) : peers_(static_cast<std::size_t>(size)), link_ports_(static_cast<std::size_t>(size), 0) {}
  void put(int rank, caf::actor peer, std::uint16_t link_port) {
    std::lock_guard lock(mutex_);
    peers_[static_cast<std::size_t>(rank)] = std::move(peer);
    link_ports_[static_cast<std::size_t>(rank)] = link_port;
    changed_.notify_all();
  }
  // Null handle if the hello does not come before `deadline`.
  std::pair<caf::actor, std::uint16_t> wait(int rank, std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mutex_);
    const auto r = static_cast<std::size_t>(rank);
    changed_.wait_until(lock, deadline, [&] { return static_cast<bool>(peers_[r]); });
    return {peers_[r], link_ports_[r]};
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<caf::actor> peers_;
  std::vector<std::uint16_t> link_ports_;
};

// What this rank's transport refused, for the error of a rank that never came.
class drop_log {
 public:
  void add(const std::string& line) {
    std::lock_guard lock(mutex_);
    if (lines_.size() < 4) lines_.push_back(line);
  }
  std::string text() const {
    std::lock_guard lock(mutex_);
    std::string t;
    for (const auto& l : lines_) t += (t.empty() ? "" : "; ") + l;
    return t;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> lines_;
};

struct endpoint_state {
  std::map<caf::actor_addr, std::string> peers;  // whom it monitors, named for errors
};

// This rank's endpoint: turns aborts and peers' deaths into the group's failure, answers hellos, watches peers.
caf::behavior ring_endpoint(caf::stateful_actor<endpoint_state>* self, std::shared_ptr<group_failure> failure,
                            std::shared_ptr<peer_table> lower, std::string name, std::int32_t rank, std::int32_t link_port) {
  self->set_down_handler([self, failure](caf::down_msg& m) {
    auto it = self->state.peers.find(m.source);
    if (it != self->state.peers.end())  // a lost connection: recovery replays (Note [errors as codes])
      failure->fail(it->second + " is gone (" + caf::to_string(m.reason) + ")",
                    m.reason == caf::exit_reason::remote_link_unreachable ? error_code::lost_peer : error_code::collective);
  });
  return {
      [failure](ring_abort& a) { failure->fail("rank " + std::to_string(a.from) + " aborted the group: " + a.reason); },
      [self, lower, name, rank, link_port](ring_hello_atom, const std::string& group, std::int32_t expected, std::int32_t from,
                                           caf::actor& peer, std::int32_t their_link_port) {
        if (group == name && expected == rank && from >= 0 && from < rank && peer && their_link_port > 0 && their_link_port < 65536) {
          self->monitor(peer);
          self->state.peers[peer.address()] = "rank " + std::to_string(from);
          lower->put(from, peer, static_cast<std::uint16_t>(their_link_port));
        }
        return caf::make_message(name, rank, link_port);
      },
      [self](ring_watch_atom, caf::actor& peer, std::string& who) {
        self->monitor(peer);
        self->state.peers[peer.address()] = std::move(who);
      },
  };
}

// The writes still borrowing a collective's buffers: the collective finishes only once every token is gone.
class borrow_count {
 public:
  std::shared_ptr<const void> token() {
    std::lock_guard lock(mutex_);
    ++count_;
    return std::shared_ptr<const void>(this, [this](const void*) {
      std::lock_guard lock(mutex_);
      if (--count_ == 0) idle_.notify_all();
    });
  }
  void wait_idle() {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [&] { return count_ == 0; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable idle_;
  int count_ = 0;
};

// A collective for the communication thread (Note [communication thread]).
struct ring_op final : comm_op {
  explicit ring_op(ring_state& g) : group(g) {}
  std::string describe() const override;
  void run() override;
  void settle() override;

  ring_state& group;
  collective_kind kind{};
  reduce_op op{};
  int root = 0;
  const tensor* in = nullptr;
  tensor* out = nullptr;
  tensor scratch;  // reduce_scatter: the copy of `in` the ring adds into
  borrow_count sending;
  std::vector<std::shared_ptr<const void>> kept;  // pieces the right neighbour copies in place, until its answer
};

// What precedes a chunk's floats on a data link.
struct chunk_header {
  std::uint64_t collective = 0;
  std::uint64_t floats = 0;
  std::uint32_t step = 0;
  std::uint32_t chunk = 0;
  std::int32_t from = 0;
  std::uint8_t kind = 0;  // which collective the sender runs: a mismatch is named
  std::uint8_t unused[3] = {};
};
static_assert(sizeof(chunk_header) == 32, "a chunk's header is 32 bytes on the wire");

// A chunk for the writer thread; `data` stays unchanged while `hold` lives.
struct outgoing_chunk {
  chunk_header header;
  const float* data = nullptr;
  std::uint64_t address = 0;  // in place of the floats (Note [one copy in the ring])
  bool in_place = false;
  std::shared_ptr<const void> hold;
  std::size_t written = 0;  // bytes already on the link
  const char* payload() const { return in_place ? reinterpret_cast<const char*>(&address) : reinterpret_cast<const char*>(data); }
  std::size_t payload_bytes() const { return in_place ? sizeof address : header.floats * sizeof(float); }
};

// How long one hello waits for its answer before it is sent again (Note [a hello sent again]).
constexpr std::chrono::milliseconds hello_attempt{3000};
constexpr std::uint64_t max_chunk_floats = std::uint64_t{1} << 36;  // 256 GB: a header beyond is garbage

}  // namespace

struct ring_state {
  caf::actor_system& system;
  std::string name;
  int rank, size;
  std::chrono::milliseconds timeout;
  std::size_t chunk_elements;
  comm_thread engine;
  std::shared_ptr<group_failure> failure = engine.failure();
  std::shared_ptr<peer_table> lower;
  std::shared_ptr<drop_log> dropped = std::make_shared<drop_log>();
  std::unique_ptr<guarded_transport> transport;  // of its own (Note [ring security]), or null
  caf::io::middleman_actor middleman;
  caf::actor endpoint;
  std::uint16_t port = 0;
  std::vector<caf::actor> peers;           // by rank; empty for this rank
  std::vector<node_address> addresses;     // by rank
  std::string listen_host;

  // Note [data links].
  std::shared_ptr<tls_context> tls;
  std::unique_ptr<link_listener> listener;
  std::vector<std::uint16_t> link_ports;  // by rank
  std::unique_ptr<data_link> to_right, from_left;
  std::vector<float> addend;  // a received chunk before it is added
  // Note [one copy in the ring].
  bool in_place_right = false, in_place_left = false;
  memory_token right_token{};  // the right neighbour's
  memory_token left_token{};   // this rank's, given to the left neighbour
  process_region left_region;  // `at` set per chunk

  std::mutex outbox_mutex;  // guards the outbox
  std::condition_variable outbox_work;
  std::deque<outgoing_chunk> outbox;
  bool writer_busy = false;    // the writer holds a chunk
  bool writer_failed = false;  // a write failed: the rest are dropped
  std::atomic<bool> closing{false};
  std::thread writer;

  ring_state(caf::actor_system& s, std::string n, int r, int sz, std::chrono::milliseconds t, std::size_t chunk)
      : system(s), name(std::move(n)), rank(r), size(sz), timeout(t), chunk_elements(std::max<std::size_t>(1, chunk / 4)) {}

  int right() const { return (rank + 1) % size; }
  int left() const { return (rank + size - 1) % size; }
  std::string who(int r) const { return "rank " + std::to_string(r) + " (" + addresses[static_cast<std::size_t>(r)].text() + ")"; }
  std::string link_hello(int from, int to) const {
    return "actorpipe ring '" + name + "' rank " + std::to_string(from) + " to rank " + std::to_string(to);
  }
  std::string stop_reason() const { return failure->text(); }
  // After a hang-up: CAF's word on the peer if it comes within 2 s, else `fallback`.
  std::string cause_of_hang_up(const std::string& fallback) const {
    std::string cause = failure->wait(std::min(timeout, std::chrono::milliseconds(2000)));
    return cause.empty() ? fallback : cause;
  }

  // Sends n floats to the right neighbour: what the link takes now, the rest queued for the writer, which borrows
  // them (held by `hold` or an op token). Safe: a region is rewritten only by the all-gather, with a segment built
  // from this very chunk, so already written out; the op's end waits for the last tokens.
  void send(ring_op& op, std::uint32_t step, std::uint32_t chunk, const float* data, std::size_t n,
            std::shared_ptr<const void> hold = nullptr) {
    if (in_place_right && hold) op.kept.push_back(hold);  // read by the right neighbour until its answer
    if (!hold) hold = op.sending.token();
    outgoing_chunk c;
    c.header = chunk_header{op.index, n, step, chunk, rank, static_cast<std::uint8_t>(op.kind), {}};
    c.data = data;
    c.in_place = in_place_right;
    c.address = reinterpret_cast<std::uintptr_t>(data);
    c.hold = std::move(hold);
    std::lock_guard lock(outbox_mutex);
    if (outbox.empty() && !writer_busy && !writer_failed && !closing) {  // Note [writes without waiting]
      const bool payload = c.payload_bytes() > 0;
      const data_link::piece pieces[] = {{&c.header, sizeof c.header}, {c.payload(), c.payload_bytes()}};
      c.written = to_right->write_now(pieces, payload ? 2 : 1);
      if (c.written == sizeof c.header + c.payload_bytes()) return;
    }
    outbox.push_back(std::move(c));
    outbox_work.notify_one();
  }

  // The writer thread. After a failure the rest are dropped, so no collective waits on a write that cannot happen.
  void write_chunks() {
    for (;;) {
      outgoing_chunk c;
      bool failed = false;
      {
        std::unique_lock lock(outbox_mutex);
        outbox_work.wait(lock, [&] { return closing || !outbox.empty(); });
        if (outbox.empty()) return;
        c = std::move(outbox.front());
        outbox.pop_front();
        writer_busy = true;
        failed = writer_failed;
      }
      const auto idle_again = [this] {
        std::lock_guard lock(outbox_mutex);
        writer_busy = false;
      };
      if (failed) {
        idle_again();
        continue;
      }
      try {
        const auto stop = [this] { return stop_reason(); };
        const std::size_t header = sizeof c.header, payload = c.payload_bytes();
        if (c.written < header)
          to_right->write(reinterpret_cast<const char*>(&c.header) + c.written, header - c.written, timeout, stop);
        const std::size_t done = c.written > header ? c.written - header : 0;
        if (payload > done) to_right->write(c.payload() + done, payload - done, timeout, stop);
      } catch (const link_error& e) {
        {
          std::lock_guard lock(outbox_mutex);
          writer_failed = true;
        }
        const std::string link = "the data link to " + who(right());
        switch (e.reason) {
          case link_error::kind::stopped: break;  // the group failed already, or closes
          case link_error::kind::closed: failure->fail(cause_of_hang_up(who(right()) + " closed its data link")); break;
          case link_error::kind::timed_out:
            failure->fail(link + " took no byte for " + std::to_string(timeout.count()) + " ms: it stopped reading");
            break;
          case link_error::kind::failed: failure->fail(link + " failed: " + e.what()); break;
        }
      }
      idle_again();
    }
  }

  // Reads n bytes of the left neighbour's chunk `chunk` of `step` (its header when `header`), in place where the
  // links agreed (Note [one copy in the ring]); throws collective_error naming the peer.
  void read_left(void* data, std::size_t n, std::uint32_t step, std::uint32_t chunk, bool header) {
    try {
      if (header || !in_place_left) return from_left->read(data, n, timeout, [this] { return stop_reason(); });
      process_region at = left_region;
      from_left->read(&at.at, sizeof at.at, timeout, [this] { return stop_reason(); });
      if (const std::string why = copy_from_process(at, left_token, data, n); !why.empty())  // its process went?
        throw collective_error(cause_of_hang_up("cannot copy step " + std::to_string(step) + " chunk " + std::to_string(chunk) +
                                                " from " + who(left()) + "'s memory: " + why));
    } catch (const link_error& e) {
      switch (e.reason) {
        case link_error::kind::timed_out:
          throw collective_error("waited " + std::to_string(timeout.count()) + " ms for step " + std::to_string(step) +
                                 " chunk " + std::to_string(chunk) + " from " + who(left()) +
                                 (header ? ", which sent nothing" : ", which stopped sending it midway"));
        case link_error::kind::stopped: throw collective_error(e.what());
        case link_error::kind::closed:
          throw collective_error(cause_of_hang_up(who(left()) + " closed its data link"));
        case link_error::kind::failed:
          // Bytes damaged on the way (Note [checked records]): a lost link, which recovery replays.
          if (e.corrupted)
            throw runtime_failure(error_code::lost_node, "the data link from " + who(left()) + " failed: " + e.what());
          throw collective_error("the data link from " + who(left()) + " failed: " + e.what());
      }
    }
  }

  // The header of the left neighbour's chunk, checked against this rank's collective; its float count, which
  // must be `expected` unless that is npos.
  std::size_t receive_header(const ring_op& op, std::uint32_t step, std::uint32_t chunk, std::size_t expected) {
    chunk_header h;
    read_left(&h, sizeof h, step, chunk, true);
    if (h.kind != static_cast<std::uint8_t>(op.kind))
      throw collective_error(who(left()) + " runs " + collective_kind_name(static_cast<collective_kind>(h.kind)) +
                             " as collective #" + std::to_string(h.collective) + ": the ranks called different collectives");
    if (h.collective != op.index || h.step != step || h.chunk != chunk || h.floats > max_chunk_floats)
      throw collective_error(who(left()) + " sent chunk " + std::to_string(h.chunk) + " of step " +
                             std::to_string(h.step) + " of collective #" + std::to_string(h.collective) + ", this rank expected chunk " +
                             std::to_string(chunk) + " of step " + std::to_string(step) + " of #" + std::to_string(op.index) +
                             ": the ranks' collectives differ");
    if (expected != std::string::npos && h.floats != expected)
      throw collective_error(who(left()) + " sent " + std::to_string(h.floats) + " floats for chunk " +
                             std::to_string(chunk) + " of step " + std::to_string(step) + ", this rank expected " +
                             std::to_string(expected) + ": the ranks' tensors differ in shape");
    return static_cast<std::size_t>(h.floats);
  }

  // Reduce-scatter (then all-gather) of buf over segments of `unit`-float rows (Note [ring collectives]).
  void ring_reduce(ring_op& op, float* buf, std::size_t units, std::size_t unit, int offset, bool then_gather) {
    const ring_reduce_schedule plan(rank, size, units, unit, chunk_elements, offset, then_gather);
    for (const ring_chunk& c : plan.first_sends()) send(op, c.step, c.chunk, buf + c.begin, c.size());
    addend.resize(chunk_elements);
    for (std::uint32_t s = 0; s < plan.steps(); ++s) {
      for (const ring_chunk& c : plan.receives(s)) {
        receive_header(op, c.step, c.chunk, c.size());
        float* dst = buf + c.begin;
        if (plan.adds(s)) {
          read_left(addend.data(), c.size() * sizeof(float), c.step, c.chunk, false);
          const float* g = addend.data();
          for (std::size_t i = 0; i < c.size(); ++i) dst[i] += g[i];
          if (op.op == reduce_op::mean && plan.completes(s))
            for (std::size_t i = 0; i < c.size(); ++i) dst[i] /= static_cast<float>(size);
        } else {
          read_left(dst, c.size() * sizeof(float), c.step, c.chunk, false);
        }
        if (plan.forwards(s)) send(op, s + 1, c.chunk, dst, c.size());
      }
    }
  }

  void run(ring_op& op) {
    switch (op.kind) {
      case collective_kind::all_reduce: {
        float* buf = op.out->data();
        if (size == 1 || op.out->size() == 0) return;
        ring_reduce(op, buf, op.out->size(), 1, 0, true);
        return;
      }
      case collective_kind::reduce_scatter: {
        const shape_t& shape = op.in->shape();
        const std::size_t rows = shape.empty() ? 1 : shape[0], unit = shape.empty() ? 1 : op.in->size() / std::max<std::size_t>(rows, 1);
        op.scratch = *op.in;  // the ring adds into it; `in` stays the caller's
        tensor& work = op.scratch;
        if (size > 1) ring_reduce(op, work.data(), rows, unit, -1, false);
        const auto [first, last] = shard_rows(rows, static_cast<std::size_t>(size), static_cast<std::size_t>(rank));
        if (last > first) std::memcpy(op.out->data(), work.data() + first * unit, (last - first) * unit * sizeof(float));
        return;
      }
      case collective_kind::all_gather: {
        std::vector<std::pair<const float*, std::size_t>> pieces(static_cast<std::size_t>(size));
        std::vector<std::shared_ptr<std::vector<float>>> received;
        pieces[static_cast<std::size_t>(rank)] = {op.in->data(), op.in->size()};
        if (size > 1) send(op, 0, 0, op.in->data(), op.in->size());
        // Step s brings rank ring_gather_owner's piece whole, in one chunk.
        for (std::uint32_t s = 0; s + 1 < static_cast<std::uint32_t>(size); ++s) {
          const std::size_t n = receive_header(op, s, 0, std::string::npos);
          auto piece = std::make_shared<std::vector<float>>(n);
          read_left(piece->data(), n * sizeof(float), s, 0, false);
          if (ring_gather_forwards(size, s)) send(op, s + 1, 0, piece->data(), n, piece);
          pieces[static_cast<std::size_t>(ring_gather_owner(rank, size, s))] = {piece->data(), n};
          received.push_back(std::move(piece));
        }
        const std::size_t row = op.in->dimension() == 0 ? 1 : op.in->size() / std::max<std::size_t>(op.in->shape()[0], 1);
        shape_t shape = op.in->shape();
        std::size_t rows = 0;
        for (int r = 0; r < size; ++r) {
          const std::size_t floats = pieces[static_cast<std::size_t>(r)].second;
          if (row == 0 || floats % row != 0)
            throw collective_error(who(r) + " sent " + std::to_string(floats) +
                                   " floats, not whole rows of " + std::to_string(row) + ": the ranks' shapes differ after the first axis");
          rows += floats / row;
        }
        shape[0] = rows;
        *op.out = tensor::from_shape(shape);
        std::size_t offset = 0;
        for (const auto& [data, floats] : pieces) {
          if (floats > 0) std::memcpy(op.out->data() + offset, data, floats * sizeof(float));
          offset += floats;
        }
        return;
      }
      case collective_kind::broadcast: {
        if (size == 1) return;
        float* buf = op.out->data();
        const ring_broadcast_schedule plan(rank, size, op.root, op.out->size(), chunk_elements);
        for (const ring_chunk& c : plan.chunks) {
          if (plan.receives()) {
            receive_header(op, c.step, c.chunk, c.size());
            read_left(buf + c.begin, c.size() * sizeof(float), c.step, c.chunk, false);
          }
          if (plan.sends()) send(op, c.step, c.chunk, buf + c.begin, c.size());
        }
        return;
      }
    }
  }

  // Per link with one address at both ends: offer, try and answer in-place copies (Note [one copy in the ring]).
  void agree_on_copies(clock_type::time_point deadline) {
    const auto left_ms = [&] {
      return std::max(std::chrono::milliseconds(1),
                      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now()));
    };
    struct offer {
      std::uint64_t pid = 0, token_at = 0;
      std::uint8_t offered = 0;
      std::uint8_t unused[7] = {};
    };
    try {
      left_token = fresh_memory_token();
      from_left->write(left_token.data(), left_token.size(), left_ms(), nullptr);
      to_right->read(right_token.data(), right_token.size(), left_ms(), nullptr);
      offer mine;
      if (to_right->same_host()) mine = {static_cast<std::uint64_t>(::getpid()), reinterpret_cast<std::uintptr_t>(right_token.data()), 1, {}};
      to_right->write(&mine, sizeof mine, left_ms(), nullptr);
      offer theirs;
      from_left->read(&theirs, sizeof theirs, left_ms(), nullptr);
      if (theirs.offered > 1) throw link_error(link_error::kind::failed, "an offer " + std::to_string(theirs.offered));
      if (theirs.offered == 1) {
        std::uint8_t answer = 0;
        if (from_left->same_host()) {
          left_region = process_region{theirs.pid, theirs.token_at, theirs.token_at};
          memory_token probe{};
          answer = copy_from_process(left_region, left_token, probe.data(), probe.size()).empty() ? 1 : 0;
        }
        from_left->write(&answer, sizeof answer, left_ms(), nullptr);
        in_place_left = answer == 1;
      }
      if (mine.offered == 1) {
        std::uint8_t answer = 0;
        to_right->read(&answer, sizeof answer, left_ms(), nullptr);
        if (answer > 1) throw link_error(link_error::kind::failed, "an answer " + std::to_string(answer));
        in_place_right = answer == 1;
      }
    } catch (const link_error& e) {
      throw collective_error("group '" + name + "' rank " + std::to_string(rank) +
                             " could not agree with its neighbours how chunks travel: " + e.what());
    }
  }

  // Tells the left neighbour this rank took every chunk of `op` (Note [one copy in the ring]).
  void answer_in_place(const ring_op& op) {
    const auto stop = [this] { return stop_reason(); };
    if (in_place_left) {
      const std::uint64_t done = op.index;
      try {
        from_left->write(&done, sizeof done, timeout, stop);
      } catch (const link_error& e) {
        throw collective_error("cannot tell " + who(left()) + " its chunks were taken: " + e.what());
      }
    }
    if (in_place_right) {
      std::uint64_t done = ~std::uint64_t{0};
      try {
        to_right->read(&done, sizeof done, timeout, stop);
      } catch (const link_error& e) {
        throw collective_error(who(right()) + " did not say it took this rank's chunks: " + e.what());
      }
      if (done != op.index)
        throw collective_error(who(right()) + " says it took the chunks of collective #" +
                               std::to_string(done) + ": the ranks' collectives differ");
    }
  }

  collective_handle start(collective_kind kind, reduce_op r, int root, const tensor& in, tensor& out) {
    if (in.type() != dtype::float32)
      throw std::invalid_argument("group '" + name + "' " + collective_kind_name(kind) + " on rank " +
                                  std::to_string(rank) + ": the tensor is " + dtype_name(in.type()) + " " +
                                  shape_string(in.shape()) + ", collectives take float32");
    if (!engine.started())
      throw std::logic_error("group '" + name + "' rank " + std::to_string(rank) + ": connect() before any collective");
    auto op = std::make_shared<ring_op>(*this);
    op->kind = kind;
    op->op = r;
    op->root = root;
    op->in = &in;
    op->out = &out;
    return engine.submit(op);
  }
};

std::string ring_op::describe() const {
  return "group '" + group.name + "' " + collective_kind_name(kind) + " #" + std::to_string(index) + " on rank " +
         std::to_string(group.rank);
}

void ring_op::run() {
  group.run(*this);
  if (group.size > 1) group.answer_in_place(*this);
}

void ring_op::settle() {
  sending.wait_idle();  // the caller's tensors are its own again only once no write borrows them
  kept.clear();
  scratch = tensor();
}

ring_group::ring_group(caf::actor_system& system, std::string name, int rank, int size, node_address listen,
                       std::chrono::milliseconds timeout, std::size_t chunk_bytes) {
  open(system, std::move(name), rank, size, listen, nullptr, timeout, chunk_bytes);
}

ring_group::ring_group(caf::actor_system& system, std::string name, int rank, int size, node_address listen,
                       const transport_security& security, std::chrono::milliseconds timeout, std::size_t chunk_bytes) {
  open(system, std::move(name), rank, size, listen, &security, timeout, chunk_bytes);
}

void ring_group::open(caf::actor_system& system, std::string name, int rank, int size, const node_address& listen,
                      const transport_security* security, std::chrono::milliseconds timeout, std::size_t chunk_bytes) {
  if (size < 1 || rank < 0 || rank >= size)
    throw std::invalid_argument("group '" + name + "': rank " + std::to_string(rank) + " of " + std::to_string(size) +
                                " does not exist");
  if (timeout.count() <= 0) throw std::invalid_argument("group '" + name + "' needs a positive timeout");
  state_ = std::make_shared<ring_state>(system, name, rank, size, timeout, chunk_bytes);
  state_->lower = std::make_shared<peer_table>(size);
  if (security) {
    check_transport_security(*security, "group '" + name + "' rank " + std::to_string(rank));
    transport_options options;
    options.registered = false;  // the process's own transport stays registered
    options.log = [dropped = state_->dropped](const std::string& line) { dropped->add(line); };
    state_->transport = std::make_unique<guarded_transport>(system, *security, std::move(options));
    state_->middleman = state_->transport->actor();
    state_->tls = state_->transport->tls();
  } else {
    state_->middleman = transport_of(system);
    state_->tls = transport_tls_of(system);
  }
  if (size > 1) {
    try {
      state_->listener = std::make_unique<link_listener>(listen.host, state_->tls);
    } catch (const link_error& e) {
      state_->transport.reset();
      throw collective_error("group '" + name + "' rank " + std::to_string(rank) + " cannot listen for data links on " +
                             listen.host + ": " + e.what());
    }
  }
  // Not detached: CAF keeps an actor sent to another node alive until the system stops, whose destructor would
  // then wait for a detached actor's thread forever.
  state_->endpoint = system.spawn(ring_endpoint, state_->failure, state_->lower, name, static_cast<std::int32_t>(rank),
                                  static_cast<std::int32_t>(state_->listener ? state_->listener->port() : 0));
  auto publish = caf::make_function_view(state_->middleman);
  auto port = publish(caf::publish_atom::value, listen.port, caf::actor_cast<caf::strong_actor_ptr>(state_->endpoint),
                      system.message_types(state_->endpoint), listen.host, true);
  if (!port) {
    caf::anon_send_exit(state_->endpoint, caf::exit_reason::user_shutdown);
    state_->transport.reset();
    throw collective_error("group '" + name + "' rank " + std::to_string(rank) + " cannot listen on " + listen.text() +
                           ": " + system.render(port.error()));
  }
  state_->port = *port;
  state_->listen_host = listen.host;
}

ring_group::~ring_group() {
  // Every wait of the links stops within 50 ms; a pending collective fails.
  state_->engine.stop("group '" + state_->name + "' was closed on rank " + std::to_string(state_->rank));
  state_->closing = true;
  {
    std::lock_guard lock(state_->outbox_mutex);
    state_->outbox_work.notify_all();
  }
  if (state_->writer.joinable()) state_->writer.join();
  state_->to_right.reset();
  state_->from_left.reset();
  if (state_->transport) {
    // Answered before the transport of its own stops (its doorman lives in CAF's shared BASP broker).
    state_->system.middleman().unpublish(state_->endpoint, state_->port);
  } else {
    caf::anon_send(state_->middleman, caf::unpublish_atom::value, caf::actor_cast<caf::actor_addr>(state_->endpoint),
                   state_->port);
  }
  caf::anon_send_exit(state_->endpoint, caf::exit_reason::user_shutdown);
  state_->transport.reset();
}

std::uint16_t ring_group::port() const { return state_->port; }

void ring_group::connect(const std::vector<node_address>& ranks) {
  auto& s = *state_;
  if (static_cast<int>(ranks.size()) != s.size)
    throw std::invalid_argument("group '" + s.name + "' has " + std::to_string(s.size) + " ranks, got " +
                                std::to_string(ranks.size()) + " addresses");
  s.addresses = ranks;
  s.addresses[static_cast<std::size_t>(s.rank)].port = s.port;
  s.peers.assign(static_cast<std::size_t>(s.size), caf::actor{});
  s.link_ports.assign(static_cast<std::size_t>(s.size), 0);
  caf::scoped_actor self{s.system};
  const auto deadline = clock_type::now() + s.timeout;
  const auto remaining = [&] {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now()));
  };
  // Note [one connection per pair]: each rank connects only to the higher ranks and introduces itself with its
  // endpoint; the higher rank keeps that handle instead of connecting back. Two processes connecting to each other
  // at once make CAF 0.17 open two connections and drop one, killing the proxies made through it.
  for (int q = s.rank + 1; q < s.size; ++q) {
    const node_address& a = ranks[static_cast<std::size_t>(q)];
    const std::string them = "rank " + std::to_string(q) + " at " + a.text();
    caf::actor peer;
    std::string failure;
    std::string their_name;
    std::int32_t their_rank = -1, their_link_port = 0;
    int hangups = 0;
    while (their_rank < 0) {
      // A refused connection (or Note [a fresh connection's first heartbeat]) is retried until the deadline; a
      // hang-up during the handshake means another transport.
      while (!peer) {
        failure.clear();
        bool disagree = false;
        self->request(s.middleman, remaining(), caf::connect_atom::value, a.host, a.port)
            .receive([&](caf::node_id&, caf::strong_actor_ptr& ptr,
                         std::set<std::string>&) { peer = caf::actor_cast<caf::actor>(ptr); },
                     [&](caf::error& e) {
                       failure = s.system.render(e);
                       // A disagreement once retry_connect gives up on it (Note [a hang-up during the handshake]).
                       disagree = e == caf::sec::disconnect_during_handshake &&
                                  !retry_connect(e, clock_type::now(), deadline, &hangups);
                     });
        if (peer) break;
        if (disagree)
          throw collective_error("group '" + s.name + "' rank " + std::to_string(s.rank) + " cannot join " + them +
                                 ": it hung up during the handshake (" + failure +
                                 "): the ranks disagree on TLS (every rank needs a certificate signed by the same "
                                 "CA; or every rank insecure)");
        if (clock_type::now() >= deadline)
          throw collective_error("group '" + s.name + "' rank " + std::to_string(s.rank) + " cannot reach " + them +
                                 " within " + std::to_string(s.timeout.count()) + " ms" +
                                 (failure.empty() ? std::string(": it publishes no actor") : ": " + failure));
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      // Note [a hello sent again]: CAF 0.17 may drop a hello without an error when two connections between the same
      // processes open at once. A hello is idempotent: it is resent every few seconds until the deadline.
      bool again = false, reconnect = false;
      self->request(peer, std::min(remaining(), hello_attempt), ring_hello_atom::value, s.name,
                    static_cast<std::int32_t>(q), static_cast<std::int32_t>(s.rank), s.endpoint,
                    static_cast<std::int32_t>(s.listener->port()))
          .receive([&](std::string& n, std::int32_t r, std::int32_t link_port) {
                     their_name = std::move(n), their_rank = r, their_link_port = link_port;
                   },
                   [&](caf::error& e) {
                     failure = s.system.render(e);
                     again = e == caf::sec::request_timeout;
                     reconnect = e == caf::sec::request_receiver_down;
                   });
      if (their_rank >= 0) break;
      if (!(again || reconnect) || clock_type::now() >= deadline)
        throw collective_error("group '" + s.name + "' rank " + std::to_string(s.rank) + ": " + them +
                               " did not answer as a group rank: " + failure);
      if (reconnect) {
        peer = caf::actor{};
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    if (their_name != s.name || their_rank != q)
      throw collective_error("group '" + s.name + "' rank " + std::to_string(s.rank) + ": " + a.text() + " is rank " +
                             std::to_string(their_rank) + " of group '" + their_name + "', expected rank " +
                             std::to_string(q) + " of group '" + s.name + "'");
    caf::anon_send(s.endpoint, ring_watch_atom::value, peer, them);
    s.peers[static_cast<std::size_t>(q)] = peer;
    s.link_ports[static_cast<std::size_t>(q)] = static_cast<std::uint16_t>(their_link_port);
  }
  for (int q = 0; q < s.rank; ++q) {
    std::tie(s.peers[static_cast<std::size_t>(q)], s.link_ports[static_cast<std::size_t>(q)]) = s.lower->wait(q, deadline);
    if (!s.peers[static_cast<std::size_t>(q)])
      throw collective_error("group '" + s.name + "' rank " + std::to_string(s.rank) + ": rank " + std::to_string(q) +
                             " at " + ranks[static_cast<std::size_t>(q)].text() + " did not connect within " +
                             std::to_string(s.timeout.count()) + " ms" +
                             (s.dropped->text().empty() ? std::string()
                                                        : " (this rank's transport " + s.dropped->text() + ")"));
  }
  for (int q = 0; q < s.rank; ++q)  // named with its address from now on
    caf::anon_send(s.endpoint, ring_watch_atom::value, s.peers[static_cast<std::size_t>(q)],
                   "rank " + std::to_string(q) + " at " + ranks[static_cast<std::size_t>(q)].text());
  if (s.size > 1) open_links(clock_type::now() + s.timeout);  // the links' own wait: each peer is up by now
  if (s.size > 1) s.writer = std::thread([st = state_.get()] { st->write_chunks(); });
  s.engine.start();
}

void ring_group::open_links(std::chrono::steady_clock::time_point deadline) {
  // Connects to the right neighbour while accepting the left one on another thread: with TLS, a ring of ranks
  // each waiting in one handshake would hang (Note [data links]).
  auto& s = *state_;
  std::string accept_error, connect_error;
  std::vector<std::string> dropped;
  std::thread acceptor([&] {
    try {
      s.from_left = s.listener->accept(s.link_hello(s.left(), s.rank), deadline, dropped);
    } catch (const link_error& e) {
      accept_error = e.what();
    }
  });
  try {
    const node_address& right = s.addresses[static_cast<std::size_t>(s.right())];
    s.to_right = connect_link(right.host, s.link_ports[static_cast<std::size_t>(s.right())], s.tls,
                              s.link_hello(s.rank, s.right()), deadline);
  } catch (const link_error& e) {
    connect_error = e.what();
  }
  acceptor.join();
  s.listener.reset();  // no other connection is wanted
  const std::string me = "group '" + s.name + "' rank " + std::to_string(s.rank);
  if (!connect_error.empty())
    throw collective_error(me + " cannot open its data link to " + s.who(s.right()) + ": " + connect_error);
  if (!accept_error.empty()) {
    std::string why;
    for (const auto& d : dropped) why += (why.empty() ? " (dropped " : "; ") + d;
    throw collective_error(me + ": " + s.who(s.left()) + " did not open its data link within " + std::to_string(s.timeout.count()) +
                           " ms" + (why.empty() ? std::string() : why + ")"));
  }
  s.agree_on_copies(deadline);  // Note [one copy in the ring]
}

std::string ring_group::endpoint() const { return node_address{state_->listen_host, state_->port}.text(); }

void ring_group::connect(const std::vector<std::string>& endpoints) {
  std::vector<node_address> ranks;
  for (const std::string& e : endpoints) ranks.push_back(parse_node_address(e));
  connect(ranks);
}

const std::string& ring_group::name() const { return state_->name; }
bool ring_group::copies_from_left() const { return state_->in_place_left; }
int ring_group::rank() const { return state_->rank; }
int ring_group::size() const { return state_->size; }

collective_handle ring_group::all_reduce(tensor& t, reduce_op op) {
  return state_->start(collective_kind::all_reduce, op, 0, t, t);
}

collective_handle ring_group::reduce_scatter(const tensor& in, tensor& out, reduce_op op) {
  out = reduce_scatter_output(state_->name, in, out, state_->size, state_->rank);
  return state_->start(collective_kind::reduce_scatter, op, 0, in, out);
}

collective_handle ring_group::all_gather(const tensor& in, tensor& out) {
  check_all_gather(state_->name, in, out);
  return state_->start(collective_kind::all_gather, reduce_op::sum, 0, in, out);
}

collective_handle ring_group::broadcast(tensor& t, int root) {
  check_broadcast_root(state_->name, root, state_->size);
  return state_->start(collective_kind::broadcast, reduce_op::sum, root, t, t);
}

void ring_group::abort(const std::string& reason) {
  auto& s = *state_;
  s.engine.abort("rank " + std::to_string(s.rank) + " aborted the group: " + reason);
  for (auto& p : s.peers)
    if (p) caf::anon_send(p, ring_abort{s.rank, reason});
}

}  // namespace ap
