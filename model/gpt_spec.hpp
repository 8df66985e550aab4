// The GPT model spec: "gpt:layers=8,dim=256,heads=8,context=128" (byte vocabulary by default) or a preset
// ("gpt2", "gpt2-medium", ... with the same keys after ':'), parsed and expanded into the layer specs of a
// Sequential: token embedding, positional embedding, `layers` pre-norm decoder blocks (one block each, so one
// unit of partitioning), final norm, LM head.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ap {

// Note [GPT-2 initialisation]: init=kaiming (plain gpt specs' default) starts Linear weights Kaiming-uniform
// (std sqrt(2 / in)), too large for a GPT-2-shaped model: the residual stream's variance grows with depth and
// the early loss rises. init=gpt2 (the presets' default) is GPT-2's: Linear weights and embeddings
// normal(0, 0.02), biases 0, norm weights 1, and the two projections adding into the residual stream
// normal(0, 0.02 / sqrt(2 layers)). The choice is written into each layer's spec as options (Note [layer
// options] in model/layer_spec.hpp), so every copy rebuilt from its text (a stage, a tensor-parallel shard)
// initialises as one process does. docs/models.md compares the two.
struct gpt_config {
  std::size_t layers = 8;        // decoder blocks
  std::size_t dim = 256;         // width of the residual stream
  std::size_t heads = 8;         // attention heads; must divide dim
  std::size_t context = 128;     // longest sequence (positions of the positional embedding)
  std::size_t vocabulary = 256;  // token embedding rows and LM head outputs (256: byte tokens); key "vocab"
  bool bias = true;              // biases of every Linear (attention's projections included) and LayerNorm
  std::string gelu = "tanh";     // "tanh" (GPT-2's approximation) or "exact" (erf)
  std::string norm = "layer";    // "layer" (LayerNorm) or "rms" (RMSNorm)
  std::size_t mlp = 0;           // the MLP's hidden width; 0: default_mlp_width() (mlp_width())
  std::string init = "kaiming";  // "kaiming" or "gpt2": Note [GPT-2 initialisation]
  bool tied = false;             // the LM head's weight is the token embedding's (Note [tied weights])
  // LLaMA-style choices (docs/models.md):
  std::string pos = "learned";   // "learned" (a position: layer) or "rope" (Note [rotary positions], model/attention.hpp)
  std::size_t kv_heads = 0;      // key/value heads (Note [grouped-query attention]); 0: as many as heads; divides heads
  std::string act = "gelu";      // the MLP: "gelu" (linear, GELU, linear) or "swiglu" (swiglu_mlp, model/swiglu.hpp)
  std::size_t kv_width() const { return kv_heads ? kv_heads : heads; }
  // The MLP's hidden width without the key mlp: 4 x dim, or for act=swiglu LLaMA's 2/3 of that rounded up
  // to a multiple of 256.
  std::size_t default_mlp_width() const { return act == "swiglu" ? (8 * dim / 3 + 255) / 256 * 256 : 4 * dim; }
  std::size_t mlp_width() const { return mlp ? mlp : default_mlp_width(); }
  bool operator==(const gpt_config& o) const {
    return layers == o.layers && dim == o.dim && heads == o.heads && context == o.context &&
           vocabulary == o.vocabulary && bias == o.bias && gelu == o.gelu && norm == o.norm &&
           mlp_width() == o.mlp_width() && init == o.init && tied == o.tied &&
           pos == o.pos && kv_width() == o.kv_width() && act == o.act;
  }
};

// The presets: GPT-2's choices (tanh GELU, LayerNorm, biases, init=gpt2, vocabulary 50257, tied head) in
// gpt2, gpt2-medium, gpt2-tiny; LLaMA's (RMSNorm, rope, SwiGLU, no biases, grouped-query attention,
// vocabulary 32000) in llama, llama-tiny. The -tiny ones are for tests and examples.
std::vector<std::string> gpt_preset_names();

// Whether `text` names a GPT model ("gpt", "gpt:...", a preset), rather than an MLP's widths ("784-512-10").
bool is_gpt_spec(const std::string& text);

// "gpt:KEY=VALUE,..." or "PRESET:KEY=VALUE,...": keys as gpt_config's fields, each optional. Throws
// std::invalid_argument naming the spec, key and value: an unknown or repeated key, a value out of its set,
// heads not dividing dim, kv_heads not dividing heads, pos=rope on an odd head width.
gpt_config parse_gpt_spec(const std::string& text);

// The spec text of `config`: the four base keys, then each key not at a plain gpt spec's default.
// parse_gpt_spec reads it back.
std::string gpt_spec_text(const gpt_config& config);

// One decoder block: block[residual[NORM,attention],residual[NORM,linear,gelu,linear]]; with act=swiglu the
// MLP is residual[NORM,swiglu_mlp].
std::string gpt_block_spec(const gpt_config& config);
// The same for a plain gpt spec's defaults at this width.
std::string gpt_block_spec(std::size_t dim, std::size_t heads);

// Every layer spec of the model: embedding, position (not with pos=rope), `layers` blocks, final norm, LM head
// (tied: "linear:D:V:bias=0:tie=0", Note [tied weights]).
std::vector<std::string> gpt_layer_specs(const gpt_config& config);

}  // namespace ap
