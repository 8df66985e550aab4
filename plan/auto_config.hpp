// --auto: the mesh a run trains on, chosen before it starts by predicting every configuration that fits the
// machine's cores and the memory budget (Note [automatic configuration]).
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

// Note [automatic configuration]: a configuration is the run's mesh: one process (stages 0) or a pipeline (P >= 2
// stages, m microbatches, a schedule, chunks per stage, a partition), D replicas, T tensor-parallel ranks and t
// threads per rank, with P x D x T x t <= cores. Candidates: t and D powers of two or all the cores, D dividing
// the batch, T one the model splits over; P from 2 to the model's blocks (Note [whole blocks]), m in P, 2P, 4P, 8P,
// GPipe, 1F1B, ZB-H1 or interleaved with 2 chunks, the partition balancing measured time; block recomputation
// only under a memory budget. Each is predicted from costs measured on this machine:
// - a pipeline's step: its schedule simulated on the stages' layer costs (each action paying `hop_s`, a message
//   between stages), plus the largest stage's all-reduce among the D replicas and its optimizer step;
// - one process's step: its layer costs, the all-reduce and the optimizer step;
// - with T ranks a split layer costs 1/T of its time plus an all-reduce per reducing part, measured among T
//   threads; all-reduces are charged in full, as if none overlapped the backward.
// Its memory is the memory model's (Note [memory model]) for the whole process, what --max-memory bounds (Note
// [memory budget]). `train --auto` prints the best few, runs the first few for a few steps each (Note [auto
// trials] in engine/auto_choice.cpp), trains with the fastest and checks its prediction (predicted_step_check).
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

// "pipeline: 2 stages x 1 thread, 1f1b, 8 microbatches, layers 3,2", "single process: 2 threads",
// "single process: 2 replicas x 1 thread", each adding ", on 2 nodes", ", 2 tensor-parallel ranks" and
// ", recompute blocks" where they apply.
std::string describe(const mesh_config& c);

// A configuration and what it is predicted to cost.
struct auto_candidate {
  mesh_config config;
  double step_s = 0.0;          // seconds per step
  double compute_s = 0.0;       // of which the busiest rank computes (a pipeline: its busiest stage)
  double communication_s = 0.0; // all-reduces charged to the step
  std::uint64_t peak_bytes = 0; // this process's predicted memory: every stage and replica it holds
  std::vector<double> busy_s;   // a pipeline's: each stage's compute per step (tensor-parallel all-reduces in)
  double message_s = 0.0;       // a pipeline's: what a message between two stages was estimated to cost
};

// The estimated cost of one message between two stages of this process (a mailbox hop and a wake-up).
inline constexpr double default_hop_s = 50e-6;

// Note [auto on nodes]: with `train --auto --nodes A,B,...` the candidates are pipelines only (the coordinator
// computes no layer), from one stage up, placed as the pipeline places them (replica d's stage s on node
// (d x P + s) mod N: node_of), each machine's ranks x t within its cores (nodes of one host share them, Note
// [cores on nodes]; a node's --threads fixes t). Each node reports its cores and fixed threads in its handshake
// (actors/node_probe.hpp). The costs are this machine's, except:
// - more threads than this machine has: its costs on all of them, scaled down by the ratio (an estimate);
// - a message between stages on two nodes: the largest activation crossing a chunk boundary, on a line through
//   two measured round trips (`link_s` on a data link from `link_bytes` up, Note [activations on data links];
//   `network_s` over CAF below it; `copy_s` between nodes of one host, Note [one copy on one machine]);
// - the coordinator is another process: the last stage waits for each loss gradient, each step pays the first
//   input and two bare messages;
// - replicas on several nodes all-reduce as a ring, 2 (D - 1) messages of 1/D of the gradients (`link_s`, or
//   `copy_s` on one host), or through shared memory (`allreduce_s`) on one node.
// Memory is per node (Note [memory budget]). The trials run on the nodes, so they measure what this misses.
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
  // Each layer's cost on one microbatch of `rows` samples on `threads` intra-op threads, with `recompute`
  // (measured by the caller, who keeps them: the planner asks for the same figures many times).
  std::function<const std::vector<layer_cost>&(std::size_t rows, int threads, recompute_mode recompute)> layer_costs;
  // Seconds of one all-reduce of `bytes` among `ranks` compute ranks of this process.
  std::function<double(int ranks, std::uint64_t bytes)> allreduce_s;
  // Seconds of one optimizer step of the whole model on `threads` intra-op threads (a stage steps its share).
  std::function<double(int threads)> optimizer_s;
  double hop_s = default_hop_s;  // a message between two stages (an estimate: Note [automatic configuration])
  // The nodes the stages go on, in --nodes order (empty: this process computes), and the
  // seconds of one message of `bytes` between two processes (needed with nodes): in a CAF message, and on a
  // data link (empty: as network_s), which tensors of `link_bytes` or more between stages take (Note [auto on nodes]).
  std::vector<auto_node> nodes;
  std::function<double(std::uint64_t bytes)> network_s;
  std::function<double(std::uint64_t bytes)> link_s;
  // The same between two nodes of one host, copied out of the sender's memory (Note [one copy on one machine]);
  // empty: as link_s (this machine's kernel refused the copy, or it could not be timed).
  std::function<double(std::uint64_t bytes)> copy_s;
  std::uint64_t link_bytes = 0;
  std::uint64_t sample_bytes = 0;  // one sample's input: with nodes, what the coordinator sends the first stage
};

// Every configuration that fits, predicted, fastest first (ties: fewer ranks, then the simpler). Throws
// std::invalid_argument when none fits the budget, naming the least memory any configuration needs and that
// configuration, and when nodes fix different thread counts.
std::vector<auto_candidate> rank_configurations(sequential& model, const auto_inputs& in);

// The tensor-parallel sizes T > 1 that `model` splits over (its widths and heads divide) with T <= cores.
std::vector<int> tensor_parallel_sizes(sequential& model, int cores);

// Seconds of one all-reduce of `bytes` float32 among `ranks` threads of this process (a local_group),
// the median of `repeats`.
double measure_local_allreduce_s(int ranks, std::uint64_t bytes, int repeats = 5);

// The check after training: empty when the measured step is within 15% of the prediction; else which part of
// the prediction was off. `busy_s` is a pipeline's measured busy seconds per step and stage (empty for a single
// process), compared with the chosen candidate's.
std::string predicted_step_check(const auto_candidate& chosen, double measured_step_s,
                                 const std::vector<double>& busy_s);

}  // namespace ap
