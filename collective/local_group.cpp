#include "collective/local_group.hpp"

#include <algorithm>
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
};

// Collective number `index` of the group, as the first rank to join described it.
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
  bool handed = false;  // given to the communication thread: it will complete
  bool done = false;
  std::string error;  // why it failed; empty while it may still succeed
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

// Elements [begin, end) of the reduction over every rank's input, in rank order, into `into` (end-begin
// floats). The one place the order of the sum is decided (Note [local collectives]).
void reduce_range(const collective& c, std::size_t begin, std::size_t end, float* into) {
  const std::size_t n = end - begin;
  std::memcpy(into, c.parts[0].in->data() + begin, n * sizeof(float));
  for (std::size_t r = 1; r < c.parts.size(); ++r) {
    const float* in = c.parts[r].in->data() + begin;
    for (std::size_t i = 0; i < n; ++i) into[i] += in[i];
  }
  if (c.op == reduce_op::mean) {
    const float ranks = static_cast<float>(c.parts.size());
    for (std::size_t i = 0; i < n; ++i) into[i] /= ranks;
  }
}

constexpr std::size_t chunk_elements = 1 << 14;  // 64 KB: the accumulator stays in L2

void run(collective& c) {
  const std::size_t ranks = c.parts.size();
  std::vector<float> accumulator(chunk_elements);
  switch (c.kind) {
    case collective_kind::all_reduce: {
      const std::size_t n = c.parts[0].in->size();
      for (std::size_t b = 0; b < n; b += chunk_elements) {
        const std::size_t e = std::min(n, b + chunk_elements);
        reduce_range(c, b, e, accumulator.data());  // reads every rank's chunk before any is overwritten
        for (auto& p : c.parts) std::memcpy(p.out->data() + b, accumulator.data(), (e - b) * sizeof(float));
      }
      break;
    }
    case collective_kind::reduce_scatter: {
      const std::size_t row = row_length(c.shape);
      for (std::size_t r = 0; r < ranks; ++r) {
        const auto [first, last] = shard_rows(c.shape.empty() ? 0 : c.shape[0], ranks, r);
        for (std::size_t b = first * row; b < last * row; b += chunk_elements) {
          const std::size_t e = std::min(last * row, b + chunk_elements);
          reduce_range(c, b, e, c.parts[r].out->data() + (b - first * row));
        }
      }
      break;
    }
    case collective_kind::all_gather: {
      std::size_t rows = 0;
      for (auto& p : c.parts) rows += p.in->shape()[0];
      shape_t shape = c.shape;
      shape[0] = rows;
      for (auto& p : c.parts) *p.out = tensor::from_shape(shape);
      std::size_t offset = 0;
      for (auto& src : c.parts) {
        for (auto& dst : c.parts)
          if (src.in->size() > 0) std::memcpy(dst.out->data() + offset, src.in->data(), src.in->byte_size());
        offset += src.in->size();
      }
      break;
    }
    case collective_kind::broadcast: {
      const tensor& from = *c.parts[static_cast<std::size_t>(c.root)].in;
      for (std::size_t r = 0; r < ranks; ++r)
        if (static_cast<int>(r) != c.root && from.size() > 0)
          std::memcpy(c.parts[r].out->data(), from.data(), from.byte_size());
      break;
    }
  }
}

}  // namespace

struct local_group_state {
  std::string name;
  int size = 0;
  std::chrono::milliseconds timeout{};
  std::mutex mutex;
  std::condition_variable changed;  // a collective finished or failed, or the group was aborted
  std::condition_variable work;     // a collective is ready for the communication thread, or stop
  std::vector<std::size_t> calls_made;                       // by rank: collectives started so far
  std::map<std::size_t, std::shared_ptr<collective>> open;   // joined by some ranks, not yet all
  std::deque<std::shared_ptr<collective>> ready;             // joined by all, for the thread
  std::string aborted;  // why every unfinished collective fails; empty while the group is healthy
  bool stopping = false;

  // The communication thread: runs ready collectives in order until stopped and drained.
  void serve() {
    std::unique_lock lock(mutex);
    for (;;) {
      work.wait(lock, [&] { return stopping || !ready.empty(); });
      if (ready.empty()) return;
      auto c = std::move(ready.front());
      ready.pop_front();
      lock.unlock();
      std::string error;
      try {
        run(*c);
      } catch (const std::exception& e) {
        error = describe(name, *c) + " failed: " + e.what();
      }
      lock.lock();
      c->done = error.empty();
      c->error = error;
      changed.notify_all();
    }
  }

  // Fails every collective that has not been handed to the thread (with the lock held).
  void fail_open(const std::string& why) {
    if (aborted.empty()) aborted = why;
    for (auto& [index, c] : open)
      if (c->error.empty()) c->error = describe(name, *c) + ": " + why;
    changed.notify_all();
  }
};

namespace {

class local_handle final : public collective_handle::state {
 public:
  local_handle(std::shared_ptr<local_group_state> g, std::shared_ptr<collective> c, int rank)
      : g_(std::move(g)), c_(std::move(c)), rank_(rank) {}

  void wait() override {
    std::unique_lock lock(g_->mutex);
    const bool settled =
        g_->changed.wait_for(lock, g_->timeout, [&] { return c_->done || !c_->error.empty() || c_->handed; });
    // A handed collective completes without waiting on anyone: wait for it, even past the timeout, so
    // the caller never gets its tensors back while the thread still writes them.
    if (c_->handed) g_->changed.wait(lock, [&] { return c_->done || !c_->error.empty(); });
    if (c_->done) return;
    if (!c_->error.empty()) throw collective_error(c_->error + " (seen by rank " + std::to_string(rank_) + ")");
    (void)settled;
    std::vector<int> missing;
    for (int r = 0; r < g_->size; ++r)
      if (!c_->joined[static_cast<std::size_t>(r)]) missing.push_back(r);
    throw collective_error(describe(g_->name, *c_) + ": rank " + std::to_string(rank_) + " waited " +
                           std::to_string(g_->timeout.count()) + " ms, but " + rank_list(missing) +
                           " never joined");
  }

  bool ready() const override {
    std::lock_guard lock(g_->mutex);
    return c_->done || !c_->error.empty();
  }

 private:
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
    out = tensor::from_shape(shard);  // allocated here, by the caller's thread; filled by the collective
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
    g_->fail_open("rank " + std::to_string(rank_) + " aborted the group: " + reason);
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
      if (c->error.empty()) {
        c->handed = true;
        g_->ready.push_back(c);
        g_->work.notify_one();
      }
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
    state_->fail_open("group '" + state_->name + "' was destroyed");
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
