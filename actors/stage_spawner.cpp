#include "actors/stage_spawner.hpp"

#include <algorithm>
#include <stdexcept>

#include "actors/pipeline_actors.hpp"
#include "collective/network_group.hpp"
#include "network/guarded_transport.hpp"

namespace ap {

std::string data_parallel_group_name(int stage, int rank, int tensor_parallel) {
  return data_parallel_group_prefix + std::to_string(stage) + (tensor_parallel > 1 ? " rank " + std::to_string(rank) : "");
}

stage_actors spawn_stage(caf::actor_system& system, stage_setup setup) {
  // Built first: it throws for a bad optimizer setting before any actor exists.
  const stage_options& o = setup.options;
  const stage_place& place = setup.place;
  for (auto& slice : setup.slices) slice.set_compute_dtype(o.compute_dtype);
  auto compute = std::make_unique<stage_compute>(setup.stage, setup.chunk_ids, std::move(setup.slices), o.optimizer,
                                                 o.tensor_parallel, o.timeout, std::move(setup.cores));
  if (o.split_vocabulary) {
    const int head = setup.total_chunks - 1;
    const bool holds_head = std::find(setup.chunk_ids.begin(), setup.chunk_ids.end(), head) != setup.chunk_ids.end();
    compute->split_vocabulary(holds_head ? head : -1);
  }
  if (o.sequence_parallel) compute->split_sequence();  // a stage may hold no block to divide
  std::vector<std::shared_ptr<network_group>> rings;
  if (setup.data_parallel_members.empty() && o.replicas > 1 && !place.data_parallel_host.empty()) {
    // Note [data-parallel nodes]
    for (int r = 0; r < o.tensor_parallel; ++r) {
      rings.push_back(make_network_group(o.collectives, system, data_parallel_group_name(setup.stage, r, o.tensor_parallel),
                                         o.replica, o.replicas, place.data_parallel_place, o.data_parallel_key,
                                         place.data_parallel_host, o.timeout));
      setup.data_parallel_members.push_back(rings.back());
    }
  }
  if (!setup.data_parallel_members.empty()) compute->join_data_parallel(std::move(setup.data_parallel_members), o.replica);
  std::shared_ptr<activation_inbox> inbox;  // Note [activations on data links]
  if (!place.link_host.empty()) {
    try {
      inbox = std::make_shared<activation_inbox>(setup.stage, place.link_host, transport_tls_of(system), o.timeout,
                                                 setup.link_log);
    } catch (const link_error& e) {
      throw std::runtime_error("stage " + std::to_string(setup.stage) + " cannot listen for its activation links on " +
                               place.link_host + ": " + e.what());
    }
  }
  stage_actors a;
  a.link_port = inbox ? inbox->port() : 0;
  a.sender = spawn_sender(system, setup.stage, o.timeout, setup.link_log);
  a.processor = spawn_processor(
      system, processor_config{setup.stage, setup.stages, setup.total_chunks, a.sender, setup.log, o.compute_dtype,
                               std::move(rings), std::move(inbox)},
      std::move(compute));
  a.retriever = spawn_retriever(
      system, retriever_config{setup.stage, std::move(setup.actions), a.processor, o.timeout, setup.log,
                               place.report_events});
  return a;
}

stage_spec make_stage_spec(stage_setup& setup) {
  stage_spec spec;
  spec.stage = setup.stage;
  spec.stages = setup.stages;
  spec.total_chunks = setup.total_chunks;
  spec.chunk_ids = setup.chunk_ids;
  for (auto& slice : setup.slices) {
    spec.layer_specs.push_back(slice.layer_specs());
    spec.first_layer.push_back(slice.first_index());
    add_parameters(spec.weights, slice.parameters());
  }
  spec.recompute = static_cast<std::uint8_t>(setup.slices.empty() ? recompute_mode::none : setup.slices.front().recompute());
  spec.actions = setup.actions;
  spec.options = setup.options;
  spec.place = setup.place;
  spec.place.report_events = true;  // Note [events from nodes]
  return spec;
}

stage_setup stage_setup_from_spec(stage_spec spec, int node_threads) {
  const std::string where = "stage " + std::to_string(spec.stage);
  const std::size_t chunks = spec.chunk_ids.size();
  if (spec.layer_specs.size() != chunks || spec.first_layer.size() != chunks)
    throw std::invalid_argument(where + ": " + std::to_string(chunks) + " chunk ids but " +
                                std::to_string(spec.layer_specs.size()) + " layer lists and " +
                                std::to_string(spec.first_layer.size()) + " first layers");
  tensor_sources weights;
  if (const std::string why = add_sources(weights, spec.weights); !why.empty())
    throw std::invalid_argument(where + ": weights: " + why);

  stage_setup setup;
  setup.stage = spec.stage;
  setup.stages = spec.stages;
  setup.total_chunks = spec.total_chunks;
  setup.chunk_ids = spec.chunk_ids;
  std::vector<tensor_target> targets;
  for (std::size_t c = 0; c < chunks; ++c) {
    setup.slices.push_back(sequential::from_layer_specs(spec.layer_specs[c], spec.first_layer[c]));
    for (auto& t : parameter_targets(setup.slices.back().parameters(), "its parameter")) targets.push_back(std::move(t));
  }
  if (const std::string why = bind_named_tensors(targets, weights, "no parameter of its layers"); !why.empty())
    throw std::invalid_argument(where + ": " + why);
  for (std::size_t i = 0; i < spec.actions.size(); ++i) {
    const action& a = spec.actions[i];
    if (static_cast<std::size_t>(a.kind) >= op_count)
      throw std::invalid_argument(where + ": action " + std::to_string(i) + " has no op " +
                                  std::to_string(static_cast<int>(a.kind)));
    if (a.stage != spec.stage)
      throw std::invalid_argument(where + ": action " + std::to_string(i) + " (" + to_string(a) + ") is for stage " +
                                  std::to_string(a.stage));
  }
  setup.actions = std::move(spec.actions);
  const stage_options& o = spec.options;
  if (!dtype_from_code(static_cast<std::uint8_t>(o.compute_dtype)))
    throw std::invalid_argument(where + ": unknown compute dtype code " +
                                std::to_string(static_cast<int>(o.compute_dtype)));
  for (auto& slice : setup.slices) slice.set_compute_dtype(o.compute_dtype);
  const std::optional<recompute_mode> recompute = recompute_mode_from_code(spec.recompute);
  if (!recompute) throw std::invalid_argument(where + ": unknown recompute mode code " + std::to_string(spec.recompute));
  for (auto& slice : setup.slices) slice.set_recompute(*recompute);
  if (o.replicas < 1 || o.replica < 0 || o.replica >= o.replicas)
    throw std::invalid_argument(where + ": replica " + std::to_string(o.replica) + " of " + std::to_string(o.replicas) +
                                " data-parallel replicas does not exist");
  const collective_backend backend = o.collectives;
  if (backend != collective_backend::ring && backend != collective_backend::gloo && backend != collective_backend::by_size)
    throw std::invalid_argument(where + ": collective backend code " + std::to_string(static_cast<int>(backend)) +
                                " is none of ring (0), gloo (1), by-size (2)");
  // This stage's share of the machine's cores (Note [cores on nodes]).
  const int T = std::max(1, o.tensor_parallel);
  const node_slot& slot = spec.place.slot;
  if (o.threads < 0 || slot.first_rank < 0 || slot.node_ranks < slot.first_rank + T)
    throw std::invalid_argument(where + ": a slot of ranks " + std::to_string(slot.first_rank) + ".." +
                                std::to_string(slot.first_rank + T - 1) + " among " + std::to_string(slot.node_ranks) +
                                " ranks of the node, with " + std::to_string(o.threads) + " threads, does not exist");
  const std::vector<compute_cores> all =
      assign_cores(process_cores(), slot.node_ranks, node_threads > 0 ? node_threads : o.threads);
  setup.cores.assign(all.begin() + slot.first_rank, all.begin() + slot.first_rank + T);
  // One step's events, drained into stage_done (Note [events from nodes]).
  if (spec.place.report_events) setup.log = std::make_shared<event_log>(/*keep_events=*/true);
  setup.options = std::move(spec.options);
  setup.place = std::move(spec.place);
  return setup;
}

}  // namespace ap
