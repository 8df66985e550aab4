// The safetensors format (Hugging Face), F32 and BF16 tensors.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.hpp"

namespace ap {

// Note [safetensors layout]: an 8-byte little-endian u64 N, N bytes of JSON header padded with spaces to a
// multiple of 8:
//   {"__metadata__": {"k": "v"}, "NAME": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...}
// then the raw little-endian data. Offsets are relative to the data start; the tensors tile the data exactly.

struct safetensors_file {
  std::map<std::string, tensor> tensors;
  std::map<std::string, std::string> metadata;  // the header's "__metadata__" (string to string)
};

// Tensors to write, in file order; the pointers are read only during the call.
using tensor_refs = std::vector<std::pair<std::string, const tensor*>>;

// Note [atomic write]: the file is written to `path` + ".tmp-<pid>", fsync'ed and renamed over `path`, so
// `path` holds either its old or its new contents, never half a file. On an error the temporary is removed;
// a kill cannot clean up, so each write first removes temporaries whose pid no longer exists. Pids are
// per host: two hosts must not write checkpoints into one folder.
// Throws std::runtime_error naming the file: a duplicate or empty name, "__metadata__", a metadata text that
// is not UTF-8, or an I/O failure.
void write_safetensors(const std::string& path, const tensor_refs& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Removes every `path`.tmp-<pid> whose process is gone (ESRCH), ignoring files it cannot remove; returns the
// removed paths (Note [atomic write]).
std::vector<std::string> remove_stale_temporaries(const std::string& path);
void write_safetensors(const std::string& path, const std::map<std::string, const tensor*>& tensors,
                       const std::map<std::string, std::string>& metadata = {});
void write_safetensors(const std::string& path, const std::map<std::string, tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Reads and validates the whole file; throws std::runtime_error naming the file and what is wrong (size,
// header JSON or entry, a dtype other than F32 or BF16, byte ranges that do not fit the shape or do not tile
// the data section). With `wanted`, the whole header is validated but only accepted tensors are read (a stage
// reads its own layers); `wanted` is asked once per name.
safetensors_file read_safetensors(const std::string& path,
                                  const std::function<bool(const std::string&)>& wanted = {});

// The header alone, validated as read_safetensors does.
struct safetensors_entry {
  dtype type = dtype::float32;
  shape_t shape;
};
struct safetensors_header {
  std::map<std::string, safetensors_entry> tensors;
  std::map<std::string, std::string> metadata;
};
safetensors_header read_safetensors_header(const std::string& path);

// Note [atomic write] for a file of another format: `contents` appends bytes through the writer, then the
// file replaces `path`. Errors (std::runtime_error) name `kind` and the path; a throw leaves `path` untouched.
using byte_writer = std::function<void(const void* data, std::size_t size)>;
void write_file_atomically(const std::string& path, const std::string& kind,
                           const std::function<void(const byte_writer&)>& contents);

}  // namespace ap
