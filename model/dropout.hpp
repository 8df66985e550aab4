// Dropout: zeroes each unit with probability p in training and scales the rest by 1 / (1 - p).
#pragma once

#include "model/layer.hpp"

namespace ap {

// Note [dropout mask]: the mask is a hash of (seed, ctx.step, sample, unit), sample = ctx.first_sample + row,
// so a microbatch drops exactly the units a full-batch forward drops, on any stage. Different dropout layers
// need different seeds.
class dropout final : public layer {
 public:
  dropout(float p, std::uint64_t seed);

  std::string describe() const override;
  struct saved : saved_state {
    bool identity = false;  // eval mode or p == 0: forward passed x through, and backward passes dy
    tensor mask;            // (x's shape): 0 or 1 / (1 - p); in a bfloat16 layer 0 or 1, scaled in float32
    std::size_t bytes() const override { return mask.byte_size(); }
    // Masks are per sample, so the stacked masks are the whole batch's (Note [joined caches]).
    std::unique_ptr<saved_state> join_rows(const std::vector<const saved_state*>& parts) const override {
      if (!identity) return join_row_fields<saved>(parts, {&saved::mask});
      auto out = std::make_unique<saved>();
      out->identity = true;
      return out;
    }
  };
  tensor forward(const tensor& x, layer_cache& cache, const forward_context& ctx) const override;
  void backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const override;
  std::unique_ptr<layer> clone() const override { return std::make_unique<dropout>(*this); }
  std::string spec() const override;

  float p() const { return p_; }
  std::uint64_t seed() const { return seed_; }

 private:
  float p_;
  std::uint64_t seed_;
};

}  // namespace ap
