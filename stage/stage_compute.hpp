// A stage's tensor-parallel ranks: T stage_workers, each over its shards of the stage's chunks, that run
// every action of the stage in lockstep on T threads. The processor actor wraps it, T = 1 included.
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

// Note [tensor-parallel stage]: with tensor-parallel degree T, each chunk of the stage goes through
// tensor_parallel_specs (its Linear pairs become column/row-parallel, Note [Megatron pairing]) chunk by
// chunk, so a pair never spans two chunks or two stages, and every chunk's input and output are whole. Rank
// r of T builds the chunks from their specs, takes the whole weights and joins the stage's local_group,
// keeping its shard (Note [tensor-parallel layers]). Every action (F, B, I, W, the optimizer step) then
// runs on all T ranks at once, one thread each, in lockstep: they compute the same layers on the same input,
// meeting in the pairs' all-reduces, and produce the same whole output (and dx); rank 0's goes on to the
// next stage, so the schedule, the I/W split and the messages between stages are those of an unsplit stage.
// A chunk with nothing to split is computed whole by every rank.

// Note [data-parallel stage]: with D replicas of the pipeline, rank r of stage s in every replica is a
// member of one data-parallel group (D ranks). reduce_gradients(chunk), at the schedule's R action or at the
// latest in the optimizer step, starts the all-reduce (sum) of the chunk's gradients across the replicas,
// one collective per parameter, and returns at once, so the reduction overlaps the stage's remaining
// backward work (Note [async collectives]); each replica scales its loss by the whole batch's rows, so the
// sums are the whole batch's gradients, the same bits in every replica. The optimizer step waits for them,
// then meets the other replicas in a one-number all-reduce: it is the step's commit, which a replica whose
// step failed never reaches (its stages abort the group instead), so either every replica steps or none.
// A data-parallel group, once aborted, stays so: the pipeline is spent after a failed step (as data_tensor_runner). The stage's state (checkpoints, snapshots,
// gathered weights) is always whole, under the global names (Note [stage state]): the ranks' shards are
// gathered into it and cut from it, so it loads into any (stages, T) layout. A rank whose action fails
// aborts the group, so the other ranks stop at once instead of waiting for it; the stage then rebuilds its
// ranks and group from their (unchanged) weights before the next action, and the pipeline can go on.

// Note [shared optimizer step]: replicas in one process (data_tensor_runner) hold the same reduced gradients
// and would each run the same optimizer over every parameter: D times the optimizer's memory traffic (Adam
// reads and writes 28 bytes an element), on a machine whose cores share one memory bus. Instead replica d
// updates part d of every parameter's elements (shard_rows of its flat size) and of their optimizer state,
// then every replica copies the other parts' new values from their owners (take_parts): the update is done
// once, and the copy moves 4 bytes an element per replica instead of 28. Each element is updated by the same
// instructions from the same values, so the weights are the bits of every replica running the whole step.
// A replica's optimizer state is current only in its own part until take_parts(..., state = true) gathers it
// (before a checkpoint, which exports replica 0's). Measured on 16 cores, the heavy MLP's D = 16 did not move
// (9,876 samples/s against 9,857 before): the redundant optimizer was not what held it back there.
class stage_compute {
 public:
  // `slices` are the stage's chunks whole, with their weights and compute dtype. Rank r computes on cores[r]
  // (Note [cores per rank] in tensor/compute.hpp; rank 0 on the thread that calls the actions); empty: one
  // thread each, not pinned. Throws std::invalid_argument naming the stage and layer when T does not divide a
  // width it splits.
  stage_compute(int stage, std::vector<int> chunk_ids, std::vector<sequential> slices, const optimizer_config& optimizer,
                int tensor_parallel = 1, std::chrono::milliseconds timeout = default_timeout,
                std::vector<compute_cores> cores = {});
  ~stage_compute();

  int stage() const { return stage_; }
  int tensor_parallel() const { return tensor_parallel_; }
  // Layers split over the ranks, as "2 column_linear:16:32, 4 row_linear:32:16"; empty when none is.
  const std::string& split_layers() const { return split_layers_; }

  // Note [vocab-parallel] in model/vocab_parallel.hpp: with T > 1, every rank holds its share of the
  // embeddings' tokens, and chunk `head_chunk` (the one ending the model; -1: none on this stage) its share of the
  // LM head's outputs. Keeps the weights; before the first step. Nothing with T = 1.
  void split_vocabulary(int head_chunk);
  bool splits_vocabulary() const { return vocabulary_split_; }
  // Note [sequence parallelism] in model/sequence_parallel.hpp: with T > 1, the ranks divide the rows of the
  // chunks' runs of split blocks (a stage may hold none). Keeps the weights; before the first step. Nothing with
  // T = 1.
  void split_sequence();

  // As stage_rank's; the results are rank 0's (every rank's are the same). With the head chunk split, B and I
  // of that chunk take an empty dy: each rank's own from forward_loss.
  tensor forward(std::uint64_t step, int microbatch, int chunk, int first_sample, const tensor& x);
  // Note [loss in the last stage]: with the vocabulary split, the head chunk's logits never leave their ranks.
  // F of the head chunk, then the cross-entropy of its logits against `labels` across the ranks
  // (vocab_parallel_cross_entropy, divided by `batch_rows`); each rank keeps its columns of the gradient for the
  // microbatch's B (or I). Returns the microbatch's loss share, as the loss's take_loss_and_gradient would.
  float forward_loss(std::uint64_t step, int microbatch, int chunk, int first_sample, const tensor& x,
                     const tensor& labels, std::size_t batch_rows);
  tensor backward(int microbatch, int chunk, const tensor& dy);
  tensor backward_input(int microbatch, int chunk, const tensor& dy);
  void backward_weight(int microbatch, int chunk);
  // `members[r]` is rank r's member of its data-parallel group, `replica` this
  // replica's index (for error texts) (Note [data-parallel stage]). Before the first step.
  void join_data_parallel(std::vector<std::shared_ptr<process_group>> members, int replica);
  // Starts the all-reduce of `chunk`'s gradients across the replicas (nothing with one replica).
  void reduce_gradients(int chunk);
  // B of the chunk's last microbatch in this step, starting each layer's reduction across the replicas as soon as
  // that layer's backward is done (one bucket per layer, last layer first), while the layers below still
  // compute: reduce_gradients(chunk) done as early as it can be. A backward alone with one replica.
  tensor backward_and_reduce(int microbatch, int chunk, const tensor& dy);
  // Note [tied weights] in model/weight_tie.hpp: the gradient of weight `name` (reduced across the replicas), and
  // adding the other copy's to it on every rank (transposed where its shape is), for a tie between two stages.
  tensor tied_gradient(const std::string& name);
  void add_tied_gradient(const std::string& name, const tensor& other);
  // The sum of squares of this stage's gradients, each element counted once (shards on every rank, whole tensors on
  // rank 0), after the data-parallel reductions (Note [global gradient clipping]).
  double gradient_square_sum();
  // One optimizer step on the accumulated (and reduced) gradients multiplied by `clip_factor`; with parts > 1,
  // of part `part` of every parameter only (Note [shared optimizer step]).
  void apply_optimizer(float clip_factor = 1.0f, int part = 0, int parts = 1);
  // After every replica's apply_optimizer(factor, d, D), replica `replica`
  // copies part d of every parameter from replicas[d] (all of them stages of the same layers and ranks, in
  // this process), and with `state` part d of the optimizer state too (Note [shared optimizer step]).
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
  void rebuild_if_broken();
  // Runs work(r, worker r) on every rank; rethrows the cause of a failure (not a peer's view of it).
  void on_ranks(const std::function<void(int, stage_rank&)>& work);
  // on_ranks, keeping rank 0's result (every rank's is the same whole tensor).
  tensor rank0_result(const std::function<tensor(stage_rank&)>& work);

  int stage_;
  std::vector<int> chunk_ids_;
  // A chunk as given, what its ranks are built from: its architecture, not its parameters (a whole sequential
  // here held the stage's weights and gradients once more beside the ranks' shards: 80 MB for the heavy MLP on
  // 2 stages x T = 2, Note [tensor-parallel memory] in model/tensor_parallel.hpp).
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
  // The dy of rank r's B or I of `chunk`: `dy`, or for the split head's chunk the gradient forward_loss kept,
  // moved into `taken` (the layers' cache keeps what W needs).
  const tensor& dy_for(int r, int microbatch, int chunk, const tensor& dy, tensor& taken);
  void finish_reductions();
  void mark_reduced(int chunk);  // throws when the chunk's reduction already started this step
};

}  // namespace ap
