#include "actors/stage_spawner.hpp"

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
  for (auto& slice : setup.slices) slice.set_compute_dtype(setup.compute_dtype);
  auto compute = std::make_unique<stage_compute>(setup.stage, setup.chunk_ids, std::move(setup.slices), setup.optimizer,
                                                 setup.tensor_parallel, setup.timeout, std::move(setup.cores));
  std::vector<std::shared_ptr<network_group>> rings;
  if (setup.data_parallel_members.empty() && setup.data_parallel_size > 1) {
    // Note [data-parallel nodes]: one endpoint per tensor-parallel rank; connected once every replica is placed.
    for (int r = 0; r < setup.tensor_parallel; ++r) {
      rings.push_back(make_network_group(setup.collectives, system,
                                         data_parallel_group_name(setup.stage, r, setup.tensor_parallel),
                                         setup.replica, setup.data_parallel_size, setup.data_parallel_place,
                                         setup.data_parallel_key, setup.data_parallel_host, setup.timeout));
      setup.data_parallel_members.push_back(rings.back());
    }
  }
  if (!setup.data_parallel_members.empty()) compute->join_data_parallel(std::move(setup.data_parallel_members), setup.replica);
  std::shared_ptr<activation_inbox> inbox;  // Note [activations on data links]
  if (!setup.link_host.empty()) {
    try {
      inbox = std::make_shared<activation_inbox>(setup.stage, setup.link_host, transport_tls_of(system), setup.timeout,
                                                 setup.link_log);
    } catch (const link_error& e) {
      throw std::runtime_error("stage " + std::to_string(setup.stage) + " cannot listen for its activation links on " +
                               setup.link_host + ": " + e.what());
    }
  }
  stage_actors a;
  a.link_port = inbox ? inbox->port() : 0;
  a.sender = spawn_sender(system, setup.stage, setup.timeout, setup.link_log);
  a.processor = spawn_processor(
      system, processor_config{setup.stage, setup.stages, setup.total_chunks, a.sender, setup.log, setup.compute_dtype,
                               std::move(rings), std::move(inbox)},
      std::move(compute));
  a.retriever = spawn_retriever(
      system, retriever_config{setup.stage, std::move(setup.actions), a.processor, setup.timeout, setup.log,
                               setup.report_events});
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
  spec.optimizer = setup.optimizer;
  spec.actions = setup.actions;
  spec.timeout_ms = setup.timeout.count();
  spec.compute_dtype = static_cast<std::uint8_t>(setup.compute_dtype);
  spec.recompute = static_cast<std::uint8_t>(setup.slices.empty() ? recompute_mode::none : setup.slices.front().recompute());
  spec.report_events = true;  // Note [events from nodes]
  spec.tensor_parallel = setup.tensor_parallel;
  spec.data_parallel_size = setup.data_parallel_size;
  spec.replica = setup.replica;
  spec.data_parallel_host = setup.data_parallel_host;
  spec.collectives = static_cast<std::uint8_t>(setup.collectives);
  const colocated_rank& place = setup.data_parallel_place;
  spec.data_parallel_place = {place.local_rank, place.local_size, place.process, place.processes};
  spec.data_parallel_key = setup.data_parallel_key;
  spec.threads = setup.threads;
  spec.node_first_rank = setup.slot.first_rank;
  spec.node_ranks = setup.slot.node_ranks;
  spec.link_host = setup.link_host;
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
  setup.optimizer = spec.optimizer;
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
  setup.timeout = std::chrono::milliseconds(spec.timeout_ms);
  const std::optional<dtype> type = dtype_from_code(spec.compute_dtype);
  if (!type) throw std::invalid_argument(where + ": unknown compute dtype code " + std::to_string(spec.compute_dtype));
  setup.compute_dtype = *type;
  for (auto& slice : setup.slices) slice.set_compute_dtype(*type);
  const std::optional<recompute_mode> recompute = recompute_mode_from_code(spec.recompute);
  if (!recompute) throw std::invalid_argument(where + ": unknown recompute mode code " + std::to_string(spec.recompute));
  for (auto& slice : setup.slices) slice.set_recompute(*recompute);
  // Note [events from nodes]: the stage keeps its step's events (one step's worth: the retriever drains them
  // into stage_done) and its busy sums, and the coordinator's process records them for every output.
  setup.report_events = spec.report_events;
  setup.tensor_parallel = spec.tensor_parallel;
  if (spec.data_parallel_size < 1 || spec.replica < 0 || spec.replica >= spec.data_parallel_size)
    throw std::invalid_argument(where + ": replica " + std::to_string(spec.replica) + " of " +
                                std::to_string(spec.data_parallel_size) + " data-parallel replicas does not exist");
  setup.data_parallel_size = spec.data_parallel_size;
  setup.replica = spec.replica;
  setup.data_parallel_host = std::move(spec.data_parallel_host);
  const auto backend = static_cast<collective_backend>(spec.collectives);
  if (backend != collective_backend::ring && backend != collective_backend::gloo && backend != collective_backend::by_size)
    throw std::invalid_argument(where + ": collective backend code " + std::to_string(spec.collectives) +
                                " is none of ring (0), gloo (1), by-size (2)");
  setup.collectives = backend;
  const std::vector<int>& p = spec.data_parallel_place;  // checked again, with the group's name, by the group
  if (p.size() != 4)
    throw std::invalid_argument(where + ": a data-parallel place of " + std::to_string(p.size()) +
                                " numbers, not 4 (local rank, local size, process, processes)");
  setup.data_parallel_place = {p[0], p[1], p[2], p[3]};
  setup.data_parallel_key = std::move(spec.data_parallel_key);
  setup.link_host = std::move(spec.link_host);
  // Note [cores on nodes]: this machine's cores divided among every rank its nodes host; this stage's share.
  const int T = std::max(1, spec.tensor_parallel);
  if (spec.threads < 0 || spec.node_first_rank < 0 || spec.node_ranks < spec.node_first_rank + T)
    throw std::invalid_argument(where + ": a slot of ranks " + std::to_string(spec.node_first_rank) + ".." +
                                std::to_string(spec.node_first_rank + T - 1) + " among " +
                                std::to_string(spec.node_ranks) + " ranks of the node, with " +
                                std::to_string(spec.threads) + " threads, does not exist");
  const std::vector<compute_cores> all =
      assign_cores(process_cores(), spec.node_ranks, node_threads > 0 ? node_threads : spec.threads);
  setup.cores.assign(all.begin() + spec.node_first_rank, all.begin() + spec.node_first_rank + T);
  if (spec.report_events) setup.log = std::make_shared<event_log>(/*keep_events=*/true);
  return setup;
}

}  // namespace ap
