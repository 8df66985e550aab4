// What a stage computes, without any actor: its chunks (layer slices), the activation caches of the
// microbatches in flight, its accumulated gradients and its own optimizer. The processor actor wraps it.
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
  // B: dx (empty for chunk 0: nobody needs it) and parameter gradients; frees the cache. With microbatch
  // all_microbatches, one backward over the whole batch from every microbatch's cache of the chunk joined
  // (Note [sync-backward] in schedule.hpp): dy and dx hold the whole batch's rows.
  // `layer_done` as sequential::backward's.
  tensor backward(int microbatch, int chunk, const tensor& dy, const std::function<void(layer&)>& layer_done = {});
  // I: dx only (empty for chunk 0); keeps the cache for W. Note [backward split] in layer.hpp.
  tensor backward_input(int microbatch, int chunk, const tensor& dy);
  // W: parameter gradients from the cache left by I; frees the cache.
  void backward_weight(int microbatch, int chunk);

  // One optimizer step on the accumulated gradients, then zero them. With parts > 1, only part `part` of every
  // parameter's elements and state is updated (Note [shared optimizer step] in stage_compute.hpp).
  void apply_optimizer(std::size_t part = 0, std::size_t parts = 1);
  // Copies part `part` of `parts` of every parameter (and, with `state`, of its optimizer state) from `owner`,
  // a rank of the same layers (another replica's); the rest is untouched.
  void take_part(stage_rank& owner, std::size_t part, std::size_t parts, bool state);
  // Drops every cache and every accumulated gradient: the step is abandoned, no parameter changed.
  void abort();

  int stashed() const { return static_cast<int>(caches_.size()); }
  int peak_stashed() const { return peak_; }
  // Bytes of activations stashed now (every layer's saved tensors, Note [compute dtype]), and the most at
  // once since reset_peak.
  std::size_t stashed_bytes() const;
  std::size_t peak_stashed_bytes() const { return peak_bytes_; }
  void reset_peak() { peak_ = stashed(), peak_bytes_ = stashed_bytes(); }

  std::vector<parameter> parameters();
  std::vector<parameter> chunk_parameters(int chunk);  // the parameters of one chunk this stage holds
  // "stage 1 (chunk 1: Linear(512->256) ReLU)": names the place in error messages.
  std::string where(int chunk) const;

  // Note [stage state]: a stage's state is its parameters under their global names ("3.weight") and its
  // optimizer's state under checkpoint_optimizer_prefix + key ("optimizer/3.weight.m"), the names of a
  // checkpoint (checkpoint.hpp), plus the optimizer's steps. The names do not depend on the stage split, so
  // the states of all stages of one pipeline make one checkpoint that loads into any other split.
  stage_state export_state();
  // Replaces parameters, optimizer (state and steps) with `state`, which must hold exactly this stage's
  // tensors with their shapes (optimizer state when it has steps > 0 or any optimizer tensor). Everything is
  // checked before anything changes; a refusal throws std::runtime_error naming the stage and the tensor.
  // Drops every cache and accumulated gradient, like abort().
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
