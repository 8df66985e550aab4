#include "actors/data_parallel_pipeline.hpp"

#include <chrono>
#include <random>
#include <stdexcept>
#include <thread>

#include "actors/recovery.hpp"
#include "actors/stage_spawner.hpp"
#include "collective/colocation.hpp"
#include "collective/shard.hpp"
#include "network/node_address.hpp"
#include "plan/cores.hpp"
#include "plan/mesh.hpp"
#include "model/loss.hpp"
#include "stage/stage_state.hpp"

namespace ap {

namespace {

// The first layers of `model`, up to the first that fixes a width: all check_input reads, without a second copy
// of every weight (Note [one copy of the gradients]).
sequential input_layers(const sequential& model) {
  for (std::size_t i = 0; i < model.size(); ++i)
    if (model.at(i).in_features() || model.at(i).out_features()) return model.slice(0, i + 1);
  return model.clone();
}

}  // namespace

data_parallel_pipeline::data_parallel_pipeline(const sequential& model, const pipeline_options& options,
                                               int data_parallel)
    : loss_(make_loss(options.loss)), model_(input_layers(model)) {
  model_.release_gradients();  // it only checks inputs
  if (data_parallel < 1)
    throw std::invalid_argument("--data-parallel must be at least 1, got " + std::to_string(data_parallel));
  const int T = std::max(1, options.tensor_parallel);
  make_recovery(options, data_parallel);
  if (!options.nodes.empty()) {
    place_on_nodes(model, options, data_parallel);
    return;
  }
  for (int s = 0; s < options.stages; ++s)
    for (int r = 0; r < T; ++r)
      groups_.push_back(std::make_unique<local_group>(data_parallel_group_name(s, r, T), data_parallel, options.timeout));
  // The process's cores divided among every replica's stages and ranks (Note [cores per rank]).
  std::vector<compute_cores> cores = options.cores;
  if (cores.empty()) cores = assign_cores(process_cores(), data_parallel * options.stages * T, options.threads);
  const std::size_t per_replica = static_cast<std::size_t>(options.stages * T);
  if (cores.size() != per_replica * static_cast<std::size_t>(data_parallel))
    throw std::invalid_argument("data-parallel pipeline: " + std::to_string(cores.size()) + " core assignments for " +
                                std::to_string(data_parallel) + " replicas x " + std::to_string(per_replica) + " ranks");
  for (int d = 0; d < data_parallel; ++d) {
    pipeline_options o = options;
    const auto mine = cores.begin() + static_cast<std::ptrdiff_t>(per_replica) * d;
    o.cores.assign(mine, mine + static_cast<std::ptrdiff_t>(per_replica));
    if (data_parallel > 1) {
      o.replica = d;
      o.data_parallel_members.assign(static_cast<std::size_t>(options.stages), {});
      for (int s = 0; s < options.stages; ++s)
        for (int r = 0; r < T; ++r)
          o.data_parallel_members[static_cast<std::size_t>(s)].push_back(
              std::shared_ptr<process_group>(groups_[static_cast<std::size_t>(s * T + r)]->member(d)));
    }
    if (d > 0) o.on_event = nullptr, o.record_events = false;  // replica 0 describes the run
    replicas_.push_back(std::make_unique<pipeline>(model, o));
  }
}

// Note [data-parallel nodes]: replica d's stage s runs on node (d * stages + s) % nodes, spreading replicas over
// the nodes. Each stage opens a group endpoint per tensor-parallel rank (Note [collective backends]); once all
// replicas are placed they connect together (a connect waits for its peers). Replicas sharing a node reduce
// through shared memory first (Note [hierarchical collectives]).
void data_parallel_pipeline::place_on_nodes(const sequential& model, const pipeline_options& options, int D) {
  const std::size_t N = options.nodes.size();
  const int T = std::max(1, options.tensor_parallel);
  std::vector<std::string> hosts;
  for (const std::string& n : options.nodes) hosts.push_back(parse_node_address(n).host);
  const std::vector<node_slot> slots = node_slots(D, options.stages, T, hosts);  // Note [cores on nodes]
  // Per stage, each replica's place among those on the same node.
  std::vector<std::vector<colocated_rank>> places;
  for (int s = 0; s < options.stages; ++s) {
    std::vector<std::string> nodes;
    for (int d = 0; d < D; ++d) nodes.push_back(options.nodes[node_of(d, s, options.stages, N)]);
    places.push_back(colocate(nodes));
  }
  const std::string key = std::to_string(std::random_device{}()) + "-" +
                          std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  for (int d = 0; d < D; ++d) {
    pipeline_options o = options;
    o.replica = d;
    o.replicas = D;
    o.restart_on_failure = 0;  // recovered together, here (Note [recovery with replicas])
    o.recovered_by_owner = options.restart_on_failure > 0;
    const auto mine = slots.begin() + d * options.stages;
    o.node_slots.assign(mine, mine + options.stages);
    o.nodes.clear();
    for (std::size_t i = 0; i < N; ++i) o.nodes.push_back(options.nodes[node_of(d, static_cast<int>(i), options.stages, N)]);
    for (int s = 0; s < options.stages; ++s) o.data_parallel_places.push_back(places[static_cast<std::size_t>(s)][static_cast<std::size_t>(d)]);
    o.data_parallel_key = key;
    if (d > 0) o.on_event = nullptr, o.record_events = false;
    replicas_.push_back(std::make_unique<pipeline>(model, o));
  }
  connect_groups();
}

void data_parallel_pipeline::connect_groups() {
  const int D = static_cast<int>(replicas_.size());
  if (D == 1) return;
  std::vector<std::vector<std::string>> endpoints;  // per replica, per group
  for (auto& r : replicas_) endpoints.push_back(r->data_parallel_endpoints());
  std::vector<std::string> addresses;  // group g of replica d at g * D + d
  for (std::size_t g = 0; g < endpoints[0].size(); ++g)
    for (int d = 0; d < D; ++d) addresses.push_back(endpoints[static_cast<std::size_t>(d)].at(g));
  std::vector<std::string> errors(static_cast<std::size_t>(D));
  std::vector<std::thread> threads;
  for (int d = 0; d < D; ++d)
    threads.emplace_back([&, d] {
      try {
        replicas_[static_cast<std::size_t>(d)]->connect_data_parallel(addresses);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(d)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors)
    if (!e.empty()) throw pipeline_error("connecting the data-parallel groups: " + e, error_code::lost_node);
}

std::vector<compute_cores> data_parallel_pipeline::cores() const {
  std::vector<compute_cores> all;
  for (const auto& r : replicas_) all.insert(all.end(), r->cores().begin(), r->cores().end());
  return all;
}

data_parallel_pipeline::~data_parallel_pipeline() {
  replicas_.clear();  // the stages hold group members
}

float data_parallel_pipeline::train_step(const tensor& inputs, const tensor& labels, std::uint64_t step) {
  if (!spent_.empty())
    throw pipeline_error("step " + std::to_string(step) + ": the data-parallel pipeline is spent after a failed step (" +
                         spent_ + ", error_code::broken); resume from a checkpoint");
  const std::size_t D = replicas_.size();
  const std::size_t samples = inputs.dimension() == 0 ? 0 : inputs.shape()[0];
  if (samples < D)
    throw pipeline_error("step " + std::to_string(step) + ": a batch of " + std::to_string(samples) +
                         " samples cannot feed " + std::to_string(D) + " data-parallel replicas", error_code::bad_input);
  try {  // before any replica starts: one refusing would leave the others waiting
    model_.check_input(inputs);
  } catch (const std::invalid_argument& e) {
    throw pipeline_error("step " + std::to_string(step) + ": inputs: " + e.what(), error_code::bad_input);
  }
  try {
    return recovery_->run_step(step, inputs, labels, [&] { return run_replicas(inputs, labels, step); });
  } catch (const pipeline_error& e) {
    spent_ = e.what();
    throw;
  }
}

float data_parallel_pipeline::run_replicas(const tensor& inputs, const tensor& labels, std::uint64_t step) {
  const std::size_t D = replicas_.size();
  const std::size_t samples = inputs.shape()[0];
  const auto rows = static_cast<std::int64_t>(loss_->batch_rows(labels));
  std::vector<float> losses(D, 0.0f);
  std::vector<std::exception_ptr> errors(D);
  std::vector<std::thread> threads;
  for (std::size_t d = 0; d < D; ++d)
    threads.emplace_back([&, d] {
      const auto [first, last] = shard_rows(samples, D, d);
      try {
        losses[d] = replicas_[d]->train_shard(slice_rows(inputs, first, last), slice_rows(labels, first, last), step,
                                              static_cast<std::int64_t>(first), rows);
      } catch (...) {
        errors[d] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  // The cause, not a replica that saw it through a group (Note [the cause, not a peer's view]).
  if (const int cause = first_cause(errors); cause >= 0) {
    const failure f = failure_of(errors[static_cast<std::size_t>(cause)]);
    throw pipeline_error(f.what + (D > 1 ? " (data-parallel replica " + std::to_string(cause) + ")" : ""), f.code);
  }
  float total = 0.0f;
  for (float l : losses) total += l;
  return total;
}

// Note [recovery with replicas]: Note [recovery] for D replicas on nodes. A lost node fails the step in every
// replica (their stages meet in rings), so recovery runs here for all at once: every stage placed again, rings
// reconnected, snapshots loaded, recorded steps replayed. Rings sum in a fixed order, so results stay exact.
void data_parallel_pipeline::make_recovery(const pipeline_options& options, int data_parallel) {
  recovery_settings settings;
  settings.restarts = options.nodes.empty() ? 0 : options.restart_on_failure;
  settings.wait = options.restart_wait;
  settings.snapshot_every = options.snapshot_every;
  settings.log = options.log;
  settings.placed = "every replica";
  settings.restored = "every replica's stages";
  settings.waited = "the nodes of " + std::to_string(data_parallel) + " replicas";
  recovery_actions actions;
  actions.take_snapshot = [this] {
    std::vector<std::vector<stage_state>> states;
    for (auto& r : replicas_) states.push_back(r->stage_states());
    snapshot_ = std::move(states);
  };
  actions.release_setup_weights = [this] {
    for (auto& r : replicas_) r->release_setup_weights();
  };
  // A node lost while the groups connect: every replica is placed again, within the wait.
  actions.restart = [this, log = options.log](std::string why, std::chrono::milliseconds wait) {
    const auto deadline = std::chrono::steady_clock::now() + wait;
    for (;;) {
      const auto left = std::max(std::chrono::milliseconds(100), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                     deadline - std::chrono::steady_clock::now()));
      for (auto& r : replicas_) r->restart_stages(why, left);
      try {
        connect_groups();
        return;
      } catch (const pipeline_error& e) {
        if (!restart_recovers(e) || std::chrono::steady_clock::now() >= deadline) throw;
        why = e.what();
        if (log) log("recovery: " + why + ": every replica placed again");
      }
    }
  };
  actions.restore = [this](std::uint64_t next_step, const std::string& why) {
    for (std::size_t d = 0; d < replicas_.size(); ++d) replicas_[d]->load_stage_states(snapshot_[d], next_step, why);
  };
  actions.replay = [this](const recovered_step& r) { run_replicas(r.inputs, r.labels, r.step); };
  recovery_ = std::make_unique<recovery>(std::move(settings), std::move(actions));
}

int data_parallel_pipeline::restarts() const { return recovery_->restarts_done(); }

tensor data_parallel_pipeline::predict(const tensor& inputs) { return replicas_.front()->predict(inputs); }

void data_parallel_pipeline::save_checkpoint(const std::string& path, const training_state& state) {
  recovery_->run_between_steps([&] { replicas_.front()->save_checkpoint(path, state); });
}

training_state data_parallel_pipeline::load_checkpoint(const std::string& path) {
  training_state state;
  for (auto& r : replicas_) state = r->load_checkpoint(path);
  recovery_->loaded();  // Note [recovery with replicas]
  return state;
}

std::vector<float> data_parallel_pipeline::last_microbatch_losses() const {
  std::vector<float> all;
  for (const auto& r : replicas_)
    for (float l : r->last_microbatch_losses()) all.push_back(l);
  return all;
}

}  // namespace ap
