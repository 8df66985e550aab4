#include "checkpoint/safetensors.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <stdexcept>
#include <system_error>
#include <tuple>

#include <nlohmann/json.hpp>

// The data section is the tensors' memory as is: that is little-endian only on a little-endian host.
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.cpp writes tensor memory as little-endian data: port it before using a big-endian host"
#endif

namespace ap {

namespace {

constexpr std::size_t header_alignment = 8;  // data starts at a multiple of 8 (Note [safetensors layout])
constexpr const char* metadata_key = "__metadata__";

[[noreturn]] void fail(const std::string& path, const std::string& what, const std::string& kind = "safetensors file") {
  throw std::runtime_error(kind + " " + path + ": " + what);
}

std::string errno_text() { return std::strerror(errno); }

// ---- writing

// The temporary file, removed unless committed; stale ones of killed writers go first (Note [atomic write]).
class temporary_file {
 public:
  explicit temporary_file(const std::string& final_path, std::string kind = "safetensors file")
      : final_(final_path), path_(final_path + ".tmp-" + std::to_string(::getpid())), kind_(std::move(kind)) {
    remove_stale_temporaries(final_);
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail(final_, "cannot create temporary file " + path_ + ": " + errno_text(), kind_);
  }
  temporary_file(const temporary_file&) = delete;
  temporary_file& operator=(const temporary_file&) = delete;
  ~temporary_file() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }

  void write(const void* data, std::size_t size) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t n = ::write(fd_, p, size);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail(final_, "cannot write temporary file " + path_ + ": " + errno_text(), kind_);
      p += n;
      size -= std::size_t(n);
    }
  }

  // fsync, close, rename over the final name, then fsync the folder so the rename itself is durable.
  void commit() {
    if (::fsync(fd_) != 0) fail(final_, "cannot fsync temporary file " + path_ + ": " + errno_text(), kind_);
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail(final_, "cannot close temporary file " + path_ + ": " + errno_text(), kind_);
    std::error_code ec;
    std::filesystem::rename(path_, final_, ec);
    if (ec) fail(final_, "cannot rename " + path_ + " over it: " + ec.message(), kind_);
    committed_ = true;
    // Best effort: some file systems refuse to open or fsync a folder; the data itself is already safe.
    std::filesystem::path folder = std::filesystem::path(final_).parent_path();
    if (folder.empty()) folder = ".";
    const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
      ::fsync(dir);
      ::close(dir);
    }
  }

 private:
  std::string final_, path_, kind_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

std::vector<std::string> remove_stale_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path final_path(path);
  fs::path folder = final_path.parent_path();
  if (folder.empty()) folder = ".";
  const std::string prefix = final_path.filename().string() + ".tmp-";
  std::vector<std::string> removed;
  std::error_code ec;
  fs::directory_iterator it(folder, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    const auto pid = static_cast<pid_t>(std::stol(digits));
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to signal: alive too)
    std::error_code gone;
    if (fs::remove(it->path(), gone)) removed.push_back(it->path().string());
  }
  return removed;
}

namespace {

std::string u64_little_endian(std::uint64_t n) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = char((n >> (8 * i)) & 0xff);
  return bytes;
}

std::string header_text(const std::string& path, const tensor_refs& tensors,
                        const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[metadata_key] = metadata;
  std::set<std::string> seen;
  std::uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty()) fail(path, "a tensor has an empty name");
    if (name == metadata_key) fail(path, "a tensor may not be named __metadata__ (reserved for the metadata)");
    if (!seen.insert(name).second) fail(path, "tensor " + name + " given twice");
    if (!t) fail(path, "tensor " + name + " is a null pointer");
    const std::uint64_t bytes = t->byte_size();
    header[name] = {{"dtype", safetensors_dtype_name(t->type())},
                    {"shape", shape_of(*t)},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // a name or metadata text that is not valid UTF-8
    fail(path, std::string("cannot write the header: ") + e.what());
  }
  text.append((header_alignment - (8 + text.size()) % header_alignment) % header_alignment, ' ');
  return text;
}

// ---- reading

struct entry {
  std::string name;
  dtype type = dtype::float32;
  shape_t shape;
  std::uint64_t begin = 0, end = 0;
};

std::uint64_t read_u64_little_endian(const unsigned char* bytes) {
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  return n;
}

std::string range_text(const entry& e) {
  return "[" + std::to_string(e.begin) + ", " + std::to_string(e.end) + ")";
}

entry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& j) {
  const std::string where = "tensor " + name + ": ";
  if (!j.is_object()) fail(path, where + "header entry is not an object: " + j.dump());
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!j.contains(field)) fail(path, where + "header entry has no \"" + field + "\"");
  const nlohmann::json& type = j["dtype"];
  if (!type.is_string()) fail(path, where + "dtype is not a string: " + type.dump());
  const std::string type_name = type.get<std::string>();
  // Only safetensors' own spellings: "bf16" is not a dtype of the format.
  const auto parsed = parse_dtype(type_name);
  if (!parsed || safetensors_dtype_name(*parsed) != type_name)
    fail(path, where + "unsupported dtype " + type_name + " (F32 and BF16 are supported)");

  entry e;
  e.name = name;
  e.type = *parsed;
  const std::uint64_t element_bytes = dtype_size(e.type);
  const nlohmann::json& shape = j["shape"];
  if (!shape.is_array()) fail(path, where + "shape is not an array: " + shape.dump());
  std::uint64_t elements = 1;
  for (const nlohmann::json& d : shape) {
    if (!d.is_number_unsigned())
      fail(path, where + "shape " + shape.dump() + " has a non-integer or negative size");
    const std::uint64_t n = d.get<std::uint64_t>();
    if (n != 0 && elements > std::numeric_limits<std::uint64_t>::max() / element_bytes / n)
      fail(path, where + "shape " + shape.dump() + " is too large");
    elements *= n;
    e.shape.push_back(std::size_t(n));
  }

  const nlohmann::json& offsets = j["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    fail(path, where + "data_offsets " + offsets.dump() + " is not [begin, end] with non-negative integers");
  e.begin = offsets[0].get<std::uint64_t>();
  e.end = offsets[1].get<std::uint64_t>();
  if (e.end < e.begin) fail(path, where + "data_offsets " + range_text(e) + " end before they begin");
  if (e.end - e.begin != element_bytes * elements)
    fail(path, where + "shape " + shape_string(e.shape) + " needs " + std::to_string(element_bytes * elements) +
                   " bytes of " + type_name + " but data_offsets " + range_text(e) + " hold " + std::to_string(e.end - e.begin));
  return e;
}

// Parses the header, refusing duplicate top-level names (nlohmann would keep the last one silently).
nlohmann::json parse_header(const std::string& path, const std::string& text) {
  std::string duplicate;
  std::set<std::string> names;
  const nlohmann::json::parser_callback_t on_event = [&](int depth, nlohmann::json::parse_event_t event,
                                                         nlohmann::json& parsed) {
    if (depth == 1 && event == nlohmann::json::parse_event_t::key && parsed.is_string() &&
        !names.insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, on_event);
  } catch (const nlohmann::json::exception& e) {
    fail(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) fail(path, "header is not a JSON object: " + header.dump().substr(0, 80));
  if (!duplicate.empty()) fail(path, "header names " + duplicate + " twice");
  return header;
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const nlohmann::json& j) {
  if (!j.is_object()) fail(path, "__metadata__ is not an object: " + j.dump());
  std::map<std::string, std::string> metadata;
  for (const auto& [key, value] : j.items()) {
    if (!value.is_string()) fail(path, "__metadata__ value of " + key + " is not a string: " + value.dump());
    metadata[key] = value.get<std::string>();
  }
  return metadata;
}

// The ranges must tile [0, data_size): sorted by begin, each starting where the previous ended.
void check_ranges(const std::string& path, std::vector<entry>& entries, std::uint64_t data_size) {
  for (const entry& e : entries)
    if (e.end > data_size)
      fail(path, "tensor " + e.name + ": data_offsets " + range_text(e) + " out of range: the data section holds " +
                     std::to_string(data_size) + " bytes");
  std::sort(entries.begin(), entries.end(),
            [](const entry& a, const entry& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  std::uint64_t covered = 0;
  const entry* previous = nullptr;
  for (const entry& e : entries) {
    if (e.begin < covered)
      fail(path, "tensor " + e.name + ": data_offsets " + range_text(e) + " overlap tensor " + previous->name + " " +
                     range_text(*previous));
    if (e.begin > covered)
      fail(path, "tensor " + e.name + ": data_offsets " + range_text(e) + " leave a gap: bytes [" +
                     std::to_string(covered) + ", " + std::to_string(e.begin) + ") belong to no tensor");
    covered = e.end;
    if (e.end > e.begin) previous = &e;
  }
  if (covered != data_size)
    fail(path, "data section size mismatch: the file holds " + std::to_string(data_size) +
                   " bytes of data but the tensors cover " + std::to_string(covered));
}

}  // namespace

void write_safetensors(const std::string& path, const tensor_refs& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string header = header_text(path, tensors, metadata);
  temporary_file file(path);
  file.write(u64_little_endian(header.size()).data(), 8);
  file.write(header.data(), header.size());
  for (const auto& [name, t] : tensors) {
    // Row-major, safetensors' (C) order (Note [tensor]).
    file.write(t->bytes(), t->byte_size());
  }
  file.commit();
}

void write_safetensors(const std::string& path, const std::map<std::string, const tensor*>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  write_safetensors(path, tensor_refs(tensors.begin(), tensors.end()), metadata);
}

void write_safetensors(const std::string& path, const std::map<std::string, tensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  tensor_refs list;
  for (const auto& [name, t] : tensors) list.emplace_back(name, &t);
  write_safetensors(path, list, metadata);
}

namespace {

// The file opened and its header validated whole.
struct opened_file {
  std::ifstream in;
  std::uint64_t data_start = 0;
  std::vector<entry> entries;
  std::map<std::string, std::string> metadata;
};

void open_and_validate(const std::string& path, opened_file& f) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) fail(path, "no such file");
  if (!std::filesystem::is_regular_file(status)) fail(path, "not a regular file");
  const std::uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec) fail(path, "cannot read its size: " + ec.message());
  f.in.open(path, std::ios::binary);
  if (!f.in) fail(path, "cannot open: " + errno_text());
  if (file_size < 8)
    fail(path, "file is " + std::to_string(file_size) + " bytes, shorter than the 8-byte header length");

  unsigned char length_bytes[8];
  if (!f.in.read(reinterpret_cast<char*>(length_bytes), 8)) fail(path, "cannot read the header length");
  const std::uint64_t header_size = read_u64_little_endian(length_bytes);
  if (header_size > file_size - 8)
    fail(path, "header length " + std::to_string(header_size) + " goes beyond the end of the file (" +
                   std::to_string(file_size) + " bytes, so at most " + std::to_string(file_size - 8) + ")");
  std::string text(header_size, '\0');
  if (!f.in.read(text.data(), std::streamsize(header_size))) fail(path, "cannot read the header");

  const nlohmann::json header = parse_header(path, text);
  for (const auto& [name, value] : header.items()) {
    if (name == metadata_key)
      f.metadata = parse_metadata(path, value);
    else
      f.entries.push_back(parse_entry(path, name, value));
  }
  f.data_start = 8 + header_size;
  check_ranges(path, f.entries, file_size - f.data_start);
}

}  // namespace

safetensors_file read_safetensors(const std::string& path, const std::function<bool(const std::string&)>& wanted) {
  opened_file f;
  open_and_validate(path, f);
  safetensors_file result;
  result.metadata = std::move(f.metadata);
  for (const entry& e : f.entries) {
    if (wanted && !wanted(e.name)) continue;
    tensor t = tensor::from_shape(e.shape, e.type);
    const std::uint64_t bytes = e.end - e.begin;
    f.in.seekg(std::streamoff(f.data_start + e.begin));
    if (bytes > 0 && !f.in.read(reinterpret_cast<char*>(t.bytes()), std::streamsize(bytes)))
      fail(path, "tensor " + e.name + ": cannot read its " + std::to_string(bytes) + " bytes (file truncated?)");
    result.tensors.emplace(e.name, std::move(t));
  }
  return result;
}

safetensors_header read_safetensors_header(const std::string& path) {
  opened_file f;
  open_and_validate(path, f);
  safetensors_header result;
  result.metadata = std::move(f.metadata);
  for (const entry& e : f.entries) result.tensors.emplace(e.name, safetensors_entry{e.type, e.shape});
  return result;
}

void write_file_atomically(const std::string& path, const std::string& kind,
                           const std::function<void(const byte_writer&)>& contents) {
  temporary_file file(path, kind);
  contents([&](const void* data, std::size_t size) { file.write(data, size); });
  file.commit();
}

}  // namespace ap
