#include "collective/gloo_group.hpp"

#include <algorithm>
#include <cstring>

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/tcp/pair.h>

#include "collective/comm_thread.hpp"
#include "collective/group_checks.hpp"
#include "collective/shard.hpp"

namespace ap {

namespace {

// A gloo context over pairs this group connected itself (Note [gloo backend]).
class connected_context final : public gloo::Context {
 public:
  connected_context(int rank, int size, std::shared_ptr<gloo::transport::Device> device,
                    std::shared_ptr<gloo::transport::Context> pairs, std::chrono::milliseconds timeout)
      : gloo::Context(rank, size) {
    device_ = std::move(device);
    transportContext_ = std::move(pairs);
    setTimeout(timeout);
  }
};

// Reaches the TCP pair's protected signalExceptionExternal through a derived class (Note [gloo backend]); it takes
// the pair's lock itself.
struct pair_access : gloo::transport::tcp::Pair {
  using gloo::transport::tcp::Pair::signalExceptionExternal;
};

void fail_pair(gloo::transport::Pair& pair, const std::string& why) {
  if (auto* tcp = dynamic_cast<gloo::transport::tcp::Pair*>(&pair)) (tcp->*(&pair_access::signalExceptionExternal))(why);
}

// c = a + b, vectorised by the compiler (Debian's gloo builds sum<float> without AVX).
void add_floats(void* c, const void* a, const void* b, std::size_t n) {
  float* __restrict out = static_cast<float*>(c);
  const float* __restrict x = static_cast<const float*>(a);
  const float* __restrict y = static_cast<const float*>(b);
  if (out == x) {
    for (std::size_t i = 0; i < n; ++i) out[i] += y[i];
  } else {
    for (std::size_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
  }
}

// The largest segment of gloo's ring all-reduce (two in flight); larger than gloo's 1 MB default, which streams
// large tensors more slowly.
constexpr std::size_t max_segment_bytes = std::size_t{16} << 20;

std::string to_hex(const std::vector<char>& bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string text;
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    text += digits[b >> 4];
    text += digits[b & 15];
  }
  return text;
}

std::vector<char> from_hex(const std::string& text, const std::string& what) {
  const auto value = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw collective_error(what + " is not a gloo endpoint (hex digits expected, got '" + text.substr(0, 40) + "')");
  };
  if (text.size() % 2 != 0) throw collective_error(what + " is not a gloo endpoint (an odd number of hex digits)");
  std::vector<char> bytes;
  for (std::size_t i = 0; i < text.size(); i += 2)
    bytes.push_back(static_cast<char>(value(text[i]) * 16 + value(text[i + 1])));
  return bytes;
}

// A collective for the communication thread (Note [communication thread]).
struct gloo_op final : comm_op {
  explicit gloo_op(gloo_state& g) : group(g) {}
  std::string describe() const override;
  void run() override;

  gloo_state& group;
  collective_kind kind{};
  reduce_op op{};
  int root = 0;
  const tensor* in = nullptr;
  tensor* out = nullptr;
};

}  // namespace

struct gloo_state {
  std::string name;
  int rank = 0, size = 1;
  std::chrono::milliseconds timeout{};
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::transport::Context> pairs;
  std::shared_ptr<gloo::Context> context;  // once connected
  // A failure closes the sockets, so a peer waiting on this rank fails now (Note [communication thread]).
  comm_thread engine{[this](const std::string& why) { close_pairs(why); }};

  collective_handle start(collective_kind kind, reduce_op op, int root, const tensor& in, tensor& out) {
    if (!engine.started())
      throw collective_error("group '" + name + "' rank " + std::to_string(rank) + ": " + collective_kind_name(kind) +
                             " before connect()");
    auto job = std::make_shared<gloo_op>(*this);
    job->kind = kind, job->op = op, job->root = root, job->in = &in, job->out = &out;
    return engine.submit(job);
  }

  void run(gloo_op& op) {
    const auto tag = static_cast<std::uint32_t>(op.index);
    switch (op.kind) {
      case collective_kind::all_reduce:
        reduce(*op.out, op.op, tag);
        return;
      case collective_kind::reduce_scatter: {
        tensor work = *op.in;  // `in` stays the caller's
        reduce(work, op.op, tag);
        const shape_t& shape = work.shape();
        const std::size_t rows = shape.empty() ? 1 : shape[0];
        const std::size_t unit = shape.empty() ? 1 : work.size() / std::max<std::size_t>(rows, 1);
        const auto [first, last] = shard_rows(rows, static_cast<std::size_t>(size), static_cast<std::size_t>(rank));
        if (last > first) std::memcpy(op.out->data(), work.data() + first * unit, (last - first) * unit * sizeof(float));
        return;
      }
      case collective_kind::all_gather:
        gather(op, tag);
        return;
      case collective_kind::broadcast: {
        if (size == 1 || op.out->size() == 0) return;
        gloo::BroadcastOptions o(context);
        o.setOutput(op.out->data(), op.out->size());
        o.setRoot(op.root);
        o.setTag(tag);
        o.setTimeout(timeout);
        gloo::broadcast(o);
        return;
      }
    }
  }

  void reduce(tensor& t, reduce_op op, std::uint32_t tag) {
    if (size > 1 && t.size() > 0) {
      gloo::AllreduceOptions o(context);
      o.setOutput(t.data(), t.size());
      o.setReduceFunction(add_floats);
      o.setMaxSegmentSize(max_segment_bytes);
      o.setTag(tag);
      o.setTimeout(timeout);
      gloo::allreduce(o);
    }
    if (op == reduce_op::mean) {
      float* d = t.data();
      for (std::size_t i = 0; i < t.size(); ++i) d[i] /= static_cast<float>(size);
    }
  }

  // Every rank's counts (allgather), then the rows (allgatherv), checked to be whole rows of this rank's shape.
  void gather(gloo_op& op, std::uint32_t tag) {
    const tensor& in = *op.in;
    std::vector<std::size_t> counts(static_cast<std::size_t>(size), 0);
    counts[static_cast<std::size_t>(rank)] = in.size();
    if (size > 1) {
      std::uint64_t mine = in.size();
      std::vector<std::uint64_t> all(static_cast<std::size_t>(size));
      gloo::AllgatherOptions o(context);
      o.setInput(&mine, 1);
      o.setOutput(all.data(), all.size());
      o.setTag(tag);
      o.setTimeout(timeout);
      gloo::allgather(o);
      for (int r = 0; r < size; ++r) counts[static_cast<std::size_t>(r)] = all[static_cast<std::size_t>(r)];
    }
    const std::size_t row = in.size() / std::max<std::size_t>(in.shape()[0], 1);
    std::size_t rows = 0, total = 0;
    for (int r = 0; r < size; ++r) {
      const std::size_t c = counts[static_cast<std::size_t>(r)];
      if (row == 0 ? c != 0 : c % row != 0)
        throw collective_error("rank " + std::to_string(r) + " sent " + std::to_string(c) +
                               " floats, not whole rows of " + std::to_string(row) +
                               ": the ranks' shapes differ after the first axis");
      rows += row == 0 ? 0 : c / row;
      total += c;
    }
    shape_t shape = in.shape();
    shape[0] = rows;
    tensor out = tensor::from_shape(shape);
    if (size == 1) {
      if (total > 0) std::memcpy(out.data(), in.data(), total * sizeof(float));
    } else if (total > 0) {
      gloo::AllgathervOptions o(context);
      o.setInput(const_cast<float*>(in.data()), in.size());
      o.setOutput(out.data(), counts);
      o.setTag(tag + (1u << 31));  // a tag of its own: the counts' allgather used `tag`
      o.setTimeout(timeout);
      gloo::allgatherv(o);
    }
    *op.out = std::move(out);
  }

  // Fails whatever waits in gloo and closes the sockets, so every peer's wait on this rank ends too.
  void close_pairs(const std::string& why) {
    for (int r = 0; r < size; ++r)
      if (r != rank) fail_pair(*pairs->getPair(r), why);
  }
};

std::string gloo_op::describe() const {
  return "group '" + group.name + "' " + collective_kind_name(kind) + " #" + std::to_string(index) + " on rank " +
         std::to_string(group.rank) + " (gloo)";
}

void gloo_op::run() {
  try {
    group.run(*this);
  } catch (const gloo::Exception& e) {
    throw collective_error(std::string("gloo: ") + e.what());
  }
}

gloo_group::gloo_group(std::string name, int rank, int size, const std::string& host, std::chrono::milliseconds timeout)
    : state_(std::make_shared<gloo_state>()) {
  auto& s = *state_;
  s.name = std::move(name), s.rank = rank, s.size = size, s.timeout = timeout;
  if (size < 1 || rank < 0 || rank >= size)
    throw std::invalid_argument("group '" + s.name + "': rank " + std::to_string(rank) + " of " + std::to_string(size));
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = host;
    s.device = gloo::transport::tcp::CreateDevice(attr);
    s.pairs = s.device->createContext(rank, size);
    s.pairs->setTimeout(timeout);
    for (int r = 0; r < size; ++r)
      if (r != rank) s.pairs->createPair(r);
  } catch (const std::exception& e) {
    throw collective_error("group '" + s.name + "' rank " + std::to_string(rank) + ": gloo cannot listen on " + host +
                           ": " + e.what());
  }
}

gloo_group::~gloo_group() { state_->engine.stop("the group is gone"); }

std::string gloo_group::endpoint() const {
  auto& s = *state_;
  std::vector<char> all;
  for (int r = 0; r < s.size; ++r) {
    if (r == s.rank) continue;
    const std::vector<char> bytes = s.pairs->getPair(r)->address().bytes();
    all.insert(all.end(), bytes.begin(), bytes.end());
  }
  return to_hex(all);
}

void gloo_group::connect(const std::vector<std::string>& endpoints) {
  auto& s = *state_;
  const std::string me = "group '" + s.name + "' rank " + std::to_string(s.rank);
  if (endpoints.size() != static_cast<std::size_t>(s.size))
    throw std::invalid_argument(me + ": " + std::to_string(endpoints.size()) + " endpoints for " + std::to_string(s.size) +
                                " ranks");
  // Rank r's endpoint: one address per other rank, in rank order.
  for (int r = 0; r < s.size; ++r) {
    if (r == s.rank) continue;
    const std::string peer = "rank " + std::to_string(r) + "'s endpoint";
    const std::vector<char> all = from_hex(endpoints[static_cast<std::size_t>(r)], me + ": " + peer);
    if (s.size < 2 || all.empty() || all.size() % static_cast<std::size_t>(s.size - 1) != 0)
      throw collective_error(me + ": " + peer + " holds " + std::to_string(all.size()) + " bytes, not one address for each of " +
                             std::to_string(s.size - 1) + " ranks");
    const std::size_t each = all.size() / static_cast<std::size_t>(s.size - 1);
    const std::size_t slot = static_cast<std::size_t>(s.rank > r ? s.rank - 1 : s.rank);
    try {
      s.pairs->getPair(r)->connect(std::vector<char>(all.begin() + static_cast<long>(slot * each),
                                                     all.begin() + static_cast<long>((slot + 1) * each)));
    } catch (const std::exception& e) {
      throw collective_error(me + ": cannot connect to rank " + std::to_string(r) + " within " +
                             std::to_string(s.timeout.count()) + " ms (gloo: " + e.what() + ")");
    }
  }
  s.context = std::make_shared<connected_context>(s.rank, s.size, s.device, s.pairs, s.timeout);
  s.engine.start();
}

const std::string& gloo_group::name() const { return state_->name; }
int gloo_group::rank() const { return state_->rank; }
int gloo_group::size() const { return state_->size; }

collective_handle gloo_group::all_reduce(tensor& t, reduce_op op) {
  return state_->start(collective_kind::all_reduce, op, 0, t, t);
}

collective_handle gloo_group::reduce_scatter(const tensor& in, tensor& out, reduce_op op) {
  out = reduce_scatter_output(state_->name, in, out, state_->size, state_->rank);
  return state_->start(collective_kind::reduce_scatter, op, 0, in, out);
}

collective_handle gloo_group::all_gather(const tensor& in, tensor& out) {
  check_all_gather(state_->name, in, out);
  return state_->start(collective_kind::all_gather, reduce_op::sum, 0, in, out);
}

collective_handle gloo_group::broadcast(tensor& t, int root) {
  check_broadcast_root(state_->name, root, state_->size);
  return state_->start(collective_kind::broadcast, reduce_op::sum, root, t, t);
}

void gloo_group::abort(const std::string& reason) {
  state_->engine.abort("rank " + std::to_string(state_->rank) + " aborted the group: " + reason);
}

}  // namespace ap
