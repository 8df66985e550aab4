// GPT-2's weights in llm.c's checkpoint (gpt2_124M.bin) and Hugging Face's model.safetensors: read into the
// parameters of our GPT (model/gpt_spec.hpp) and written from them.
#pragma once

#include <string>
#include <vector>

#include "checkpoint/named_tensors.hpp"
#include "model/gpt_spec.hpp"
#include "model/sequential.hpp"

namespace ap {

// Note [GPT-2 weight files]: the two formats and how our layers map onto them.
// llm.c (train_gpt2.c's gpt2_build_from_checkpoint): 256 little-endian int32 of header ([0] magic 20240326,
// [1] version 3: float32, 5: bfloat16, [2] context T, [3] vocabulary V, [4] layers L, [5] heads, [6] channels C,
// [7] padded vocabulary Vp), then each tensor kind for all L layers at once, weights (out, in): wte (Vp, C),
// wpe (T, C), ln1w, ln1b (L, C), qkvw (L, 3C, C), qkvb (L, 3C), attprojw (L, C, C), attprojb, ln2w, ln2b,
// fcw (L, 4C, C), fcb (L, 4C), fcprojw (L, C, 4C), fcprojb, lnfw (C), lnfb (C). No LM head: it is tied to wte.

// Hugging Face (modeling_gpt2.py): wte.weight, wpe.weight, h.{i}.ln_1.*, h.{i}.attn.c_attn.* (C, 3C),
// h.{i}.attn.c_proj.*, h.{i}.ln_2.*, h.{i}.mlp.c_fc.* (C, M), h.{i}.mlp.c_proj.* (M, C), ln_f.*; GPT2LMHeadModel
// prefixes "transformer." and adds lm_head.weight (V, C) only when untied. Conv1D weights are (in, out), our
// Linear's layout; attn.bias/.masked_bias are mask buffers (skipped). Heads come from metadata "n_head",
// config.json beside the file, or GPT-2's head width of 64.

// Ours (gpt_layer_specs): layer 0 "0.weight" = wte, layer 1 "1.weight" = wpe; block i is layer 2 + i with
// "0.0.*" ln_1, "0.1.qkv.*" c_attn (GPT-2's q, k, v split), "0.1.proj.*" attn.c_proj, "1.0.*" ln_2, "1.1.*" c_fc,
// "1.3.*" mlp.c_proj; layer L + 2 ln_f; layer L + 3 the LM head, a Linear (C, V) holding the head transposed:
// tied, a copy of wte^T (Note [tied weights]); untied, lm_head.weight^T with a bias (0 on import), which
// llm.c's format cannot hold.

enum class gpt2_format { llmc, huggingface };
const char* gpt2_format_name(gpt2_format format);  // "llm.c", "Hugging Face safetensors"
// By extension, for writing: ".bin" llm.c, ".safetensors" Hugging Face; std::invalid_argument naming the path
// otherwise.
gpt2_format gpt2_format_for_path(const std::string& path);
// By content, for reading: llm.c's model magic or a safetensors header; else std::runtime_error naming the
// file and what it starts with (another llm.c file by its magic).
gpt2_format detect_gpt2_format(const std::string& path);

struct gpt2_file_info {
  gpt2_format format = gpt2_format::llmc;
  // Shapes from the file; the rest GPT-2's (the gpt2 preset's).
  gpt_config config;
  std::string heads_from;  // "the header", "the metadata", "config.json", "GPT-2's head width of 64"; "" unknown
  // The file states its heads: a model's must be the same.
  bool heads_stated() const {
    return heads_from == "the header" || heads_from == "the metadata" || heads_from == "config.json";
  }
  bool tied = true;        // no LM head of its own (llm.c's files always)
  int llmc_version = 0;
};
// Reads and checks the header (llm.c's fields and the file's size; a safetensors file's tensors, every one of
// GPT-2's present with its shape, none other). Throws std::runtime_error naming the file and what is wrong.
gpt2_file_info read_gpt2_info(const std::string& path);

// Refuses (std::invalid_argument, naming the spec keys) a model GPT-2's files cannot describe: norm=rms,
// gelu=exact, bias=0, another architecture's keys; for llm.c also mlp != 4 x dim. `what` starts the text.
void check_gpt2_architecture(const gpt_config& config, gpt2_format format, const std::string& what);
// Whether `config`'s LM head is tied to its embedding (tied=1), as llm.c's format needs.
bool has_tied_head(const gpt_config& config);

// The fields in which `file` and `model` differ, "layers 12 vs 2, dim 768 vs 64"; empty when `model` can take
// the weights (same shapes, or a shorter context). Heads are compared only where `heads_known`.
std::string gpt2_shape_mismatch(const gpt_config& file, const gpt_config& model, bool heads_known);

// The whole file: its info, and its tensors in our names (float32) for gpt_layer_specs(info.config).
struct gpt2_weights {
  gpt2_file_info info;
  named_tensors tensors;
};
gpt2_weights read_gpt2_weights(const std::string& path);

// Sets every parameter of `model` (as gpt_layer_specs(config) builds it, else std::invalid_argument) from the
// file, after checking architecture, shapes and a tied head's lm_head. A refusal changes nothing.
void load_gpt2_weights(const std::string& path, sequential& model, const gpt_config& config);

// Writes the whole `model` as `format`, atomically (Note [atomic write]): llm.c version 3 (float32), or
// safetensors in float32 under GPT2LMHeadModel's names with the config in its metadata. Refuses
// (std::invalid_argument) what the format cannot hold (Note [GPT-2 weight files]).
void write_gpt2_weights(const std::string& path, gpt2_format format, const gpt_config& config, sequential& model);

}  // namespace ap
