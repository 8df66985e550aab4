// The GPT model spec ("gpt:layers=8,dim=256,heads=8,context=128", or a preset such as "gpt2" with the same
// keys after ':'), parsed and expanded into a Sequential's layer specs: embeddings, `layers` pre-norm decoder
// blocks (one layer each, so one unit of partitioning), final norm, LM head.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ap {

// Note [GPT-2 initialisation]: init=kaiming (plain gpt specs' default) draws Linear weights Kaiming-uniform,
// too large for a GPT-2-shaped model (the residual stream's variance grows with depth). init=gpt2 (presets'
// default) is GPT-2's: weights and embeddings normal(0, 0.02), biases 0, norm weights 1, and the two
// projections into the residual stream normal(0, 0.02 / sqrt(2 layers)). It is written into each layer's
// spec as options (Note [layer options]), so every copy rebuilt from text initialises alike. See docs/models.md.
struct gpt_config {
  std::size_t layers = 8;        // decoder blocks
  std::size_t dim = 256;         // width of the residual stream
  std::size_t heads = 8;         // attention heads; must divide dim
  std::size_t context = 128;     // longest sequence
  std::size_t vocabulary = 256;  // key "vocab"; 256: byte tokens
  bool bias = true;              // biases of every Linear and norm
  std::string gelu = "tanh";     // "tanh" (GPT-2's approximation) or "exact" (erf)
  std::string norm = "layer";    // "layer" (LayerNorm) or "rms" (RMSNorm)
  std::size_t mlp = 0;           // the MLP's hidden width; 0: default_mlp_width()
  std::string init = "kaiming";  // "kaiming" or "gpt2" (Note [GPT-2 initialisation])
  bool tied = false;             // LM head tied to the token embedding (Note [tied weights])
  // LLaMA-style choices:
  std::string pos = "learned";   // "learned" or "rope" (Note [rotary positions])
  std::size_t kv_heads = 0;      // Note [grouped-query attention]; 0: as many as heads
  std::string act = "gelu";      // the MLP: "gelu" or "swiglu"
  std::size_t kv_width() const { return kv_heads ? kv_heads : heads; }
  // Without the key mlp: 4 x dim, or for swiglu LLaMA's 2/3 of that rounded up to a multiple of 256.
  std::size_t default_mlp_width() const { return act == "swiglu" ? (8 * dim / 3 + 255) / 256 * 256 : 4 * dim; }
  std::size_t mlp_width() const { return mlp ? mlp : default_mlp_width(); }
  bool operator==(const gpt_config& o) const {
    return layers == o.layers && dim == o.dim && heads == o.heads && context == o.context &&
           vocabulary == o.vocabulary && bias == o.bias && gelu == o.gelu && norm == o.norm &&
           mlp_width() == o.mlp_width() && init == o.init && tied == o.tied &&
           pos == o.pos && kv_width() == o.kv_width() && act == o.act;
  }
};

// The presets: gpt2, gpt2-medium, gpt2-tiny (GPT-2's choices), llama, llama-tiny (LLaMA's); -tiny for tests.
std::vector<std::string> gpt_preset_names();

// Whether `text` names a GPT model rather than an MLP's widths ("784-512-10").
bool is_gpt_spec(const std::string& text);

// "gpt:KEY=VALUE,..." or "PRESET:KEY=VALUE,...", keys as gpt_config's. Throws std::invalid_argument naming the
// spec, key and value for an unknown or repeated key, a value out of its set, or widths that do not divide.
gpt_config parse_gpt_spec(const std::string& text);

// The spec text of `config`, keys at a plain gpt spec's default left out; parse_gpt_spec reads it back.
std::string gpt_spec_text(const gpt_config& config);

// One decoder block: block[residual[NORM,attention],residual[NORM,MLP]].
std::string gpt_block_spec(const gpt_config& config);
// The same for a plain gpt spec's defaults at this width.
std::string gpt_block_spec(std::size_t dim, std::size_t heads);

// Every layer spec of the model, in order.
std::vector<std::string> gpt_layer_specs(const gpt_config& config);

}  // namespace ap
