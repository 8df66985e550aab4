#include "collective/local_group.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "collective/shard.hpp"

namespace ap {

namespace {

// One rank's part of a collective: what it contributes and where its result goes.
struct contribution {
  const tensor* in = nullptr;
  tensor* out = nullptr;
  // Taken once when the collective is handed: tensor::data() counts writes, so chunks on several threads must
  // not call it on one tensor.
  const float* in_data = nullptr;
  float* out_data = nullptr;
};

// Collective number `index`, as the first rank to join described it. The fields above the counters are guarded
// by the group's mutex; the counters are atomic (Note [shared reduction]).
struct collective {
  std::size_t index = 0;
  collective_kind kind{};
  reduce_op op{};
  int root = 0;
  int first_rank = 0;
  shape_t shape;                    // the first rank's input shape
  std::vector<contribution> parts;  // by rank
  std::vector<bool> joined;         // by rank
  int joined_count = 0;
  bool handed = false;    // every rank joined and the calls match
  bool finished = false;  // every chunk done or skipped: nobody touches the ranks' tensors
  bool done = false;      // finished without an error
  std::string error;      // why it failed; empty while it may still succeed

  // Set when handed, read-only after.
  std::size_t chunks = 0;
  std::vector<std::size_t> first_chunk;  // reduce_scatter: by rank, and the total at the end
  std::atomic<std::size_t> next_chunk{0};   // may run past `chunks`
  std::atomic<std::size_t> chunks_done{0};  // chunks run or skipped; `chunks` means finished
  std::atomic<bool> cancelled{false};       // failed while running: skip the chunks not yet started
};

std::string describe(const std::string& group, const collective& c) {
  return "group '" + group + "' " + collective_kind_name(c.kind) + " #" + std::to_string(c.index);
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text;
}

// The rows of `shape` after the first axis: the length of one row.
std::size_t row_length(const shape_t& shape) {
  std::size_t n = 1;
  for (std::size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

// Why rank `rank`'s call does not fit collective `c`, or "" if it does.
std::string mismatch(const collective& c, collective_kind kind, reduce_op op, int root, const shape_t& shape,
                     int rank) {
  const std::string mine = "rank " + std::to_string(rank) + " called " + collective_kind_name(kind) + " on " +
                           shape_string(shape), theirs = "rank " + std::to_string(c.first_rank) + " called " +
                                                         collective_kind_name(c.kind) + " on " + shape_string(c.shape);
  if (kind != c.kind) return mine + ", " + theirs;
  if (kind == collective_kind::all_gather) {
    const bool same_rows = shape.size() == c.shape.size() && shape.size() > 0 &&
                           std::equal(shape.begin() + 1, shape.end(), c.shape.begin() + 1);
    if (!same_rows) return mine + ", " + theirs + ": all_gather needs the same shape after the first axis";
  } else if (shape != c.shape) {
    return mine + ", " + theirs + ": shapes differ";
  }
  if ((kind == collective_kind::all_reduce || kind == collective_kind::reduce_scatter) && op != c.op)
    return mine + " with " + reduce_op_name(op) + ", " + theirs + " with " + reduce_op_name(c.op);
  if (kind == collective_kind::broadcast && root != c.root)
    return mine + " from root " + std::to_string(root) + ", " + theirs + " from root " + std::to_string(c.root);
  return "";
}

constexpr std::size_t chunk_elements = 1 << 14;  // 64 KB: the unit of work sharing (Note [shared reduction])
constexpr std::size_t block_elements = 1 << 11;  // 8 KB: an all-reduce's accumulator stays in L1

// The sum loops: one pass over `into` per one or three ranks, still in rank order.
void add_two(float* __restrict into, const float* __restrict a, const float* __restrict b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) into[i] = a[i] + b[i];
}
void add_one(float* __restrict into, const float* __restrict a, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) into[i] += a[i];
}
void add_three(float* __restrict into, const float* __restrict a, const float* __restrict b,
               const float* __restrict c, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) into[i] = ((into[i] + a[i]) + b[i]) + c[i];
}

// Elements [begin, begin + n) of the reduction over every rank's input into `into`, in rank order
// ((in_0 + in_1) + in_2) + ..., divided by the ranks for a mean. The one place the order of the sum is decided
// (Note [local collectives]).
void reduce_range(const collective& c, std::size_t begin, std::size_t n, float* into) {
  const std::size_t ranks = c.parts.size();
  const auto in = [&](std::size_t r) { return c.parts[r].in_data + begin; };
  if (ranks == 1) {
    std::memcpy(into, in(0), n * sizeof(float));
  } else {
    add_two(into, in(0), in(1), n);
    std::size_t r = 2;
    for (; r + 3 <= ranks; r += 3) add_three(into, in(r), in(r + 1), in(r + 2), n);
    for (; r < ranks; ++r) add_one(into, in(r), n);
  }
  if (c.op == reduce_op::mean) {
    const float divisor = static_cast<float>(ranks);
    for (std::size_t i = 0; i < n; ++i) into[i] /= divisor;
  }
}

std::size_t chunks_of(std::size_t elements) { return (elements + chunk_elements - 1) / chunk_elements; }

// Splits a collective whose ranks have all joined into chunks (with the group's lock held).
void plan(collective& c) {
  const std::size_t ranks = c.parts.size();
  if (c.kind != collective_kind::all_gather)
    for (std::size_t r = 0; r < ranks; ++r) {
      contribution& p = c.parts[r];
      p.in_data = p.in->data();
      if (c.kind != collective_kind::broadcast || static_cast<int>(r) != c.root) p.out_data = p.out->data();
    }
  switch (c.kind) {
    case collective_kind::all_reduce:
    case collective_kind::broadcast: c.chunks = chunks_of(c.parts[0].in->size()); break;
    case collective_kind::reduce_scatter: {
      const std::size_t row = row_length(c.shape), rows = c.shape.empty() ? 0 : c.shape[0];
      c.first_chunk.assign(ranks + 1, 0);
      for (std::size_t r = 0; r < ranks; ++r) {
        const auto [first, last] = shard_rows(rows, ranks, r);
        c.first_chunk[r + 1] = c.first_chunk[r] + chunks_of((last - first) * row);
      }
      c.chunks = c.first_chunk[ranks];
      break;
    }
    case collective_kind::all_gather: c.chunks = ranks; break;  // one per receiving rank: it allocates
  }
}

// Chunk k of collective c; any thread may run it, once.
void run_chunk(collective& c, std::size_t k) {
  const std::size_t ranks = c.parts.size();
  switch (c.kind) {
    case collective_kind::all_reduce: {
      // Per block: sum every rank's block into an L1 accumulator before any is overwritten (in place), then copy.
      alignas(64) float accumulator[block_elements];
      const std::size_t n = c.parts[0].in->size(), end = std::min(n, (k + 1) * chunk_elements);
      for (std::size_t b = k * chunk_elements; b < end; b += block_elements) {
        const std::size_t m = std::min(block_elements, end - b);
        reduce_range(c, b, m, accumulator);
        for (auto& p : c.parts) std::memcpy(p.out_data + b, accumulator, m * sizeof(float));
      }
      break;
    }
    case collective_kind::reduce_scatter: {
      const std::size_t r = static_cast<std::size_t>(
          std::upper_bound(c.first_chunk.begin(), c.first_chunk.end(), k) - c.first_chunk.begin() - 1);
      const std::size_t row = row_length(c.shape);
      const std::size_t shard_begin = shard_rows(c.shape[0], ranks, r).first * row;
      const std::size_t shard_end = shard_rows(c.shape[0], ranks, r).second * row;
      const std::size_t b = shard_begin + (k - c.first_chunk[r]) * chunk_elements;
      const std::size_t e = std::min(shard_end, b + chunk_elements);
      reduce_range(c, b, e - b, c.parts[r].out_data + (b - shard_begin));
      break;
    }
    case collective_kind::all_gather: {
      std::size_t rows = 0;
      for (auto& p : c.parts) rows += p.in->shape()[0];
      shape_t shape = c.shape;
      shape[0] = rows;
      tensor& out = *c.parts[k].out;
      out = tensor::from_shape(shape);
      std::size_t offset = 0;
      for (auto& src : c.parts) {
        if (src.in->size() > 0) std::memcpy(out.data() + offset, src.in->data(), src.in->byte_size());
        offset += src.in->size();
      }
      break;
    }
    case collective_kind::broadcast: {
      const float* from = c.parts[static_cast<std::size_t>(c.root)].in_data;
      const std::size_t n = c.parts[0].in->size(), b = k * chunk_elements, e = std::min(n, b + chunk_elements);
      for (std::size_t r = 0; r < ranks; ++r)
        if (static_cast<int>(r) != c.root)
          std::memcpy(c.parts[r].out_data + b, from + b, (e - b) * sizeof(float));
      break;
    }
  }
}

}  // namespace

// Note [shared reduction]: every thread that would otherwise wait computes. A collective all ranks joined is
// "handed": split into chunks and queued on `ready`. The communication thread (oldest first) and every rank blocked
// in wait() (its own first) claim chunks from an atomic counter without the lock; the sum's order is fixed per
// element, so the bits do not depend on who runs a chunk. Abort skips unstarted chunks, and waiters still wait for
// chunks in progress, so no rank gets its tensors back while another thread writes them. The timeout applies until
// a collective is handed.
struct local_group_state {
  std::string name;
  int size = 0;
  std::chrono::milliseconds timeout{};
  std::mutex mutex;
  std::condition_variable changed;  // finished, failed, ready to share, or aborted
  std::condition_variable work;     // ready for the communication thread, or stop
  std::vector<std::size_t> calls_made;                       // by rank: collectives started so far
  std::map<std::size_t, std::shared_ptr<collective>> open;   // joined by some ranks, not yet all
  std::deque<std::shared_ptr<collective>> ready;             // handed, maybe with chunks to claim
  std::vector<std::shared_ptr<collective>> running;          // handed, not finished
  std::string aborted;  // empty while the group is healthy
  bool stopping = false;

  // Every rank has joined `c` and the calls match (with the lock held).
  void hand(const std::shared_ptr<collective>& c) {
    c->handed = true;
    plan(*c);
    if (c->chunks == 0) {
      c->finished = c->done = true;
      changed.notify_all();
      return;
    }
    running.push_back(c);
    ready.push_back(c);
    work.notify_one();
    // Waiting ranks help with the chunks the communication thread does not take.
    for (std::size_t i = 1; i < std::min<std::size_t>(c->chunks, static_cast<std::size_t>(size) + 1); ++i)
      changed.notify_one();
  }

  // A collective with chunks to claim, `own` first, then the oldest (with the lock held); null if none.
  std::shared_ptr<collective> claimable(const std::shared_ptr<collective>& own) {
    if (own && own->handed && !own->finished && own->next_chunk.load(std::memory_order_relaxed) < own->chunks)
      return own;
    while (!ready.empty()) {
      auto& front = ready.front();
      if (front->next_chunk.load(std::memory_order_relaxed) < front->chunks) return front;
      ready.pop_front();  // every chunk claimed: its workers finish it
    }
    return nullptr;
  }

  // Claims and runs up to `max_chunks` chunks of `c` (without the lock), fewer if none are left.
  void work_on(collective& c, std::size_t max_chunks) {
    for (std::size_t n = 0; n < max_chunks; ++n) {
      std::size_t k = 0, count = 1;
      if (c.cancelled.load(std::memory_order_acquire)) {  // claim every chunk left, to skip them
        k = c.next_chunk.exchange(c.chunks, std::memory_order_relaxed);
        if (k >= c.chunks) return;
        count = c.chunks - k;
      } else {
        k = c.next_chunk.fetch_add(1, std::memory_order_relaxed);
        if (k >= c.chunks) return;
        try {
          run_chunk(c, k);
        } catch (const std::exception& e) {
          std::lock_guard lock(mutex);
          if (c.error.empty()) c.error = describe(name, c) + " failed: " + e.what();
          c.cancelled.store(true, std::memory_order_release);
        }
      }
      if (c.chunks_done.fetch_add(count, std::memory_order_acq_rel) + count == c.chunks) {
        finish(c);
        return;
      }
    }
  }

  // The last chunk of `c` is done: nobody touches its tensors any more.
  void finish(collective& c) {
    std::lock_guard lock(mutex);
    c.finished = true;
    c.done = c.error.empty();
    running.erase(std::find_if(running.begin(), running.end(), [&](auto& r) { return r.get() == &c; }));
    changed.notify_all();
    if (stopping) work.notify_all();
  }

  // The communication thread: runs ready chunks, oldest first, until stopped and every handed one finished.
  void serve() {
    std::unique_lock lock(mutex);
    for (;;) {
      if (auto c = claimable(nullptr)) {
        lock.unlock();
        work_on(*c, c->chunks);
        lock.lock();
        continue;
      }
      if (stopping && running.empty()) return;
      work.wait(lock);
    }
  }

  // Fails every collective not yet handed (lock held); `running_too` (an abort): cancels the running ones too.
  void fail_open(const std::string& why, bool running_too) {
    if (aborted.empty()) aborted = why;
    for (auto& [index, c] : open)
      if (c->error.empty()) c->error = describe(name, *c) + ": " + why;
    if (running_too)
      for (auto& c : running) {
        if (c->error.empty()) c->error = describe(name, *c) + ": " + why;
        c->cancelled.store(true, std::memory_order_release);
      }
    changed.notify_all();
  }
};

namespace {

class local_handle final : public collective_handle::state {
 public:
  local_handle(std::shared_ptr<local_group_state> g, std::shared_ptr<collective> c, int rank)
      : g_(std::move(g)), c_(std::move(c)), rank_(rank) {}

  // Helps with ready collectives while it waits (Note [shared reduction]).
  void wait() override {
    std::unique_lock lock(g_->mutex);
    const auto deadline = std::chrono::steady_clock::now() + g_->timeout;
    for (;;) {
      if (c_->finished) {
        if (c_->done) return;
        throw collective_error(c_->error + " (seen by rank " + std::to_string(rank_) + ")");
      }
      if (!c_->handed) {
        if (!c_->error.empty()) throw collective_error(c_->error + " (seen by rank " + std::to_string(rank_) + ")");
        if (std::chrono::steady_clock::now() >= deadline) throw never_joined();
      }
      if (auto c = g_->claimable(c_)) {
        lock.unlock();
        // All of its own collective's chunks; one of another's, then look again.
        g_->work_on(*c, c == c_ ? c->chunks : 1);
        lock.lock();
      } else if (c_->handed) {
        g_->changed.wait(lock);  // its last chunks run on other threads; they wait on no one
      } else {
        g_->changed.wait_until(lock, deadline);
      }
    }
  }

  bool ready() const override {
    std::lock_guard lock(g_->mutex);
    return c_->finished || (!c_->handed && !c_->error.empty());
  }

 private:
  // With the lock held.
  collective_error never_joined() const {
    std::vector<int> missing;
    for (int r = 0; r < g_->size; ++r)
      if (!c_->joined[static_cast<std::size_t>(r)]) missing.push_back(r);
    return collective_error(describe(g_->name, *c_) + ": rank " + std::to_string(rank_) + " waited " +
                            std::to_string(g_->timeout.count()) + " ms, but " + rank_list(missing) +
                            " never joined");
  }

  std::shared_ptr<local_group_state> g_;
  std::shared_ptr<collective> c_;
  int rank_;
};

class local_member final : public process_group {
 public:
  local_member(std::shared_ptr<local_group_state> g, int rank) : g_(std::move(g)), rank_(rank) {}

  const std::string& name() const override { return g_->name; }
  int rank() const override { return rank_; }
  int size() const override { return g_->size; }

  collective_handle all_reduce(tensor& t, reduce_op op) override {
    return join(collective_kind::all_reduce, op, 0, t, t);
  }
  collective_handle reduce_scatter(const tensor& in, tensor& out, reduce_op op) override {
    refuse_aliasing(collective_kind::reduce_scatter, in, out);
    check_float32(collective_kind::reduce_scatter, in);
    shape_t shard = in.shape();
    if (!shard.empty()) {
      const auto [first, last] = shard_rows(shard[0], static_cast<std::size_t>(g_->size),
                                            static_cast<std::size_t>(rank_));
      shard[0] = last - first;
    }
    out = tensor::from_shape(shard);  // allocated by the caller's thread, filled by the collective
    return join(collective_kind::reduce_scatter, op, 0, in, out);
  }
  collective_handle all_gather(const tensor& in, tensor& out) override {
    refuse_aliasing(collective_kind::all_gather, in, out);
    return join(collective_kind::all_gather, reduce_op::sum, 0, in, out);
  }
  collective_handle broadcast(tensor& t, int root) override {
    if (root < 0 || root >= g_->size)
      throw std::out_of_range("group '" + g_->name + "' broadcast from root " + std::to_string(root) +
                              ": the group has ranks 0.." + std::to_string(g_->size - 1));
    return join(collective_kind::broadcast, reduce_op::sum, root, t, t);
  }

  void abort(const std::string& reason) override {
    std::lock_guard lock(g_->mutex);
    g_->fail_open("rank " + std::to_string(rank_) + " aborted the group: " + reason, true);
  }

 private:
  void check_float32(collective_kind kind, const tensor& t) const {
    if (t.type() != dtype::float32)
      throw std::invalid_argument("group '" + g_->name + "' " + collective_kind_name(kind) + " on rank " +
                                  std::to_string(rank_) + ": the tensor is " + dtype_name(t.type()) + " " +
                                  shape_string(t.shape()) + ", collectives take float32");
  }
  void refuse_aliasing(collective_kind kind, const tensor& in, const tensor& out) const {
    if (&in == &out)
      throw std::invalid_argument("group '" + g_->name + "' " + collective_kind_name(kind) + " on rank " +
                                  std::to_string(rank_) + ": in and out must be different tensors");
  }

  collective_handle join(collective_kind kind, reduce_op op, int root, const tensor& in, tensor& out) {
    check_float32(kind, in);
    if (kind == collective_kind::all_gather && in.dimension() == 0)
      throw std::invalid_argument("group '" + g_->name + "' all_gather on rank " + std::to_string(rank_) +
                                  ": a scalar has no rows to gather");
    std::lock_guard lock(g_->mutex);
    const std::size_t index = g_->calls_made[static_cast<std::size_t>(rank_)]++;
    auto& slot = g_->open[index];
    if (!slot) {
      slot = std::make_shared<collective>();
      slot->index = index;
      slot->kind = kind;
      slot->op = op;
      slot->root = root;
      slot->first_rank = rank_;
      slot->shape = in.shape();
      slot->parts.resize(static_cast<std::size_t>(g_->size));
      slot->joined.assign(static_cast<std::size_t>(g_->size), false);
      if (!g_->aborted.empty()) slot->error = describe(g_->name, *slot) + ": " + g_->aborted;
    } else if (slot->error.empty()) {
      const std::string why = mismatch(*slot, kind, op, root, in.shape(), rank_);
      if (!why.empty()) {
        slot->error = "group '" + g_->name + "' collective #" + std::to_string(index) + " does not match: " + why;
        g_->changed.notify_all();
      }
    }
    auto c = slot;
    c->parts[static_cast<std::size_t>(rank_)] = contribution{&in, &out};
    c->joined[static_cast<std::size_t>(rank_)] = true;
    if (++c->joined_count == g_->size) {
      g_->open.erase(index);
      if (c->error.empty()) g_->hand(c);
    }
    return collective_handle(std::make_shared<local_handle>(g_, c, rank_));
  }

  std::shared_ptr<local_group_state> g_;
  int rank_;
};

}  // namespace

local_group::local_group(std::string name, int size, std::chrono::milliseconds timeout)
    : state_(std::make_shared<local_group_state>()) {
  if (size < 1)
    throw std::invalid_argument("group '" + name + "' needs at least one rank, got " + std::to_string(size));
  if (timeout.count() <= 0)
    throw std::invalid_argument("group '" + name + "' needs a positive timeout, got " +
                                std::to_string(timeout.count()) + " ms");
  state_->name = std::move(name);
  state_->size = size;
  state_->timeout = timeout;
  state_->calls_made.assign(static_cast<std::size_t>(size), 0);
  communication_ = std::thread([s = state_] { s->serve(); });
}

local_group::~local_group() {
  {
    std::lock_guard lock(state_->mutex);
    state_->stopping = true;
    state_->fail_open("group '" + state_->name + "' was destroyed", false);  // handed ones complete
    state_->work.notify_all();
  }
  communication_.join();
}

std::unique_ptr<process_group> local_group::member(int rank) {
  if (rank < 0 || rank >= state_->size)
    throw std::out_of_range("group '" + state_->name + "' has ranks 0.." + std::to_string(state_->size - 1) +
                            ", not rank " + std::to_string(rank));
  return std::make_unique<local_member>(state_, rank);
}

const std::string& local_group::name() const { return state_->name; }
int local_group::size() const { return state_->size; }

}  // namespace ap
