// What a stage computes, without any actor: its chunks, the caches of microbatches in flight, its gradients and
// its optimizer.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "stage/stage_state.hpp"
#include "plan/stage_info.hpp"
#include "model/optimizer.hpp"
#include "model/sequential.hpp"

namespace ap {

class stage_rank {
 public:
  // chunk_ids[i] is the global chunk id of slices[i]; ranges[i] its layers in the whole model.
  stage_rank(int stage, std::vector<int> chunk_ids, std::vector<sequential> slices, const optimizer_config& optimizer);

  int stage() const { return stage_; }

  // F: runs the chunk and stashes its cache under (microbatch, chunk).
  tensor forward(std::uint64_t step, int microbatch, int chunk, int first_sample, const tensor& x);
  // B: dx (empty for chunk 0) and parameter gradients; frees the cache. With all_microbatches, one backward over
  // the whole batch from the chunk's microbatch caches joined (Note [sync-backward]). `layer_done` as
  // sequential::backward's.
  tensor backward(int microbatch, int chunk, const tensor& dy, const std::function<void(layer&)>& layer_done = {});
  // I: dx only (empty for chunk 0); keeps the cache for W (Note [backward split]).
  tensor backward_input(int microbatch, int chunk, const tensor& dy);
  // W: parameter gradients from the cache left by I; frees the cache.
  void backward_weight(int microbatch, int chunk);

  // One optimizer step on the accumulated gradients, then zero them; only part `part` of `parts` of every
  // parameter (Note [shared optimizer step]).
  void apply_optimizer(std::size_t part = 0, std::size_t parts = 1);
  // Copies part `part` of `parts` of every parameter (with `state`, of its optimizer state) from `owner`.
  void take_part(stage_rank& owner, std::size_t part, std::size_t parts, bool state);
  // Drops every cache and every accumulated gradient: the step is abandoned, no parameter changed.
  void abort();

  int stashed() const { return static_cast<int>(caches_.size()); }
  int peak_stashed() const { return peak_; }
  // Bytes of activations stashed now, and the most at once since reset_peak.
  std::size_t stashed_bytes() const;
  std::size_t peak_stashed_bytes() const { return peak_bytes_; }
  void reset_peak() { peak_ = stashed(), peak_bytes_ = stashed_bytes(); }

  std::vector<parameter> parameters();
  std::vector<parameter> chunk_parameters(int chunk);  // the parameters of one chunk this stage holds
  // "stage 1 (chunk 1: Linear(512->256) ReLU)": names the place in error messages.
  std::string where(int chunk) const;

  // Note [stage state]: a stage's state is its parameters under global names ("3.weight"), its optimizer's state
  // ("optimizer/3.weight.m") and steps: a checkpoint's names, independent of the split, so all stages' states make
  // one checkpoint that loads into any split.
  stage_state export_state();
  // Replaces parameters and optimizer with `state`, which must hold exactly this stage's tensors and shapes. All
  // is checked first; a refusal throws std::runtime_error naming the stage and tensor, changing nothing. Drops
  // every cache and gradient, like abort().
  void import_state(const stage_state& state);

 private:
  sequential& chunk_model(int chunk, const char* action, int microbatch);
  sequential_cache take_cache(int microbatch, int chunk, const char* action);
  sequential_cache take_joined_cache(int chunk);

  int stage_;
  std::vector<int> chunk_ids_;
  std::vector<sequential> slices_;
  optimizer_config optimizer_config_;  // to build a fresh optimizer for import_state
  std::unique_ptr<optimizer> optimizer_;
  std::map<std::pair<int, int>, sequential_cache> caches_;  // (microbatch, chunk) -> saved activations
  int peak_ = 0;
  std::size_t peak_bytes_ = 0;
};

}  // namespace ap
