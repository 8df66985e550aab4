#include "actors/stage_spawner.hpp"

#include <map>
#include <stdexcept>

#include "actors/pipeline_actors.hpp"

namespace ap {

stage_actors spawn_stage(caf::actor_system& system, stage_setup setup) {
  // Built first: it throws for a bad optimizer setting before any actor exists.
  auto worker = std::make_unique<stage_worker>(setup.stage, setup.chunk_ids, std::move(setup.slices), setup.optimizer);
  stage_actors a;
  a.sender = spawn_sender(system, setup.stage, setup.timeout);
  a.processor = spawn_processor(
      system, processor_config{setup.stage, setup.stages, setup.total_chunks, a.sender, setup.log}, std::move(worker));
  a.retriever = spawn_retriever(
      system, retriever_config{setup.stage, std::move(setup.actions), a.processor, setup.timeout, setup.log});
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
    for (const auto& p : slice.parameters()) {
      spec.weights.names.push_back(p.name);
      spec.weights.values.push_back(*p.value);
    }
  }
  spec.optimizer = setup.optimizer;
  for (const action& a : setup.actions)
    spec.actions.insert(spec.actions.end(), {static_cast<int>(a.kind), a.microbatch, a.chunk});
  spec.timeout_ms = setup.timeout.count();
  return spec;
}

stage_setup stage_setup_from_spec(stage_spec spec) {
  const std::string where = "stage " + std::to_string(spec.stage);
  const std::size_t chunks = spec.chunk_ids.size();
  if (spec.layer_specs.size() != chunks || spec.first_layer.size() != chunks)
    throw std::invalid_argument(where + ": " + std::to_string(chunks) + " chunk ids but " +
                                std::to_string(spec.layer_specs.size()) + " layer lists and " +
                                std::to_string(spec.first_layer.size()) + " first layers");
  if (spec.actions.size() % 3 != 0)
    throw std::invalid_argument(where + ": the action list has " + std::to_string(spec.actions.size()) +
                                " ints, not a multiple of 3 (op, microbatch, chunk)");
  if (spec.weights.names.size() != spec.weights.values.size())
    throw std::invalid_argument(where + ": " + std::to_string(spec.weights.names.size()) + " weight names for " +
                                std::to_string(spec.weights.values.size()) + " tensors");
  std::map<std::string, tensor*> weights;
  for (std::size_t i = 0; i < spec.weights.names.size(); ++i) weights[spec.weights.names[i]] = &spec.weights.values[i];

  stage_setup setup;
  setup.stage = spec.stage;
  setup.stages = spec.stages;
  setup.total_chunks = spec.total_chunks;
  setup.chunk_ids = spec.chunk_ids;
  std::size_t used = 0;
  for (std::size_t c = 0; c < chunks; ++c) {
    sequential slice = sequential::from_layer_specs(spec.layer_specs[c], spec.first_layer[c]);
    for (auto& p : slice.parameters()) {
      auto it = weights.find(p.name);
      if (it == weights.end())
        throw std::invalid_argument(where + ": no weights sent for parameter " + p.name + " " +
                                    shape_string(*p.value));
      if (shape_of(*it->second) != shape_of(*p.value))
        throw std::invalid_argument(where + ": parameter " + p.name + " is " + shape_string(*p.value) +
                                    " but the weights sent are " + shape_string(*it->second));
      *p.value = std::move(*it->second);
      ++used;
    }
    setup.slices.push_back(std::move(slice));
  }
  if (used != weights.size())
    throw std::invalid_argument(where + ": " + std::to_string(weights.size() - used) +
                                " weight tensors sent match no parameter of its layers");
  setup.optimizer = spec.optimizer;
  for (std::size_t i = 0; i < spec.actions.size(); i += 3) {
    const int kind = spec.actions[i];
    if (kind < 0 || kind >= static_cast<int>(op_count))
      throw std::invalid_argument(where + ": action " + std::to_string(i / 3) + " has no op " + std::to_string(kind));
    setup.actions.push_back(action{spec.stage, static_cast<op>(kind), spec.actions[i + 1], spec.actions[i + 2]});
  }
  setup.timeout = std::chrono::milliseconds(spec.timeout_ms);
  return setup;
}

}  // namespace ap
