#include "collective/hierarchical_group.hpp"

#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>

#include "collective/comm_thread.hpp"
#include "collective/group_checks.hpp"
#include "collective/local_group.hpp"
#include "collective/shard.hpp"

namespace ap {
namespace {

// This process's local groups by key: the first rank of a key makes the group, the others join; a key whose group
// is gone or has handed this local rank already starts a new one.
struct shared_local {
  std::weak_ptr<local_group> group;
  std::vector<bool> taken;
};

std::shared_ptr<local_group> local_group_for(const std::string& key, const std::string& name, int local_rank,
                                             int local_size, std::chrono::milliseconds timeout) {
  static std::mutex mutex;
  static std::map<std::string, shared_local> groups;
  std::lock_guard lock(mutex);
  for (auto it = groups.begin(); it != groups.end();) it = it->second.group.expired() ? groups.erase(it) : std::next(it);
  shared_local& entry = groups[key];
  std::shared_ptr<local_group> group = entry.group.lock();
  if (!group || group->size() != local_size || entry.taken.at(static_cast<std::size_t>(local_rank))) {
    group = std::make_shared<local_group>(name + " in this process", local_size, timeout);
    entry = {group, std::vector<bool>(static_cast<std::size_t>(local_size), false)};
  }
  entry.taken[static_cast<std::size_t>(local_rank)] = true;
  return group;
}

constexpr float largest_exact_count = 16777216.0f;  // 2^24: every whole number below it is exact in a float

// A collective for the communication thread (Note [communication thread]): its steps, in `work`.
struct hierarchical_op final : comm_op {
  hierarchical_op(const hierarchical_state& g, std::string w, std::function<void()> f)
      : group(g), what(std::move(w)), work(std::move(f)) {}
  std::string describe() const override;
  void run() override { work(); }

  const hierarchical_state& group;
  std::string what;  // "all_reduce"
  std::function<void()> work;
};

}  // namespace

struct hierarchical_state {
  std::string name;
  int rank = 0, size = 1;
  colocated_rank place;
  std::shared_ptr<local_group> local_owner;  // null when this process holds one rank of the group
  std::unique_ptr<process_group> local;
  std::unique_ptr<network_group> inner;  // the leader's, when the group spans processes
  // A failure aborts both parts, so the other ranks fail now, not after their timeout.
  comm_thread engine{[this](const std::string& why) { abort_parts(why); }};

  // The three steps of Note [hierarchical collectives]; `t` becomes the sum over every rank of the group.
  void sum(tensor& t) {
    if (local) local->all_reduce(t).wait();
    if (place.processes == 1) return;  // the local sum is the whole sum
    if (inner) inner->all_reduce(t).wait();
    if (local) local->broadcast(t, 0).wait();
  }

  void sum(tensor& t, reduce_op op) {
    sum(t);
    if (op == reduce_op::mean) {
      float* d = t.data();
      for (std::size_t i = 0; i < t.size(); ++i) d[i] /= static_cast<float>(size);
    }
  }

  // Row counts and widths first, then each rank's rows at its offset in zeros.
  void gather(const tensor& in, tensor& out) {
    const shape_t& shape = in.shape();
    const std::size_t rows = shape[0], width = rows == 0 ? 0 : in.size() / rows;
    std::size_t row_floats = 1;
    for (std::size_t i = 1; i < shape.size(); ++i) row_floats *= shape[i];
    tensor counts = tensor::from_shape({2 * static_cast<std::size_t>(size)});
    counts.fill(0.0f);
    counts.data()[2 * rank] = static_cast<float>(rows);
    counts.data()[2 * rank + 1] = static_cast<float>(row_floats);
    sum(counts);
    std::size_t total = 0, offset = 0;
    for (int r = 0; r < size; ++r) {
      const auto r_rows = static_cast<std::size_t>(counts.data()[2 * r]);
      if (static_cast<std::size_t>(counts.data()[2 * r + 1]) != row_floats)
        throw collective_error("group '" + name + "' all_gather: rank " + std::to_string(r) + " has rows of " +
                               std::to_string(static_cast<std::size_t>(counts.data()[2 * r + 1])) + " floats, rank " +
                               std::to_string(rank) + " of " + std::to_string(row_floats) +
                               ": the ranks' shapes differ after the first axis");
      if (r < rank) offset += r_rows;
      total += r_rows;
    }
    shape_t all_shape = shape;
    all_shape[0] = total;
    tensor all = tensor::from_shape(all_shape);
    all.fill(0.0f);
    if (rows > 0) std::memcpy(all.data() + offset * width, in.data(), in.size() * sizeof(float));
    sum(all);
    out = std::move(all);
  }

  void abort_parts(const std::string& why) {
    if (local) local->abort(why);
    if (inner) inner->abort(why);
  }

  collective_handle start(std::string what, std::function<void()> run) {
    return engine.submit(std::make_shared<hierarchical_op>(*this, std::move(what), std::move(run)));
  }
};

std::string hierarchical_op::describe() const {
  return "group '" + group.name + "' rank " + std::to_string(group.rank) + " " + what;
}

hierarchical_group::hierarchical_group(std::string name, int rank, int size, colocated_rank place,
                                       const std::string& process_key, std::unique_ptr<network_group> inner,
                                       std::chrono::milliseconds timeout)
    : state_(std::make_shared<hierarchical_state>()) {
  auto& s = *state_;
  const std::string me = "group '" + name + "' rank " + std::to_string(rank);
  if (size < 1 || rank < 0 || rank >= size) throw std::invalid_argument(me + ": not a rank of a group of " + std::to_string(size));
  if (place.local_size < 1 || place.local_rank < 0 || place.local_rank >= place.local_size || place.processes < 1 ||
      place.process < 0 || place.process >= place.processes || place.local_size > size || place.processes > size)
    throw std::invalid_argument(me + ": local rank " + std::to_string(place.local_rank) + " of " +
                                std::to_string(place.local_size) + " in process " + std::to_string(place.process) + " of " +
                                std::to_string(place.processes) + " does not fit a group of " + std::to_string(size));
  const bool leads = place.local_rank == 0 && place.processes > 1;
  if (leads != (inner != nullptr))
    throw std::invalid_argument(me + (leads ? ": a process's leader needs the group across processes"
                                            : ": only a process's leader takes part in the group across processes"));
  if (inner && (inner->rank() != place.process || inner->size() != place.processes))
    throw std::invalid_argument(me + ": the group across processes has rank " + std::to_string(inner->rank()) + " of " +
                                std::to_string(inner->size()) + ", not process " + std::to_string(place.process) +
                                " of " + std::to_string(place.processes));
  s.name = std::move(name);
  s.rank = rank;
  s.size = size;
  s.place = place;
  s.inner = std::move(inner);
  if (place.local_size > 1) {
    s.local_owner = local_group_for(process_key + "|" + s.name, s.name, place.local_rank, place.local_size, timeout);
    s.local = s.local_owner->member(place.local_rank);
  }
  s.engine.start();
}

hierarchical_group::~hierarchical_group() { state_->engine.stop("the group is gone"); }

const std::string& hierarchical_group::name() const { return state_->name; }
int hierarchical_group::rank() const { return state_->rank; }
int hierarchical_group::size() const { return state_->size; }

std::string hierarchical_group::endpoint() const {
  const auto& s = *state_;
  if (s.place.local_rank != 0) return "member";
  return "leader " + (s.inner ? s.inner->endpoint() : std::string());
}

void hierarchical_group::connect(const std::vector<std::string>& endpoints) {
  auto& s = *state_;
  const std::string me = "group '" + s.name + "' rank " + std::to_string(s.rank);
  if (endpoints.size() != static_cast<std::size_t>(s.size))
    throw std::invalid_argument(me + ": " + std::to_string(endpoints.size()) + " endpoints for " + std::to_string(s.size) +
                                " ranks");
  std::vector<std::string> leaders;
  for (std::size_t r = 0; r < endpoints.size(); ++r) {
    const std::string& e = endpoints[r];
    if (e.rfind("leader ", 0) == 0)
      leaders.push_back(e.substr(7));
    else if (e != "member")
      throw collective_error(me + ": rank " + std::to_string(r) + "'s endpoint '" + e.substr(0, 40) +
                             "' is not a hierarchical group's (its node runs another version?)");
  }
  if (leaders.size() != static_cast<std::size_t>(s.place.processes))
    throw collective_error(me + ": " + std::to_string(leaders.size()) + " ranks lead a process, expected " +
                           std::to_string(s.place.processes));
  if (s.inner) s.inner->connect(leaders);
}

collective_handle hierarchical_group::all_reduce(tensor& t, reduce_op op) {
  auto* s = state_.get();
  return s->start("all_reduce", [s, &t, op] { s->sum(t, op); });
}

collective_handle hierarchical_group::reduce_scatter(const tensor& in, tensor& out, reduce_op op) {
  out = reduce_scatter_output(state_->name, in, out, state_->size, state_->rank);
  auto* s = state_.get();
  return s->start("reduce_scatter", [s, &in, &out, op] {
    tensor work = in;
    s->sum(work, op);
    const shape_t& shape = work.shape();
    if (shape.empty()) {
      out = std::move(work);
      return;
    }
    const std::size_t unit = shape[0] == 0 ? 0 : work.size() / shape[0];
    const auto [first, last] = shard_rows(shape[0], static_cast<std::size_t>(s->size), static_cast<std::size_t>(s->rank));
    if (last > first) std::memcpy(out.data(), work.data() + first * unit, (last - first) * unit * sizeof(float));
  });
}

collective_handle hierarchical_group::all_gather(const tensor& in, tensor& out) {
  check_all_gather(state_->name, in, out);
  std::size_t row_floats = 1;
  for (std::size_t i = 1; i < in.shape().size(); ++i) row_floats *= in.shape()[i];
  if (static_cast<float>(in.shape()[0]) >= largest_exact_count || static_cast<float>(row_floats) >= largest_exact_count)
    throw std::invalid_argument("group '" + state_->name + "' all_gather: " + std::to_string(in.shape()[0]) + " rows of " +
                                std::to_string(row_floats) + " floats: counts from 2^24 on are not exact in a float");
  auto* s = state_.get();
  return s->start("all_gather", [s, &in, &out] { s->gather(in, out); });
}

collective_handle hierarchical_group::broadcast(tensor& t, int root) {
  check_broadcast_root(state_->name, root, state_->size);
  auto* s = state_.get();
  return s->start("broadcast", [s, &t, root] {
    if (s->rank != root) t.fill(0.0f);
    s->sum(t);
  });
}

void hierarchical_group::abort(const std::string& reason) {
  state_->engine.abort("rank " + std::to_string(state_->rank) + " aborted the group: " + reason);
}

}  // namespace ap
