#include "actors/pipeline.hpp"

#include <algorithm>
#include <optional>
#include <set>
#include <thread>

#include <caf/all.hpp>

#include "actors/node.hpp"
#include "actors/pipeline_actors.hpp"
#include "actors/stage_spawner.hpp"
#include "network/guarded_transport.hpp"
#include "actors/recovery.hpp"
#include "actors/scheduler_config.hpp"
#include "actors/watched_ask.hpp"
#include "collective/local_group.hpp"
#include "model/sequence_parallel.hpp"
#include "model/tensor_parallel.hpp"
#include "model/vocab_parallel.hpp"
#include "model/weight_tie.hpp"
#include "plan/cores.hpp"
#include "plan/partition.hpp"
#include "checkpoint/checkpoint.hpp"
#include "checkpoint/named_tensors.hpp"
#include "tensor/compute.hpp"
#include "tensor/tensor.hpp"

namespace ap {

struct pipeline::impl {
  pipeline_options options;
  sequential model;  // the architecture, and the weights as of the last gather
  ap::schedule plan;
  std::vector<layer_range> ranges;
  std::shared_ptr<event_log> log;
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  std::unique_ptr<guarded_transport> transport;  // with nodes: what connect_node goes through
  std::vector<sender_actor> senders;
  std::vector<processor_actor> processors;
  std::vector<retriever_actor> retrievers;
  coordinator_actor coordinator;
  std::unique_ptr<caf::scoped_actor> owner;  // places stages on nodes; they stop them when it goes
  std::vector<std::string> places;           // per stage: "node host:port"; empty in one process
  std::vector<double> clock_offset_us, clock_bound_us;  // per stage on a node: Note [events from nodes]
  // Step ids strictly increase: the next step's id is at least next_id (a train_step given a smaller number
  // runs as next_id).
  std::uint64_t next_id = 0;
  std::optional<std::uint64_t> gathered_at;  // model holds the weights after this many steps; none: gather again
  std::vector<int> peak_stash;
  std::vector<std::uint64_t> peak_stash_bytes;
  std::vector<float> microbatch_losses;  // of the last step
  // Note [recovery]
  std::vector<node_address> nodes;
  std::vector<stage_setup> setups;  // with nodes: kept to place the stages again after a lost node
  std::vector<compute_cores> cores;  // stage s, rank r at s * T + r (Note [cores per rank]); empty with nodes
  std::vector<stage_state> snapshot;  // every stage's state, the last the recovery took
  std::unique_ptr<ap::recovery> recovery_policy;

  // Places every stage; connecting to a node waits up to `connect_timeout` (0: placement_timeout).
  void start_stages(std::chrono::milliseconds placement_timeout, std::chrono::milliseconds connect_timeout = {});
  void stop_actors();
  step_result run_step(const tensor& inputs, const tensor& labels, std::uint64_t id, std::int64_t first_sample = 0,
                       std::int64_t batch_rows = 0);
  void release_setup_weights();
  void make_recovery();
  // Every stage's state, in stage order; a failure throws pipeline_error starting with `what` (lost_node when a
  // stage's node went).
  std::vector<stage_state> gather_states(const std::string& what);
  void restart_stages(const std::string& why, std::chrono::milliseconds wait);
  void load_states(const std::vector<stage_state>& states, const std::string& why);
  void log_line(const std::string& line) const {
    if (options.log) options.log(line);
  }

  // Also runs when the constructor throws half-way.
  ~impl() {
    stop_actors();
    transport.reset();
    system.reset();  // waits until every actor has exited
  }
};

// Stops the coordinator and every stage; nodes stop theirs when the owner goes.
void pipeline::impl::stop_actors() {
  auto stop = [](const auto& a) {
    if (a) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  };
  stop(coordinator);
  for (auto& a : retrievers) stop(a);
  for (auto& a : processors) stop(a);
  for (auto& a : senders) stop(a);
  // A detached actor's thread ends only when the last handle to it is gone: drop ours first.
  coordinator = nullptr;
  retrievers.clear(), processors.clear(), senders.clear();
  places.clear(), clock_offset_us.clear(), clock_bound_us.clear();
  owner.reset();
}

namespace {

void check_options(const sequential& model, const pipeline_options& o) {
  if (o.stages <= 0) throw std::invalid_argument("pipeline: stages must be positive, got " + std::to_string(o.stages));
  if (o.microbatches <= 0)
    throw std::invalid_argument("pipeline: microbatches must be positive, got " + std::to_string(o.microbatches));
  if (o.chunks_per_stage <= 0)
    throw std::invalid_argument("pipeline: chunks per stage must be positive, got " +
                                std::to_string(o.chunks_per_stage));
  if (model.empty()) throw std::invalid_argument("pipeline: the model has no layers");
  if (needs_plain_tcp(o.collectives) && !o.nodes.empty() && !o.security.insecure)
    throw std::invalid_argument(std::string("pipeline: the ") + collective_backend_name(o.collectives) +
                                " collective backend runs gloo, over plain TCP only (Debian's gloo has no TLS), but "
                                "the nodes are reached over mutual TLS: use the ring backend, or plain TCP (insecure) "
                                "on a trusted network");
  if (o.tensor_parallel < 1)
    throw std::invalid_argument("pipeline: tensor-parallel degree must be at least 1, got " +
                                std::to_string(o.tensor_parallel));
  if (static_cast<std::size_t>(o.stages * o.chunks_per_stage) > model.size())
    throw std::invalid_argument("pipeline: " + std::to_string(o.stages) + " stages x " +
                                std::to_string(o.chunks_per_stage) + " chunks need at least as many layers, the model has " +
                                std::to_string(model.size()));
}

// Each chunk split on its own; before any stage is placed, a width T does not divide is refused naming the stage and
// layer, and so is a T that splits nothing at all (Note [tensor-parallel stage]).
void check_tensor_parallel(const sequential& model, const std::vector<layer_range>& ranges, int stages, int T) {
  if (T == 1) return;
  local_group group("tensor-parallel check", T);
  std::shared_ptr<process_group> rank0(group.member(0));
  std::size_t split = 0;
  for (std::size_t c = 0; c < ranges.size(); ++c) {
    const sequential chunk = model.slice(ranges[c].begin, ranges[c].end);
    sequential parallel = sequential::from_layer_specs(tensor_parallel_specs(chunk.layer_specs()), chunk.first_index());
    try {
      split += join_tensor_parallel(parallel, rank0);
    } catch (const std::exception& e) {
      throw std::invalid_argument("pipeline: --tensor-parallel " + std::to_string(T) + ", stage " +
                                  std::to_string(stage_of_chunk(static_cast<int>(c), stages)) + " (chunk " +
                                  std::to_string(c) + "): " + e.what());
    }
  }
  if (split == 0)
    throw std::invalid_argument("pipeline: --tensor-parallel " + std::to_string(T) +
                                ": no chunk has a layer to split over the ranks (Note [Megatron pairing]: two Linear "
                                "layers with only an activation between them, within one chunk)");
}

// A stage whose layers use a kind its node cannot build is refused before any stage is placed.
void check_layer_kinds(const stage_setup& setup, const std::vector<node_address>& nodes,
                       const std::vector<std::vector<std::string>>& kinds) {
  const auto n = static_cast<std::size_t>(setup.stage) % nodes.size();
  for (const auto& slice : setup.slices)
    for (std::size_t i = 0; i < slice.size(); ++i) {
      const std::string spec = slice.at(i).spec();
      const auto lacking = layer_kinds_lacking(layer_kinds_in(spec), kinds[n]);
      if (lacking.empty()) continue;
      throw std::runtime_error("node " + nodes[n].text() + " lacks layer kind '" + lacking[0] + "', used by stage " +
                               std::to_string(setup.stage) + " (layer " + std::to_string(slice.first_index() + i) +
                               " " + spec + "): run a node binary that registers it (ap::run_node)");
    }
}

// Stage s goes to node s % nodes.size(); throws pipeline_error naming the node and what failed. Connecting to each
// node (and timing its clock) waits up to `connect_timeout`, the rest up to `timeout`. `clocks` gets each node's
// clock offset (Note [events from nodes]).
std::vector<stage_actors> place_on_nodes(caf::scoped_actor& owner, const std::vector<node_address>& nodes,
                                         std::vector<stage_setup>& setups, std::chrono::milliseconds timeout,
                                         std::chrono::milliseconds connect_timeout, std::vector<clock_offset>& clocks) {
  try {
    std::vector<caf::actor> handles;
    std::vector<std::vector<std::string>> kinds(nodes.size());  // per node: the layer kinds it can build
    for (std::size_t i = 0; i < nodes.size(); ++i)
      handles.push_back(connect_node(owner, nodes[i], connect_timeout, &kinds[i]));
    for (std::size_t i = 0; i < nodes.size(); ++i)
      clocks.push_back(estimate_clock_offset(owner, handles[i], nodes[i], connect_timeout));
    for (const auto& setup : setups) check_layer_kinds(setup, nodes, kinds);
    // Node i connects to the distinct nodes listed before it (Note [direct routes between nodes]).
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      std::set<caf::node_id> seen{handles[i].node()};
      std::vector<node_address> peers;
      for (std::size_t j = 0; j < i; ++j)
        if (seen.insert(handles[j].node()).second) peers.push_back(nodes[j]);
      connect_peers(owner, handles[i], nodes[i], peers, timeout);
    }
    std::vector<stage_actors> placed;
    for (auto& setup : setups) {
      const auto n = static_cast<std::size_t>(setup.stage) % nodes.size();
      // A setup kept after the first snapshot holds no weights; placed again, its stage
      // gets zeros, which the snapshot then overwrites (Note [weights on demand]).
      const bool released = !setup.slices.empty() && setup.slices.front().weights_released();
      for (auto& slice : setup.slices) slice.with_weights();
      placed.push_back(place_stage(owner, handles[n], nodes[n], make_stage_spec(setup), timeout));
      if (released)
        for (auto& slice : setup.slices) slice.release_weights();
    }
    return placed;
  } catch (const std::runtime_error& e) {
    throw pipeline_error(std::string("pipeline: ") + e.what());
  }
}

}  // namespace

pipeline::pipeline(const sequential& model, const pipeline_options& options) : impl_(std::make_unique<impl>()) {
  check_options(model, options);
  auto& d = *impl_;
  d.options = options;
  d.model = model.clone();
  d.model.release_gradients();  // Note [one copy of the gradients], at once: the slices below get their own
  d.model.set_compute_dtype(options.compute_dtype);  // predict computes as the stages do (Note [compute dtype])
  const int total_chunks = options.stages * options.chunks_per_stage;
  d.ranges = chunk_ranges_from_counts(options.layers_per_chunk.empty()
                                          ? partition_counts(partition_method::uniform, model, {}, total_chunks)
                                          : options.layers_per_chunk,
                                      model.size());
  if (static_cast<int>(d.ranges.size()) != total_chunks)
    throw std::invalid_argument("pipeline: " + std::to_string(d.ranges.size()) + " layer counts given for " +
                                std::to_string(total_chunks) + " chunks");
  check_tensor_parallel(d.model, d.ranges, options.stages, options.tensor_parallel);
  d.plan = options.custom_schedule ? *options.custom_schedule
                        : make_schedule(options.schedule, options.stages, options.microbatches, options.chunks_per_stage);
  if (auto v = validate_for_run(d.plan, options.stages, options.microbatches, options.chunks_per_stage); !v.ok)
    throw std::invalid_argument("pipeline: invalid schedule: " + v.message);
  if (whole_batch_backward(d.plan) && d.model.recompute() != recompute_mode::none)
    throw std::invalid_argument("pipeline: the synchronous backward joins every microbatch's caches for one "
                                "backward, and recomputing blocks keep none (Note [recomputation]): use "
                                "--recompute none or another schedule");
  if (options.sequence_parallel) {  // Note [sequence parallelism]
    check_sequence_parallel(model.layer_specs(), options.tensor_parallel);
    if (whole_batch_backward(d.plan))
      throw std::invalid_argument("pipeline: --sequence-parallel with the synchronous backward, which joins every "
                                  "microbatch's caches by rows: use another schedule");
  }
  // The sync backward's one gradient of the whole batch comes from the coordinator's loss (Note [vocab-parallel]).
  d.options.split_vocabulary =
      splits_vocabulary(model.layer_specs(), options.loss, options.tensor_parallel) && !whole_batch_backward(d.plan);
  // A replica's stages reduce each chunk as soon as its gradients are final (Note [gradient reduction]).
  const bool replicated = !options.data_parallel_members.empty() || options.replicas > 1;
  if (replicated && !has_gradient_reductions(d.plan)) d.plan = with_gradient_reductions(d.plan);
  d.log = std::make_shared<event_log>(options.record_events, options.on_event);  // Note [bounded event log]

  for (const auto& text : options.nodes) d.nodes.push_back(parse_node_address(text));  // std::invalid_argument
  if (!d.nodes.empty() && !options.data_parallel_members.empty())
    throw std::invalid_argument("pipeline: data-parallel members of this process cannot reach stages on nodes");
  if (options.replicas > 1 && options.restart_on_failure > 0)
    throw std::invalid_argument("pipeline: a replica does not recover alone: its data_parallel_pipeline recovers every "
                                "replica together (Note [recovery with replicas])");
  if (!d.nodes.empty()) check_transport_security(options.security, "pipeline");         // std::invalid_argument

  keep_tensor_memory();  // before the stages' threads start: Note [one malloc arena]
  configure_scheduler(d.config);
  if (!d.nodes.empty()) enable_network(d.config);
  d.system = std::make_unique<caf::actor_system>(d.config);
  if (!d.nodes.empty()) d.transport = std::make_unique<guarded_transport>(*d.system, options.security, transport_options{});
  d.cores = options.cores;
  if (d.cores.empty() && d.nodes.empty())
    d.cores = assign_cores(process_cores(), options.stages * options.tensor_parallel, options.threads);
  if (!d.cores.empty() && d.cores.size() != static_cast<std::size_t>(options.stages * options.tensor_parallel))
    throw std::invalid_argument("pipeline: " + std::to_string(d.cores.size()) + " core assignments for " +
                                std::to_string(options.stages) + " stages x " + std::to_string(options.tensor_parallel) +
                                " tensor-parallel ranks");
  std::vector<node_slot> slots = options.node_slots;  // by machine, the nodes' hosts (Note [cores on nodes])
  if (slots.empty() && !d.nodes.empty()) {
    std::vector<std::string> hosts;
    for (const auto& n : d.nodes) hosts.push_back(n.host);
    slots = node_slots(1, options.stages, options.tensor_parallel, hosts);
  }
  for (int s = 0; s < options.stages; ++s) {
    const stage_info info = get_stage_info(d.ranges, options.stages, s);
    stage_setup setup;  // a stage in this process sends no events (place.report_events)
    setup.stage = s;
    setup.stages = options.stages;
    setup.total_chunks = total_chunks;
    setup.chunk_ids = info.chunks;
    setup.actions = d.plan.per_stage[static_cast<std::size_t>(s)];
    setup.options = d.options;  // the stages' part of the options, as it is (Note [stage options])
    setup.log = d.log;
    if (!options.data_parallel_members.empty()) {
      setup.data_parallel_members = options.data_parallel_members.at(static_cast<std::size_t>(s));
    } else if (options.replicas > 1 && !d.nodes.empty()) {  // Note [data-parallel nodes]
      setup.place.data_parallel_host = d.nodes[static_cast<std::size_t>(s) % d.nodes.size()].host;
      setup.place.data_parallel_place = options.data_parallel_places.empty()
                                            ? colocated_rank{0, 1, options.replica, options.replicas}
                                            : options.data_parallel_places.at(static_cast<std::size_t>(s));
    }
    for (const auto& r : info.layer_ranges_per_chunk) {
      setup.slices.push_back(d.model.slice(r.begin, r.end));
      // A stage on a node makes its own gradients; the setup only sends the weights (Note [weights on demand]).
      if (!d.nodes.empty()) setup.slices.back().release_gradients();
    }
    if (!d.cores.empty()) {
      const auto mine = d.cores.begin() + s * options.tensor_parallel;
      setup.cores.assign(mine, mine + options.tensor_parallel);
    } else {  // Note [cores on nodes]
      setup.place.slot = slots.at(static_cast<std::size_t>(s));
      // The stage listens where the coordinator reaches its node (Note [activations on data links]).
      setup.place.link_host = d.nodes[static_cast<std::size_t>(s) % d.nodes.size()].host;
    }
    d.setups.push_back(std::move(setup));
  }
  // Note [one copy of the gradients]: the stages own the gradients. The pipeline's model's gradients were a
  // second, idle copy of every parameter; so was `train`'s own model once a pipeline or a D x T mesh is built:
  // both let them go (a slice or clone of the model, gather_model's included, gets zeroed ones again). A
  // data-parallel pipeline, which only checks inputs, keeps the model's first layers instead of a whole copy.
  // Peak resident memory of `train` (this 2-vCPU machine, /usr/bin/time): the heavy MLP on 2 stages, batch 512,
  // 472 -> 411 MB; D = 2 x P = 2, 793 -> 640 MB, and 617 MB with the data-parallel pipeline's first layers only.

  // Note [weights on demand]: the pipeline's model is where gathers land, what checkpoints load through and what
  // predicts, but while the stages train its weights are stale: a third copy of every weight in the
  // coordinator's process (4 bytes a parameter: 38 MB of the heavy MLP's 250 on 2 stages; with stages on other
  // machines, a whole model's weights on the coordinator's). It keeps the architecture only (release_weights);
  // a gather, a checkpoint's save or load, and predict (which gathers) give it zeroed weights first and fill
  // them; the next training step lets them go again, since the stages' weights change then.
  d.model.release_weights();
  d.make_recovery();
  d.start_stages(options.timeout);
}

// Spawns or places every stage, then the coordinator, and tells every sender its endpoints. In one process the
// setups are used up; with nodes they are kept, to place the stages again (Note [recovery]).
void pipeline::impl::start_stages(std::chrono::milliseconds placement_timeout, std::chrono::milliseconds connect_timeout) {
  auto& sys = *system;
  const int total_chunks = options.stages * options.chunks_per_stage;
  std::vector<std::string> links;  // each stage's, "host:port" or "" for none (Note [activations on data links])
  const auto keep = [this, &links](const stage_actors& a) {  // kept at once: stop_actors stops them if a later stage throws
    senders.push_back(a.sender);
    processors.push_back(a.processor);
    retrievers.push_back(a.retriever);
    const std::size_t s = links.size();
    links.push_back(a.link_port == 0 || nodes.empty()
                        ? std::string()
                        : node_address{nodes[s % nodes.size()].host, a.link_port}.text());
  };
  if (nodes.empty()) {
    for (auto& setup : setups) keep(spawn_stage(sys, std::move(setup)));
    setups.clear();
  } else {
    owner = std::make_unique<caf::scoped_actor>(sys);
    std::vector<clock_offset> clocks;
    const auto connect = connect_timeout.count() > 0 ? connect_timeout : placement_timeout;
    for (const auto& a : place_on_nodes(*owner, nodes, setups, placement_timeout, connect, clocks)) keep(a);
    if (options.restart_on_failure == 0 && !options.recovered_by_owner) release_setup_weights();  // never placed again
    for (int s = 0; s < options.stages; ++s) {
      const std::size_t n = static_cast<std::size_t>(s) % nodes.size();
      places.push_back("node " + nodes[n].text());
      clock_offset_us.push_back(clocks[n].offset_us);
      clock_bound_us.push_back(clocks[n].bound_us);
    }
  }
  std::vector<stage_tie> ties;  // Note [tied gradients across stages] in coordinator.cpp
  const auto stage_of_layer = [&](std::size_t layer) {
    for (std::size_t c = 0; c < ranges.size(); ++c)
      if (layer >= ranges[c].begin && layer < ranges[c].end) return stage_of_chunk(static_cast<int>(c), options.stages);
    throw std::logic_error("layer " + std::to_string(layer) + " is in no chunk");
  };
  for (const weight_tie& t : weight_ties(model)) {
    const int owner = stage_of_layer(t.owner_layer), copy = stage_of_layer(t.copy_layer);
    if (owner != copy) ties.push_back({owner, t.owner, copy, t.copy});
  }
  coordinator = spawn_coordinator(sys, coordinator_config{options.stages, total_chunks, options.microbatches, options.loss,
                                                          retrievers, processors, options.timeout, places,
                                                          whole_batch_backward(plan), log, clock_offset_us,
                                                          clock_bound_us, options.clip_grad_norm, links, std::move(ties),
                                                          options.split_vocabulary});
  // One vector of endpoints holds two interfaces, so it is untyped (Note [typed stage interfaces]).
  std::vector<caf::actor> endpoints;
  for (const auto& r : retrievers) endpoints.push_back(caf::actor_cast<caf::actor>(r));
  endpoints.push_back(caf::actor_cast<caf::actor>(coordinator));
  for (std::size_t s = 0; s < senders.size(); ++s) {
    if (!owner) {
      caf::anon_send(senders[s], setup_atom::value, endpoints, std::vector<std::string>{});  // no links in one process
      continue;
    }
    // A remote sender confirms, so no task can reach it before its endpoints (they come from other processes).
    // It writes beside the message to the stages of other nodes only (those
    // of its own node get theirs in memory, the coordinator inside the message) (Note [activations on data links]).
    std::vector<std::string> beside(links.size() + 1);
    for (std::size_t r = 0; r < links.size(); ++r)
      if (nodes[r % nodes.size()].text() != nodes[s % nodes.size()].text()) beside[r] = links[r];
    const watched_wait w =  // Note [answers from other nodes]
        ask_watched(*owner, senders[s], options.timeout, [](ok_atom) {}, setup_atom::value, endpoints, beside);
    if (!w.answered())
      throw pipeline_error("pipeline: stage " + std::to_string(s) + " on " + places[s] +
                               " did not confirm its setup: " + error_text(w.failure()),
                           w.result == watched_wait::outcome::gone ? error_code::lost_node : error_code::internal);
  }
  caf::anon_send(coordinator, setup_atom::value, endpoints);
}

step_result pipeline::impl::run_step(const tensor& inputs, const tensor& labels, std::uint64_t id,
                                     std::int64_t first_sample, std::int64_t batch_rows) {
  caf::scoped_actor self{*system};
  step_result result;
  self->request(coordinator, options.step_timeout,
                train_batch{id, inputs, labels, first_sample, batch_rows})
      .receive([&](step_result& r) { result = std::move(r); },
               [&](caf::error& e) {
                 result = failed_step(e == caf::sec::request_timeout ? error_code::timeout : error_code::internal,
                                      "step " + std::to_string(id) + ": no answer from the coordinator: " + caf::to_string(e));
               });
  return result;
}

pipeline::~pipeline() = default;  // impl's destructor stops every actor

float pipeline::train_step(const tensor& inputs, const tensor& labels, std::uint64_t step) {
  return train_shard(inputs, labels, step, 0, 0);
}

float pipeline::train_shard(const tensor& inputs, const tensor& labels, std::uint64_t step, std::int64_t first_sample,
                            std::int64_t batch_rows) {
  auto& d = *impl_;
  const std::uint64_t id = std::max(step, d.next_id);
  // Cheap checks on the caller's thread before any stage runs: the text names the first layer and both
  // dtypes or widths, with no stage to blame (the stages would fail later with the same text, in a stage).
  try {
    d.model.check_input(inputs);
  } catch (const std::invalid_argument& e) {
    throw pipeline_error("step " + std::to_string(id) + ": inputs: " + e.what(), error_code::bad_input);
  }
  d.next_id = id + 1;
  d.model.release_weights();  // the stages' weights change now (Note [weights on demand])
  // With nodes and restart_on_failure, a lost node is waited for and the step run again (Note [recovery]).
  return d.recovery_policy->run_step(id, inputs, labels, [&] {
    step_result result = d.run_step(inputs, labels, id, first_sample, batch_rows);
    if (!result.ok) throw pipeline_error(result.error, result.code);
    d.peak_stash = result.peak_stash;
    d.peak_stash_bytes = result.peak_stash_bytes;
    d.microbatch_losses = result.microbatch_losses;
    return result.loss;
  });
}

sequential pipeline::gather_model() {
  auto& d = *impl_;
  if (d.gathered_at != d.next_id) {
    d.model.with_weights();  // Note [weights on demand]
    std::vector<named_tensors> sent(d.processors.size());
    tensor_sources sources;
    caf::scoped_actor self{*d.system};
    for (std::size_t s = 0; s < d.processors.size(); ++s) {
      const watched_wait w = ask_watched(self, d.processors[s], d.options.timeout,
                                         [&](named_tensors& nt) { sent[s] = std::move(nt); }, params_atom::value);
      const std::string failure =
          w.answered() ? add_sources(sources, sent[s], "stage " + std::to_string(s)) : caf::to_string(w.failure());
      if (!failure.empty()) throw pipeline_error("gathering parameters: " + failure);
    }
    const std::string why = bind_named_tensors(parameter_targets(d.model.parameters(), "the model's parameter"),
                                               sources, "no parameter of the model");
    if (!why.empty()) throw pipeline_error("gathering parameters: " + why);
    d.gathered_at = d.next_id;
  }
  return d.model.clone();  // with zeroed gradients, trainable as any (sequential::slice)
}

tensor pipeline::predict(const tensor& inputs) {
  gather_model();
  return impl_->model.forward(inputs);
}

const ap::schedule& pipeline::schedule() const { return impl_->plan; }
const std::vector<compute_cores>& pipeline::cores() const { return impl_->cores; }
const std::vector<layer_range>& pipeline::chunk_ranges() const { return impl_->ranges; }
std::vector<int> pipeline::last_peak_stash() const { return impl_->peak_stash; }
std::vector<std::uint64_t> pipeline::last_peak_stash_bytes() const { return impl_->peak_stash_bytes; }
std::vector<float> pipeline::last_microbatch_losses() const { return impl_->microbatch_losses; }
std::vector<stage_event> pipeline::events() const { return impl_->log->events(); }
std::size_t pipeline::held_events() const { return impl_->log->event_count(); }
std::vector<double> pipeline::busy_seconds() const {
  auto busy = impl_->log->busy_us(impl_->options.stages);
  for (double& b : busy) b /= 1e6;
  return busy;
}
void pipeline::clear_events() { impl_->log->clear(); }

namespace {

std::string describe_layers(const std::vector<std::string>& specs) {
  std::string text;
  for (const auto& s : specs) text += (text.empty() ? "" : ";") + s;
  return "[" + text + "] (" + std::to_string(specs.size()) + " layers)";
}

}  // namespace

void pipeline::save_checkpoint(const std::string& path, const training_state& state) {
  auto& d = *impl_;
  std::vector<stage_state> states;
  d.recovery_policy->run_between_steps([&] { states = d.gather_states("checkpoint " + path); });
  const auto refuse = [&](const std::string& what) { throw pipeline_error("checkpoint " + path + ": " + what); };
  std::unique_ptr<optimizer> opt = make_optimizer(d.options.optimizer);
  d.model.with_weights();  // Note [weights on demand]
  if (const std::string why = gather_stage_states(states, d.model, *opt, d.options.optimizer.kind); !why.empty())
    refuse(why);
  d.gathered_at = d.next_id;  // d.model now holds every stage's current weights
  ap::save_checkpoint(path, d.model, opt.get(), state);
}

training_state pipeline::load_checkpoint(const std::string& path) {
  auto& d = *impl_;
  // Everything is read and checked before any stage is sent anything, so a refused file changes nothing.
  const checkpoint_info info = read_checkpoint_info(path);
  if (info.layer_specs != d.model.layer_specs())
    throw std::runtime_error("checkpoint " + path + ": holds a different model: its layers are " +
                             describe_layers(info.layer_specs) + ", this pipeline's are " +
                             describe_layers(d.model.layer_specs()));
  const int stages = d.options.stages;
  std::vector<stage_state> states(static_cast<std::size_t>(stages));
  for (int s = 0; s < stages; ++s) states[static_cast<std::size_t>(s)] = stage_state{s, info.optimizer_steps, {}};
  training_state saved;
  for (std::size_t c = 0; c < d.ranges.size(); ++c) {
    // Each chunk's layers load through the checkpoint library into scratch copies (it checks the tensors,
    // shapes and optimizer kind), and travel to their stage under the same names.
    d.model.with_weights();  // zeros, loaded over below (Note [weights on demand])
    sequential slice = d.model.slice(d.ranges[c].begin, d.ranges[c].end);
    std::unique_ptr<optimizer> opt = make_optimizer(d.options.optimizer);
    saved = load_checkpoint_slice(path, slice, opt.get());
    if (saved.step != info.state.step || saved.epoch != info.state.epoch ||
        saved.batch_in_epoch != info.state.batch_in_epoch || saved.data_seed != info.state.data_seed)
      throw std::runtime_error("checkpoint " + path + ": the file changed while it was read (step " +
                               std::to_string(info.state.step) + ", then " + std::to_string(saved.step) + ")");
    named_tensors& out = states[static_cast<std::size_t>(stage_of_chunk(static_cast<int>(c), stages))].tensors;
    add_parameters(out, slice.parameters());
    add_optimizer_state(out, opt->state(), checkpoint_optimizer_prefix);
  }

  d.gathered_at.reset();  // the stages' weights change: gather them again
  d.recovery_policy->loaded();  // the next step snapshots the loaded state (Note [recovery])
  std::string errors;
  caf::scoped_actor self{*d.system};
  for (int s = 0; s < stages; ++s) {
    std::string error;
    const watched_wait w =
        ask_watched(self, d.processors[static_cast<std::size_t>(s)], d.options.timeout,
                    [&](stage_state_loaded& answer) { error = answer.error; }, load_atom::value,
                    std::move(states[static_cast<std::size_t>(s)]));
    if (!w.answered()) error = "stage " + std::to_string(s) + ": " + caf::to_string(w.failure());
    if (!error.empty()) errors += (errors.empty() ? "" : "; ") + error;
  }
  // Only a stage that disagrees with the checks above (a bug) or does not answer gets here.
  if (!errors.empty())
    throw pipeline_error("checkpoint " + path + ": " + errors +
                         " (the other stages loaded it: load a checkpoint again before training)");
  return saved;
}

// The setups kept to place the stages again need their weights only until a snapshot
// can restore them (or never, without restarts): the coordinator of nodes held the whole model's weights and
// gradients there while they trained (Note [weights on demand]).
void pipeline::impl::release_setup_weights() {
  for (auto& setup : setups)
    for (auto& slice : setup.slices) slice.release_weights();
}

// Note [recovery] (actors/recovery.hpp), with this pipeline's own stages; without nodes or restart_on_failure,
// every failure goes to the caller.
void pipeline::impl::make_recovery() {
  recovery_settings settings;
  settings.restarts = nodes.empty() ? 0 : options.restart_on_failure;
  settings.wait = options.restart_wait;
  settings.snapshot_every = options.snapshot_every;
  settings.log = options.log;
  recovery_actions actions;
  actions.take_snapshot = [this] {
    snapshot = gather_states("snapshot after step " + (next_id > 0 ? std::to_string(next_id - 1) : std::string("none")));
  };
  actions.release_setup_weights = [this] { release_setup_weights(); };
  actions.restart = [this](const std::string& why, std::chrono::milliseconds wait) { restart_stages(why, wait); };
  actions.restore = [this](std::uint64_t, const std::string& why) { load_states(snapshot, why); };
  actions.replay = [this](const recovered_step& r) {
    step_result result = run_step(r.inputs, r.labels, r.step);
    if (result.ok) return;
    if (restart_recovers(result)) throw pipeline_error(result.error, result.code);
    throw pipeline_error("replaying after a lost node: " + result.error, result.code);
  };
  recovery_policy = std::make_unique<ap::recovery>(std::move(settings), std::move(actions));
}

std::vector<stage_state> pipeline::impl::gather_states(const std::string& what) {
  // Each stage is watched: its loss ends the wait at once, in the words of a lost step (Note [answers from other
  // nodes]).
  std::vector<stage_state> states(processors.size());
  caf::scoped_actor self{*system};
  for (std::size_t s = 0; s < processors.size(); ++s) {
    const watched_wait w =
        ask_watched(self, processors[s], options.timeout, [&](stage_state& st) { states[s] = std::move(st); }, state_atom::value);
    const std::string stage = "stage " + std::to_string(s);
    if (w.result == watched_wait::outcome::gone)
      throw pipeline_error(what + ": " + stage + " on " + (places.empty() ? "" : places[s]) +
                               " is gone (lost the connection: " + caf::to_string(w.reason) + ")",
                           error_code::lost_node);
    if (w.result == watched_wait::outcome::error)
      throw pipeline_error(what + ": " + stage + ": " + caf::to_string(w.reason), error_code::internal);
    if (!w.answered())
      throw pipeline_error(what + ": " + stage + " sent no state within " + std::to_string(options.timeout.count()) + " ms",
                           error_code::internal);
  }
  return states;
}

void pipeline::impl::restart_stages(const std::string& why, std::chrono::milliseconds wait) {
  stop_actors();
  const auto deadline = std::chrono::steady_clock::now() + wait;
  std::string last;
  for (;;) {
    try {
      // Each attempt within what is left of the wait: a stopped node at the address accepts and stays silent. A node
      // that does not answer its connection within the heartbeats' timeout is tried again (Note [recovery]): one
      // continued after a stop is placed on within seconds, not after a whole --timeout-ms.
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      const auto attempt = std::max(std::chrono::milliseconds(100), std::min(options.timeout, left));
      start_stages(attempt, std::min<std::chrono::milliseconds>(attempt, connection_timeout));
      return;
    } catch (const pipeline_error& e) {
      last = e.what();
      stop_actors();
      if (std::chrono::steady_clock::now() + std::chrono::milliseconds(250) >= deadline)
        throw pipeline_error(why + "; the nodes did not come back within " + std::to_string(wait.count()) + " ms: " + last,
                             error_code::lost_node);
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
  }
}

void pipeline::impl::load_states(const std::vector<stage_state>& states, const std::string& why) {
  std::string failure;
  bool silent = false;  // a stage that did not answer: its node lost again (a recovery tries again)
  caf::scoped_actor self{*system};
  for (std::size_t s = 0; s < processors.size() && failure.empty(); ++s) {
    const watched_wait w = ask_watched(self, processors[s], options.timeout,
                                       [&](stage_state_loaded& answer) { failure = answer.error; }, load_atom::value,
                                       states.at(s));
    if (!w.answered()) failure = "stage " + std::to_string(s) + ": " + caf::to_string(w.failure()), silent = true;
  }
  if (!failure.empty())
    throw pipeline_error(why + "; restoring the snapshot failed: " + failure,
                         silent ? error_code::lost_node : error_code::internal);
  gathered_at.reset();
}

std::vector<stage_state> pipeline::stage_states() {
  return impl_->gather_states("the stages' states");
}

void pipeline::restart_stages(const std::string& why, std::chrono::milliseconds wait) { impl_->restart_stages(why, wait); }

void pipeline::release_setup_weights() { impl_->release_setup_weights(); }

void pipeline::load_stage_states(const std::vector<stage_state>& states, std::uint64_t next_step, const std::string& why) {
  impl_->load_states(states, why);
  impl_->next_id = next_step;
}

int pipeline::restarts() const { return impl_->recovery_policy->restarts_done(); }

std::vector<std::string> pipeline::data_parallel_endpoints() {
  auto& d = *impl_;
  std::vector<std::string> out;
  caf::scoped_actor self{*d.system};
  for (std::size_t s = 0; s < d.processors.size(); ++s) {
    std::vector<std::string> endpoints;
    // Watched: a stage whose node goes ends the wait at once (Note [answers from other nodes]).
    const watched_wait w = ask_watched(
        self, d.processors[s], d.options.timeout, [&](std::vector<std::string>& e) { endpoints = std::move(e); },
        ring_atom::value);
    if (!w.answered() || endpoints.size() != static_cast<std::size_t>(d.options.tensor_parallel))
      throw pipeline_error("stage " + std::to_string(s) + (d.places.empty() ? "" : " on " + d.places[s]) +
                               " did not send its data-parallel endpoints" +
                               (w.answered() ? "" : ": " + caf::to_string(w.failure())),
                           error_code::lost_node);  // gone or silent: recovery (Note [recovery with replicas]) tries again
    out.insert(out.end(), endpoints.begin(), endpoints.end());
  }
  return out;
}

void pipeline::connect_data_parallel(const std::vector<std::string>& addresses) {
  auto& d = *impl_;
  const std::size_t groups = d.processors.size() * static_cast<std::size_t>(d.options.tensor_parallel);
  if (groups == 0 || addresses.size() % groups != 0)
    throw std::invalid_argument("connect_data_parallel: " + std::to_string(addresses.size()) + " addresses for " +
                                std::to_string(groups) + " groups");
  const std::size_t per_stage = addresses.size() / d.processors.size();
  caf::scoped_actor self{*d.system};
  // Every stage connects at once: a ring's connect waits for its peers, which may be this replica's stages. Each
  // is watched: one whose node goes ends the wait at once (Note [answers from other nodes]).
  for (std::size_t s = 0; s < d.processors.size(); ++s) {
    self->monitor(d.processors[s]);
    self->send(d.processors[s], ring_atom::value,
               std::vector<std::string>(addresses.begin() + static_cast<long>(s * per_stage),
                                        addresses.begin() + static_cast<long>((s + 1) * per_stage)));
  }
  std::string errors;
  const auto add = [&](const std::string& why) { errors += (errors.empty() || why.empty() ? "" : "; ") + why; };
  for (std::size_t answered = 0; answered < d.processors.size(); ++answered)
    self->receive([&](const std::string& why) { add(why); },
                  [&](const caf::down_msg& m) {
                    for (std::size_t s = 0; s < d.processors.size(); ++s)
                      if (m.source == d.processors[s].address()) {
                        add("stage " + std::to_string(s) + (d.places.empty() ? "" : " on " + d.places[s]) +
                            " is gone (" + caf::to_string(m.reason) + ")");
                        answered = d.processors.size();
                        return;
                      }
                    --answered;  // an actor monitored earlier
                  },
                  caf::after(d.options.timeout * (d.options.tensor_parallel + 1)) >> [&] {
                    add("a stage did not connect its data-parallel groups in time");
                    answered = d.processors.size();
                  });
  for (const auto& p : d.processors) self->demonitor(p.address());
  if (!errors.empty())
    throw pipeline_error("pipeline replica " + std::to_string(d.options.replica) + ": " + errors, error_code::lost_node);
}

}  // namespace ap
