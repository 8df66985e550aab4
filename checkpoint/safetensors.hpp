// The safetensors file format (Hugging Face), F32 and BF16 tensors: read and written so that common tools read ours.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.hpp"

namespace ap {

// Note [safetensors layout]: an 8-byte little-endian u64 N; N bytes of JSON header, padded with spaces so
// the data starts at a multiple of 8:
//   {"__metadata__": {"k": "v"}, "NAME": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...}
// then the raw little-endian data. Offsets are relative to the data start; the tensors tile the data
// section exactly: contiguous, no gap, no overlap, ending at the end of the file.

struct safetensors_file {
  std::map<std::string, tensor> tensors;        // by name
  std::map<std::string, std::string> metadata;  // the header's "__metadata__" (string to string)
};

// Tensors to write, in file order. The pointers are only read during the call.
using tensor_refs = std::vector<std::pair<std::string, const tensor*>>;

// Note [atomic write]: the file is written to `path` + ".tmp-<pid>", flushed and fsync'ed, then renamed over
// `path`. A crash while writing leaves at worst a stale .tmp file, never a half-written file under `path`:
// `path` holds either its old contents or the new ones. On an error the temporary file is removed. A kill
// (SIGKILL, power loss) cannot run that clean-up, so each write first removes the stale temporaries of `path`
// that such kills left: every `path`.tmp-<pid> whose process is gone (remove_stale_temporaries). A file whose
// pid is alive is kept: it may be another process writing the same path right now (or, rarely, a reused pid;
// it is removed by a later write once that process ends). On a folder shared by several hosts, a pid is only
// meaningful on its own host: do not let two hosts write checkpoints into one folder.
// Throws std::runtime_error naming the file: a duplicate or empty name, the reserved name "__metadata__",
// a metadata text that is not UTF-8, or any I/O failure.
void write_safetensors(const std::string& path, const tensor_refs& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Removes every `path`.tmp-<pid> file (pid all digits) whose process does not exist
// (kill(pid, 0) fails with ESRCH), ignoring files it cannot remove; returns the removed paths (Note [atomic write]).
std::vector<std::string> remove_stale_temporaries(const std::string& path);
void write_safetensors(const std::string& path, const std::map<std::string, const tensor*>& tensors,
                       const std::map<std::string, std::string>& metadata = {});
void write_safetensors(const std::string& path, const std::map<std::string, tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Reads and validates the whole file; throws std::runtime_error naming the file and what is wrong: missing
// or unreadable file, fewer than 8 bytes, a header length beyond the file, bad JSON or a bad header entry,
// a dtype other than F32 or BF16, a byte range that does not hold element size * product(shape) bytes, ranges out of the data
// section, overlapping or leaving gaps, a data section of another size than the tensors cover.
// With `wanted` set, the header is still validated whole but only the tensors it accepts are read (a
// pipeline stage reads its own layers only); `wanted` is asked once per tensor name in the file.
safetensors_file read_safetensors(const std::string& path,
                                  const std::function<bool(const std::string&)>& wanted = {});

// The header alone, validated as read_safetensors validates it: each tensor's dtype and shape, and the metadata.
struct safetensors_entry {
  dtype type = dtype::float32;
  shape_t shape;
};
struct safetensors_header {
  std::map<std::string, safetensors_entry> tensors;
  std::map<std::string, std::string> metadata;
};
safetensors_header read_safetensors_header(const std::string& path);

// Note [atomic write] for a file of another format: `contents` is called once with a writer that appends bytes
// to the temporary file, which then replaces `path`. Errors (std::runtime_error) name `kind` and the path
// ("llm.c checkpoint out.bin: cannot write ..."); one thrown by `contents` leaves `path` untouched.
using byte_writer = std::function<void(const void* data, std::size_t size)>;
void write_file_atomically(const std::string& path, const std::string& kind,
                           const std::function<void(const byte_writer&)>& contents);

}  // namespace ap
