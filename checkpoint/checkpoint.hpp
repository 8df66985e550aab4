// Checkpoints: a model's parameters, its optimizer's state and where training stood, in one safetensors file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/optimizer.hpp"
#include "model/sequential.hpp"

namespace ap {

// Note [checkpoint layout]: one safetensors file (Note [safetensors layout]) holding
//   - every parameter under its global name ("3.weight"): names do not depend on the stage split, so a
//     checkpoint written by a 2-stage run loads into a 4-stage run, or into one process;
//   - the optimizer's state under "optimizer/" + its key ("optimizer/3.weight.m");
//   - metadata: "format" (checkpoint_format), "model" (the layer specs joined by ';'), "optimizer_steps",
//     "optimizer_state" ("included" or "none"), and the training_state fields as decimal texts.
constexpr const char* checkpoint_format = "actorpipe-checkpoint-1";
constexpr const char* checkpoint_optimizer_prefix = "optimizer/";  // "optimizer/3.weight.m"

// Note [checkpoint checksums]: a checkpoint also carries, in its metadata, the CRC32C (failure/crc32c.hpp, 8 lowercase
// hex digits) of every tensor's bytes under "crc32c:" + its name ("crc32c:3.weight"), and of the rest of the
// metadata under "metadata_crc32c" (every other entry in key order, "key=value\n" each). Loading checks every
// tensor it reads, and reading the header checks the metadata, so a file corrupted on disk or on its way
// (a flipped bit in a weight, in the step, in a checksum) is refused naming the file and the tensor, before
// anything changes, never trained from. A file whose size or header no longer adds up (truncated, an offset or
// a length changed) is refused by the safetensors reader already. A checkpoint written before checksums existed
// (no "metadata_crc32c") still loads, unchecked; other tools ignore the extra metadata.
constexpr const char* checkpoint_tensor_checksum_prefix = "crc32c:";
constexpr const char* checkpoint_metadata_checksum_key = "metadata_crc32c";

// Where training stood: the step and the position in the data order, so a resumed run sees the same batches.
struct training_state {
  std::uint64_t step = 0;            // optimizer steps taken
  std::uint64_t epoch = 0;           // the epoch in progress ...
  std::uint64_t batch_in_epoch = 0;  // ... and the index in it of the next batch to train
  std::uint64_t data_seed = 0;       // the seed of the data order
  std::string model_spec;            // what the user wrote ("784-512-10"); the layer specs are what is checked
};

// Saves the whole model (first_index() 0), the state of `opt` (if not null) and `state`, atomically
// (Note [atomic write]). Throws std::invalid_argument for a slice, std::runtime_error on I/O errors.
void save_checkpoint(const std::string& path, sequential& model, optimizer* opt, const training_state& state);

// Loads into the whole model and, if not null, its optimizer (steps() included); returns the training state.
// Everything is checked before anything is changed; a refusal throws std::runtime_error naming the file and
// the tensor: a tensor or the metadata failing its checksum (Note [checkpoint checksums]), a bad format tag, a
// different model (both layer lists named), a missing tensor, a shape
// mismatch (both shapes named), a tensor that is no parameter of the model, optimizer state that does not
// match `opt`'s (another optimizer kind), a checkpoint saved without optimizer state when `opt` is given.
// The optimizer's missing state is created first (optimizer::init_state): Note [fresh optimizer state].
training_state load_checkpoint(const std::string& path, sequential& model, optimizer* opt);

// The same for a slice of the model (a stage or chunk holding layers [first_index(), first_index() + size())):
// its layers must match those of the checkpoint's model at the same global indices; it loads only its own
// parameters and optimizer state, and ignores the other layers' tensors (they are not even read).
training_state load_checkpoint_slice(const std::string& path, sequential& slice, optimizer* opt);

// What a checkpoint holds besides tensors: enough to rebuild its model (sequential::from_layer_specs) before
// loading it. Reads the header only.
struct checkpoint_info {
  std::vector<std::string> layer_specs;
  training_state state;
  long optimizer_steps = 0;
  bool has_optimizer_state = false;
  bool checksums = false;  // false for a file written before them (Note [checkpoint checksums])
};
// Throws std::runtime_error naming the file for a header that fails its checksum.
checkpoint_info read_checkpoint_info(const std::string& path);

// Note [exported weights]: the model's parameters alone, converted to `type` (BF16 halves the file), under
// their global names, with metadata "format" (exported_weights_format), "model" (layer specs joined by ';') and
// "dtype" (dtype_name). For other tools (any safetensors reader): not a checkpoint, since training resumes
// from float32 masters, which a checkpoint keeps whatever the compute dtype. Written atomically.
constexpr const char* exported_weights_format = "actorpipe-weights-1";
void export_weights(const std::string& path, sequential& model, dtype type);

// Note [fresh optimizer state]: optimizers create their state lazily, at their first step(), so a fresh
// optimizer has nothing to load a checkpoint into. Loading a checkpoint saved after at least one step
// calls optimizer::init_state first, which creates the missing state as zeros.
// This older helper does the same and then resets all of `opt`'s state to zeros; steps() and the
// parameters are untouched.
void materialize_optimizer_state(optimizer& opt, const std::vector<parameter>& params);

}  // namespace ap
