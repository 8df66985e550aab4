// The GPT model spec: "gpt:layers=8,dim=256,heads=8,context=128" (byte vocabulary of 256 by default), or a preset
// of GPT-2's shapes ("gpt2", "gpt2-medium", "gpt2-tiny", each taking the same keys after ':' to override its
// values), taken apart by a pure parser, and expanded into the layer specs of a Sequential: token embedding,
// positional embedding, `layers` pre-norm decoder blocks (each one block, so one unit of partitioning), final
// norm, LM head.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ap {

// Note [GPT-2 initialisation]: with init=kaiming (plain gpt specs' default) Linear weights start Kaiming-uniform,
// std sqrt(2 / in), and the embeddings uniform with std 0.02. For a GPT-2-shaped model (12 layers, dim 768) that
// is 0.05 in every projection and the LM head, and the residual stream's variance grows with each block's two
// additions: AdamW 3e-4 without warmup saw the loss rise over the first steps before falling. init=gpt2 (the
// presets' default) is GPT-2's: every Linear weight and both embeddings normal(0, 0.02), biases 0, norm weights 1,
// and the two projections that add into the residual stream (attention's output projection and the MLP's second
// Linear) normal(0, 0.02 / sqrt(2 layers)), so the stream's variance stays put with depth. The choice is written
// into each layer's spec text as options ("linear:3072:768:std=0.004082483", Note [layer options] in
// model/layer_spec.hpp): every copy of a layer rebuilt from its text (a pipeline's stage, a tensor-parallel rank's
// shard, which draws the whole Linear and keeps its slice) initialises as one process does, layer for layer from
// the same seeds (sequential::initialize). docs/models.md gives the losses of both on a small GPT-2-shaped model.
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
  // The MLP's hidden width without the key mlp: 4 x dim, or for act=swiglu LLaMA's, 2/3 of that rounded up to a
  // multiple of 256 (dim 4096: 11008).
  std::size_t default_mlp_width() const { return act == "swiglu" ? (8 * dim / 3 + 255) / 256 * 256 : 4 * dim; }
  std::size_t mlp_width() const { return mlp ? mlp : default_mlp_width(); }
  bool operator==(const gpt_config& o) const {
    return layers == o.layers && dim == o.dim && heads == o.heads && context == o.context &&
           vocabulary == o.vocabulary && bias == o.bias && gelu == o.gelu && norm == o.norm &&
           mlp_width() == o.mlp_width() && init == o.init && tied == o.tied &&
           pos == o.pos && kv_width() == o.kv_width() && act == o.act;
  }
};

// The presets, with GPT-2's choices (tanh GELU, LayerNorm with eps 1e-5, biases on, init=gpt2, vocabulary 50257,
// the LM head tied to the token embedding):
//   gpt2         12 layers, dim 768, 12 heads, context 1024
//   gpt2-medium  24 layers, dim 1024, 16 heads, context 1024
//   gpt2-tiny     2 layers, dim 64, 4 heads, context 64 (for tests and examples)
// and LLaMA's choices (RMSNorm, rotary positions, SwiGLU, no biases, grouped-query attention, init=gpt2,
// vocabulary 32000):
//   llama        12 layers, dim 768, 12 heads, 4 kv heads, context 1024, mlp 2048
//   llama-tiny    2 layers, dim 64, 4 heads, 2 kv heads, context 64, mlp 176 (for tests and examples)
std::vector<std::string> gpt_preset_names();

// Whether `text` names a GPT model ("gpt", "gpt:...", a preset or a preset with ":..."), rather than the widths of
// an MLP ("784-512-10").
bool is_gpt_spec(const std::string& text);

// "gpt:KEY=VALUE,..." or "PRESET:KEY=VALUE,..." with keys layers, dim, heads, context, vocab, mlp, kv_heads
// (positive integers), bias and tied (0 or 1), gelu (tanh, exact), norm (layer, rms), init (kaiming, gpt2), pos (learned,
// rope), act (gelu, swiglu), each optional: defaults above, or the preset's. Throws std::invalid_argument naming
// the spec, the key and the value: an unknown or repeated key, a value out of its set, heads not dividing dim,
// kv_heads not dividing heads, pos=rope on an odd head width.
gpt_config parse_gpt_spec(const std::string& text);

// The spec text of `config`: "gpt:layers=8,dim=256,heads=8,context=128", then each other key whose value is not a
// plain gpt spec's default (",vocab=50257,init=gpt2"). parse_gpt_spec reads it back to `config`.
std::string gpt_spec_text(const gpt_config& config);

// One decoder block: block[residual[NORM,attention],residual[NORM,linear,gelu,linear]] with `config`'s widths,
// norm, GELU, biases and initialisation; with act=swiglu the MLP is residual[NORM,swiglu_mlp], and attention takes
// kv_heads and rope as options.
std::string gpt_block_spec(const gpt_config& config);
// The same for a plain gpt spec's defaults at this width: block[residual[layernorm,attention],residual[...]].
std::string gpt_block_spec(std::size_t dim, std::size_t heads);

// Every layer spec of the model, in order: embedding (vocabulary rows), position (not with pos=rope), `layers`
// blocks, the final norm, linear (LM head, vocabulary outputs; tied: "linear:D:V:bias=0:tie=0", Note [tied weights]).
std::vector<std::string> gpt_layer_specs(const gpt_config& config);

}  // namespace ap
