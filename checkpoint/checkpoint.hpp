// Checkpoints: parameters, optimizer state and training position in one safetensors file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/optimizer.hpp"
#include "model/sequential.hpp"

namespace ap {

// Note [checkpoint layout]: one safetensors file (Note [safetensors layout]) holding every parameter under
// its global name ("3.weight", independent of the stage split, so a 2-stage run's checkpoint loads into a
// 4-stage run or one process), the optimizer's state under "optimizer/" + key ("optimizer/3.weight.m"), and
// metadata: "format", "model" (layer specs joined by ';'), "optimizer_steps", "optimizer_state" and the
// training_state fields as decimal texts.
constexpr const char* checkpoint_format = "actorpipe-checkpoint-1";
constexpr const char* checkpoint_optimizer_prefix = "optimizer/";  // "optimizer/3.weight.m"

// Note [checkpoint checksums]: the metadata also holds the CRC32C (8 lowercase hex digits) of every tensor's
// bytes under "crc32c:" + name, and of the other metadata entries ("key=value\n" in key order) under
// "metadata_crc32c". Loading checks each tensor it reads and the header, so a corrupted file is refused naming
// the file and tensor before anything changes. A file without "metadata_crc32c" (older) loads unchecked;
// other tools ignore the extra metadata.
constexpr const char* checkpoint_tensor_checksum_prefix = "crc32c:";
constexpr const char* checkpoint_metadata_checksum_key = "metadata_crc32c";

// Where training stood, so a resumed run sees the same batches.
struct training_state {
  std::uint64_t step = 0;
  std::uint64_t epoch = 0;  // the epoch in progress and
  std::uint64_t batch_in_epoch = 0;  // the next batch's index in it
  std::uint64_t data_seed = 0;
  std::string model_spec;  // as the user wrote it; the layer specs are what is checked
};

// Saves the whole model, `opt`'s state (if not null) and `state`, atomically (Note [atomic write]).
// Throws std::invalid_argument for a slice, std::runtime_error on I/O errors.
void save_checkpoint(const std::string& path, sequential& model, optimizer* opt, const training_state& state);

// Loads into the whole model and, if not null, its optimizer (steps() included); returns the training state.
// Everything is checked before anything changes; a refusal throws std::runtime_error naming the file and the
// tensor (checksum, format tag, a different model, a missing or unexpected tensor, a shape mismatch, optimizer
// state of another kind or absent). Missing optimizer state is created first (Note [fresh optimizer state]).
training_state load_checkpoint(const std::string& path, sequential& model, optimizer* opt);

// The same for a slice of the model (layers [first_index(), first_index() + size())): its layers must match
// the checkpoint's at the same global indices; only its own tensors are read.
training_state load_checkpoint_slice(const std::string& path, sequential& slice, optimizer* opt);

// Enough to rebuild the model (sequential::from_layer_specs) before loading; reads the header only.
// loading it. Reads the header only.
struct checkpoint_info {
  std::vector<std::string> layer_specs;
  training_state state;
  long optimizer_steps = 0;
  bool has_optimizer_state = false;
  bool checksums = false;  // false for an older file (Note [checkpoint checksums])
};
// Throws std::runtime_error naming the file for a header that fails its checksum.
checkpoint_info read_checkpoint_info(const std::string& path);

// Note [exported weights]: the parameters alone, converted to `type`, under their global names, with metadata
// "format", "model" and "dtype", for other safetensors readers. Not a checkpoint: training resumes from the
// float32 masters a checkpoint keeps. Written atomically.
constexpr const char* exported_weights_format = "actorpipe-weights-1";
void export_weights(const std::string& path, sequential& model, dtype type);

// Note [fresh optimizer state]: optimizers create their state at their first step(), so a fresh one has
// nothing to load into; loading calls optimizer::init_state first, which creates it as zeros.
// This helper does the same, then zeros all of `opt`'s state; steps() and the parameters are untouched.
void materialize_optimizer_state(optimizer& opt, const std::vector<parameter>& params);

}  // namespace ap
