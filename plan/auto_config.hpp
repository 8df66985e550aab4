// --auto: the mesh a run trains on, chosen by predicting every configuration that fits (Note [automatic
// configuration]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/optimizer.hpp"
#include "model/sequential.hpp"
#include "plan/memory_model.hpp"
#include "plan/partition.hpp"

namespace ap {

// Note [automatic configuration]: a configuration is the run's mesh: one process or a pipeline (P stages, m
// microbatches, a schedule, chunks, a partition), D replicas, T ranks, t threads a rank, P x D x T x t <= cores.
// Each is predicted from layer costs measured here and the memory model; `train --auto` runs the best few
// briefly (Note [auto trials]) and trains with the fastest.
struct mesh_config {
  int stages = 0;  // 0: one process computes every layer, no pipeline
  int microbatches = 1;
  std::string schedule;  // a pipeline's
  int chunks = 1;        // per stage
  int data_parallel = 1, tensor_parallel = 1;
  int threads = 1;  // intra-op threads of every compute rank
  recompute_mode recompute = recompute_mode::none;
  std::vector<std::size_t> layers_per_chunk;  // a pipeline's time partition
  int nodes = 0;  // the nodes its stages run on (Note [auto on nodes]); 0: this process computes
  int ranks() const { return (stages > 0 ? stages : 1) * data_parallel * tensor_parallel; }
};

// E.g. "pipeline: 2 stages x 1 thread, 1f1b, 8 microbatches, layers 3,2" or "single process: 2 threads".
std::string describe(const mesh_config& c);

struct auto_candidate {
  mesh_config config;
  double step_s = 0.0;          // seconds per step
  double compute_s = 0.0;       // of which the busiest rank computes (a pipeline: its busiest stage)
  double communication_s = 0.0; // all-reduces charged to the step
  std::uint64_t peak_bytes = 0; // this process's predicted memory: every stage and replica it holds
  std::vector<double> busy_s;   // a pipeline's: each stage's compute per step (tensor-parallel all-reduces in)
  double message_s = 0.0;       // a pipeline's: a message between two stages, estimated
};

// The estimated cost of one message between two stages of this process.
inline constexpr double default_hop_s = 50e-6;

// Note [auto on nodes]: with `train --auto --nodes A,B,...` the candidates are pipelines only, placed by node_of
// within each host's cores (Note [cores on nodes]). Costs are the coordinator's, scaled to a node's threads; messages
// between nodes are priced from measured round trips; replicas on several nodes all-reduce as a ring.
struct auto_node {
  std::string host;  // as in --nodes: nodes with the same host share its machine's cores
  int cores = 1;     // its machine's
  int threads = 0;   // fixed by `actorpipe node --threads` (0: as the coordinator asks)
};

// What the planner knows: the run, the machine and how to measure it.
struct auto_inputs {
  std::size_t batch = 1;  // samples per step
  int cores = 1;
  std::uint64_t budget = 0;  // bytes a stage may hold (0: no budget)
  optimizer_config optimizer;
  // Each layer's cost on one microbatch of `rows` samples (measured and cached by the caller).
  std::function<const std::vector<layer_cost>&(std::size_t rows, int threads, recompute_mode recompute)> layer_costs;
  // Seconds of one all-reduce of `bytes` among `ranks` compute ranks of this process.
  std::function<double(int ranks, std::uint64_t bytes)> allreduce_s;
  // Seconds of one optimizer step of the whole model on `threads` threads.
  std::function<double(int threads)> optimizer_s;
  double hop_s = default_hop_s;  // a message between two stages (an estimate)
  // The nodes, in --nodes order (empty: this process computes); one message's seconds between two processes over
  // CAF, and on a data link (empty: as network_s) from `link_bytes` up.
  std::vector<auto_node> nodes;
  std::function<double(std::uint64_t bytes)> network_s;
  std::function<double(std::uint64_t bytes)> link_s;
  // The same between two nodes of one host (Note [one copy on one machine]); empty: as link_s.
  std::function<double(std::uint64_t bytes)> copy_s;
  std::uint64_t link_bytes = 0;
  std::uint64_t sample_bytes = 0;  // one sample's input (sent to the first stage by the coordinator)
};

// Every configuration that fits, predicted, fastest first. Throws std::invalid_argument when none fits the
// budget (naming the least memory needed) or when nodes fix different thread counts.
std::vector<auto_candidate> rank_configurations(sequential& model, const auto_inputs& in);

// The tensor-parallel sizes T > 1 that `model` splits over (its widths and heads divide) with T <= cores.
std::vector<int> tensor_parallel_sizes(sequential& model, int cores);

// Seconds of one all-reduce of `bytes` float32 among `ranks` threads (a local_group), median of `repeats`.
double measure_local_allreduce_s(int ranks, std::uint64_t bytes, int repeats = 5);

// Empty when the measured step is within 15% of the prediction; else which part was off. `busy_s`: a pipeline's
// measured busy seconds per stage (empty for a single process).
std::string predicted_step_check(const auto_candidate& chosen, double measured_step_s,
                                 const std::vector<double>& busy_s);

}  // namespace ap
