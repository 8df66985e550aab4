// A stage's T tensor-parallel ranks, running every action of the stage in lockstep on T threads (T = 1 included).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collective/local_group.hpp"
#include "model/parallel_linear.hpp"
#include "model/weight_tie.hpp"
#include "failure/timeout.hpp"
#include "stage/lockstep_threads.hpp"
#include "stage/stage_rank.hpp"

namespace ap {

// Note [tensor-parallel stage]: each chunk's Linear pairs become column/row-parallel (Note [Megatron pairing]), so
// every chunk's input and output are whole. Every action runs on all T ranks in lockstep; rank 0's output goes
// on, so the schedule and messages are those of an unsplit stage. The state is always whole (Note [stage state]),
// so it loads into any (stages, T) layout.

// Note [data-parallel stage]: rank r of stage s in every replica belongs to one data-parallel group.
// reduce_gradients(chunk) starts the chunk's gradient all-reduce and returns (Note [async collectives]); the
// optimizer step waits for it, then meets the other replicas in a one-number all-reduce, its commit, which a
// failed replica aborts instead: every replica steps or none. A failing rank aborts the local group; the ranks
// are rebuilt from their weights before the next action.

// Note [shared optimizer step]: replicas in one process hold the same reduced gradients, so replica d updates part
// d of every parameter and its optimizer state, and the others copy it (take_parts): the bits of a whole step at
// 1/D of the memory traffic. A replica's optimizer state is current only in its own part until gathered.
class stage_compute {
 public:
  // `slices` are the stage's chunks whole. Rank r computes on cores[r] (Note [cores per rank]); empty: unpinned.
  // Throws std::invalid_argument naming the stage and layer when T does not divide a width it splits.
  stage_compute(int stage, std::vector<int> chunk_ids, std::vector<sequential> slices, const optimizer_config& optimizer,
                int tensor_parallel = 1, std::chrono::milliseconds timeout = default_timeout,
                std::vector<compute_cores> cores = {});
  ~stage_compute();

  int stage() const { return stage_; }
  int tensor_parallel() const { return tensor_parallel_; }
  // Layers split over the ranks, as "2 column_linear:16:32, 4 row_linear:32:16"; empty when none is.
  const std::string& split_layers() const { return split_layers_; }

  // With T > 1 (Note [vocab-parallel]), each rank holds its share of the vocabulary; `head_chunk`: the LM head's
  // chunk (-1: none here). Before the first step.
  void split_vocabulary(int head_chunk);
  bool splits_vocabulary() const { return vocabulary_split_; }
  // Splits blocks' rows among the ranks (Note [sequence parallelism]). Before the first step.
  void split_sequence();

  // As stage_rank's; results are rank 0's. With the head chunk split, B and I of that chunk take an empty dy.
  tensor forward(std::uint64_t step, int microbatch, int chunk, int first_sample, const tensor& x);
  // Note [loss in the last stage]: with the vocabulary split, the head chunk's logits never leave their ranks: F,
  // then the cross-entropy across the ranks; each rank keeps its columns of the gradient for B (or I).
  float forward_loss(std::uint64_t step, int microbatch, int chunk, int first_sample, const tensor& x,
                     const tensor& labels, std::size_t batch_rows);
  tensor backward(int microbatch, int chunk, const tensor& dy);
  tensor backward_input(int microbatch, int chunk, const tensor& dy);
  void backward_weight(int microbatch, int chunk);
  // `members[r]`: rank r's data-parallel group (Note [data-parallel stage]). Before the first step.
  void join_data_parallel(std::vector<std::shared_ptr<process_group>> members, int replica);
  // Starts the all-reduce of `chunk`'s gradients across the replicas (nothing with one replica).
  void reduce_gradients(int chunk);
  // B of the chunk's last microbatch, starting each layer's reduction as soon as its backward is done.
  tensor backward_and_reduce(int microbatch, int chunk, const tensor& dy);
  // A tied weight's gradient (Note [tied weights]), and adding the other stage's copy's to it.
  tensor tied_gradient(const std::string& name);
  void add_tied_gradient(const std::string& name, const tensor& other);
  // Sum of squares of the gradients, each element once (Note [global gradient clipping]).
  double gradient_square_sum();
  // One optimizer step on the gradients times `clip_factor`, on part `part` of `parts`.
  void apply_optimizer(float clip_factor = 1.0f, int part = 0, int parts = 1);
  // Copies part d of every parameter (with `state`, of the optimizer state too) from replicas[d].
  void take_parts(const std::vector<stage_compute*>& replicas, int replica, bool state);
  void abort();

  int peak_stashed() const;               // rank 0's count of stashed forwards
  std::size_t peak_stashed_bytes() const;  // over every rank
  void reset_peak();

  // Whole tensors under their global names (Note [stage state]).
  named_tensors whole_parameters();
  stage_state export_state();
  void import_state(const stage_state& state);

 private:
  void build_ranks();
  // Aborts the data-parallel groups ("replica R stage S <what>") and waits for this step's reductions (Note
  // [reductions before the gradients go]).
  void abandon_reductions(const std::string& what);
  void rebuild_if_broken();
  // Runs work(r, worker r) on every rank; rethrows the cause of a failure (not a peer's view of it).
  void on_ranks(const std::function<void(int, stage_rank&)>& work);
  // on_ranks, keeping rank 0's result (every rank's is the same whole tensor).
  tensor rank0_result(const std::function<tensor(stage_rank&)>& work);

  int stage_;
  std::vector<int> chunk_ids_;
  // A chunk's architecture only: the ranks' shards hold the weights (Note [tensor-parallel memory]).
  struct chunk_architecture {
    std::vector<std::string> specs;
    std::size_t first_index = 0;
    dtype compute = dtype::float32;
    recompute_mode recompute = recompute_mode::none;
  };
  std::vector<chunk_architecture> wholes_;
  optimizer_config optimizer_;
  int tensor_parallel_;
  std::chrono::milliseconds timeout_;
  std::vector<compute_cores> cores_;  // one per rank
  std::map<std::string, shard_layout> layouts_;  // sharded parameters by global name: how they are cut
  std::string split_layers_;
  std::unique_ptr<local_group> group_;
  std::vector<std::unique_ptr<stage_rank>> ranks_;
  std::unique_ptr<lockstep_threads> threads_;
  bool broken_ = false;  // a rank failed and aborted the group: rebuild before the next action
  std::vector<std::shared_ptr<process_group>> data_parallel_;  // per rank; empty: one replica
  int replica_ = 0;
  std::vector<int> reduced_chunks_;                // chunks whose reduction started this step
  std::vector<collective_handle> reductions_;      // their collectives, waited for by the optimizer step
  bool reductions_finished_ = false;               // this step's gradients are reduced (by the norm's request)
  std::vector<weight_tie> ties_;                   // of the chunks' tied layers (Note [tied weights])
  bool vocabulary_split_ = false;                  // Note [vocab-parallel]
  bool sequence_split_ = false;                    // Note [sequence parallelism]
  int head_chunk_ = -1;                            // the chunk ending the model, when its head is split
  std::size_t vocabulary_ = 0;                     // the head's outputs
  std::vector<std::map<int, tensor>> loss_gradients_;  // per rank: microbatch -> its columns of d loss / d logits
  // The dy of rank r's B or I: `dy`, or for the split head's chunk the gradient forward_loss kept, moved into `taken`.
  const tensor& dy_for(int r, int microbatch, int chunk, const tensor& dy, tensor& taken);
  void finish_reductions();
  void mark_reduced(int chunk);  // throws when the chunk's reduction already started this step
};

}  // namespace ap
