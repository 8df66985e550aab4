// The GPT model spec: "gpt:layers=8,dim=256,heads=8,context=128" (byte vocabulary of 256) taken apart by a
// pure parser, and expanded into the layer specs of a Sequential: token embedding, positional embedding,
// `layers` pre-LN decoder blocks (each one block, so one unit of partitioning), final LayerNorm, LM head.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ap {

struct gpt_config {
  std::size_t layers = 8;       // decoder blocks
  std::size_t dim = 256;        // width of the residual stream
  std::size_t heads = 8;        // attention heads; must divide dim
  std::size_t context = 128;    // longest sequence (positions of the positional embedding)
  std::size_t vocabulary = 256; // byte tokens
  bool operator==(const gpt_config& o) const {
    return layers == o.layers && dim == o.dim && heads == o.heads && context == o.context && vocabulary == o.vocabulary;
  }
};

// Whether `text` names a GPT model ("gpt" or "gpt:..."), rather than the widths of an MLP ("784-512-10").
bool is_gpt_spec(const std::string& text);

// "gpt:KEY=VALUE,..." with keys layers, dim, heads, context (each optional: defaults above). Throws
// std::invalid_argument naming the spec and the key: an unknown or repeated key, a value that is not a
// positive integer, heads not dividing dim.
gpt_config parse_gpt_spec(const std::string& text);

// The spec text of `config` with every key: "gpt:layers=8,dim=256,heads=8,context=128".
std::string gpt_spec_text(const gpt_config& config);

// One decoder block: block[residual[layernorm,attention],residual[layernorm,linear,gelu,linear]].
std::string gpt_block_spec(std::size_t dim, std::size_t heads);

// Every layer spec of the model, in order: embedding, position, `layers` blocks, layernorm, linear (LM head).
std::vector<std::string> gpt_layer_specs(const gpt_config& config);

}  // namespace ap
