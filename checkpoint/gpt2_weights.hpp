// GPT-2's weights in the files its users hold them in, llm.c's checkpoint (gpt2_124M.bin) and Hugging Face's
// model.safetensors: read into the parameters of our GPT (model/gpt_spec.hpp) and written from them.
#pragma once

#include <string>
#include <vector>

#include "checkpoint/named_tensors.hpp"
#include "model/gpt_spec.hpp"
#include "model/sequential.hpp"

namespace ap {

// Note [GPT-2 weight files]: the two formats and how our layers map onto them.
// llm.c's checkpoint (train_gpt2.py's write_model, train_gpt2.c's gpt2_build_from_checkpoint): 256 little-endian
// int32 of header, [0] magic 20240326, [1] version (3: every tensor float32, 5: bfloat16), [2] max context T,
// [3] vocabulary V, [4] layers L, [5] heads, [6] channels C, [7] padded vocabulary Vp (V rounded up to 128 on
// export), the rest 0; then the tensors, each kind for all L layers at once, weights in PyTorch's nn.Linear
// layout (out, in): wte (Vp, C) (its rows past V zero), wpe (T, C), ln1w (L, C), ln1b (L, C), qkvw (L, 3C, C),
// qkvb (L, 3C), attprojw (L, C, C), attprojb (L, C), ln2w, ln2b, fcw (L, 4C, C), fcb (L, 4C), fcprojw (L, C, 4C),
// fcprojb (L, C), lnfw (C), lnfb (C). It holds no LM head: the logits are x wte^T (tied).

// Hugging Face's model.safetensors (transformers' modeling_gpt2.py): wte.weight (V, C), wpe.weight (T, C), per
// block i h.{i}.ln_1.weight/.bias, h.{i}.attn.c_attn.weight (C, 3C)/.bias, h.{i}.attn.c_proj.weight (C, C)/.bias,
// h.{i}.ln_2.*, h.{i}.mlp.c_fc.weight (C, M)/.bias, h.{i}.mlp.c_proj.weight (M, C)/.bias, ln_f.weight/.bias; a
// GPT2LMHeadModel's file writes them under "transformer." and adds lm_head.weight (V, C) only where the head is not
// tied. The projections are Conv1D, weight (in, out): our Linear's layout. h.{i}.attn.bias and .masked_bias
// are mask buffers (skipped). The heads are not in the tensors: the metadata "n_head" (ours), config.json beside
// the file (its "n_head"), or GPT-2's head width of 64 says.

// Ours (gpt_layer_specs): layer 0, the embedding, "0.weight" = wte; layer 1 "1.weight" = wpe; block i is layer
// 2 + i: "0.0.gamma"/"0.0.beta" ln_1, "0.1.qkv.weight"/"bias" c_attn (q, k and v side by side, head h at columns
// h * C / heads of each: GPT-2's split), "0.1.proj.*" attn.c_proj, "1.0.*" ln_2, "1.1.*" c_fc, "1.3.*" mlp.c_proj
// (after the block's index: "2.0.1.qkv.weight"); layer L + 2, the final LayerNorm, ln_f; layer L + 3 the LM head,
// a Linear "linear:C:V" whose weight (C, V) is the head transposed: tied (tied=1, ":bias=0:tie=0"), the copy of
// wte^T kept equal to the embedding's (Note [tied weights] in model/weight_tie.hpp); untied, lm_head.weight^T,
// with a bias GPT-2 lacks (0 on import). Reading sets a tied file's wte on both the embedding and the head (a
// tied model refuses an lm_head that is not wte); writing writes the embedding's wte and, for an untied head that
// is not wte (its weight not wte^T, or its bias not 0), lm_head.weight (and lm_head.bias where it is not 0, which
// GPT2LMHeadModel lacks and reports as unused), which llm.c's format cannot hold: refused.

enum class gpt2_format { llmc, huggingface };
const char* gpt2_format_name(gpt2_format format);  // "llm.c", "Hugging Face safetensors"
// By extension, for writing: ".bin" llm.c, ".safetensors" Hugging Face; std::invalid_argument naming the path
// otherwise.
gpt2_format gpt2_format_for_path(const std::string& path);
// By content, for reading: llm.c's model magic, or a safetensors header. std::runtime_error naming the file and
// what it starts with otherwise (another llm.c file by its magic: a token file, a tokenizer, a state).
gpt2_format detect_gpt2_format(const std::string& path);

// What a file holds, from its header alone.
struct gpt2_file_info {
  gpt2_format format = gpt2_format::llmc;
  // layers, dim, heads, context, vocabulary and mlp from the file; the rest GPT-2's (the gpt2 preset's).
  gpt_config config;
  std::string heads_from;  // "the header", "the metadata", "config.json", "GPT-2's head width of 64"; "" unknown
  // The file says its heads (not GPT-2's head width standing in, nor unknown): a model's must be the same.
  bool heads_stated() const {
    return heads_from == "the header" || heads_from == "the metadata" || heads_from == "config.json";
  }
  bool tied = true;        // no LM head of its own (llm.c's files always)
  int llmc_version = 0;    // llm.c's: 3 or 5
};
// Reads and checks the header (llm.c's header fields and the file's size; a safetensors file's tensor names and
// shapes, every one of GPT-2's present with its shape, none other). Throws std::runtime_error naming the file and
// what is wrong: a wrong magic (what it is, what was expected), an unsupported version, a header field out of
// range, a file shorter or longer than its header says, a tensor missing, of the wrong shape or unexpected.
gpt2_file_info read_gpt2_info(const std::string& path);

// Refuses (std::invalid_argument) a model GPT-2's files cannot describe, naming its spec's keys: norm=rms,
// gelu=exact, bias=0, and any key of another architecture; for llm.c also mlp != 4 x dim. `what` starts the text.
void check_gpt2_architecture(const gpt_config& config, gpt2_format format, const std::string& what);
// Whether the LM head of the model `config` builds is tied to its embedding (tied=1), as llm.c's format needs.
bool has_tied_head(const gpt_config& config);

// The fields in which `file` and `model` differ, "layers 12 vs 2, dim 768 vs 64" (the file's first); empty when
// `model` can take `file`'s weights: the same shapes, or a shorter context (the first rows of wpe). Heads are
// compared only where `heads_known`.
std::string gpt2_shape_mismatch(const gpt_config& file, const gpt_config& model, bool heads_known);

// The whole file read: its info, and its tensors in our names (float32) for the model gpt_layer_specs(info.config)
// builds (its LM head as that model has it).
struct gpt2_weights {
  gpt2_file_info info;
  named_tensors tensors;
};
gpt2_weights read_gpt2_weights(const std::string& path);

// Sets every parameter of `model` (the whole model gpt_layer_specs(config) builds: std::invalid_argument
// otherwise) from the file, a tied head's copy included, after checking it all: the architecture
// (check_gpt2_architecture), the shapes (gpt2_shape_mismatch, named field by field), a tied head given a file
// whose lm_head is not its wte. A refusal changes nothing.
void load_gpt2_weights(const std::string& path, sequential& model, const gpt_config& config);

// Writes the whole `model` (built by gpt_layer_specs(config)) as `format`, atomically (Note [atomic write]):
// llm.c's version 3 (float32), or Hugging Face's safetensors in float32 under GPT2LMHeadModel's names with
// metadata "format" "pt" and the config's n_head, n_layer, n_embd, n_positions, vocab_size. Refuses
// (std::invalid_argument) what the format cannot hold: the architecture, llm.c's untied head (Note [GPT-2
// weight files]).
void write_gpt2_weights(const std::string& path, gpt2_format format, const gpt_config& config, sequential& model);

}  // namespace ap
