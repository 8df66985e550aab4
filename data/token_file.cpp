#include "data/token_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

namespace ap {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error("token file " + path + ": " + what);
}

struct fd_closer {
  int fd;
  ~fd_closer() {
    if (fd >= 0) ::close(fd);
  }
};

struct mapping {
  void* base = nullptr;
  std::size_t length = 0;
  ~mapping() {
    if (base) ::munmap(base, length);
  }
};

// Reads exactly n bytes at `offset`; false at the end of the file.
bool pread_all(int fd, void* dst, std::size_t n, std::size_t offset, const std::string& path) {
  auto* out = static_cast<std::uint8_t*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd, out, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      fail(path, std::string("read error at byte ") + std::to_string(offset) + ": " + std::strerror(errno));
    }
    if (r == 0) return false;
    out += r, n -= static_cast<std::size_t>(r), offset += static_cast<std::size_t>(r);
  }
  return true;
}

// Every id below vocab_size, read through pread in chunks: the mapping's pages are never touched here.
template <typename T>
void check_ids(int fd, std::size_t offset, std::size_t count, std::size_t vocab_size, const std::string& path) {
  constexpr std::size_t chunk = std::size_t{1} << 18;
  std::vector<T> buffer(std::min(chunk, count));
  for (std::size_t first = 0; first < count; first += chunk) {
    const std::size_t n = std::min(chunk, count - first);
    if (!pread_all(fd, buffer.data(), n * sizeof(T), offset + first * sizeof(T), path))
      fail(path, "truncated while reading token " + std::to_string(first));
    for (std::size_t i = 0; i < n; ++i)
      if (buffer[i] >= vocab_size) {
        const std::size_t index = first + i;
        fail(path, "token " + std::to_string(index) + " (byte offset " + std::to_string(offset + index * sizeof(T)) +
                       ") is " + std::to_string(buffer[i]) + ", not below the vocabulary size " +
                       std::to_string(vocab_size));
      }
  }
}

}  // namespace

bool has_llmc_magic(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  fd_closer closer{fd};
  std::int32_t magic = 0;
  return ::pread(fd, &magic, 4, 0) == 4 && magic == llmc_magic;
}

token_span open_token_file(const std::string& path, token_file_kind kind, int token_bytes, std::size_t vocab_size) {
  if (kind == token_file_kind::llmc) token_bytes = 2;
  if (token_bytes != 2 && token_bytes != 4)
    throw std::invalid_argument("token file " + path + ": token_bytes must be 2 or 4, got " +
                                std::to_string(token_bytes));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  fd_closer closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(path, std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
  const std::size_t length = static_cast<std::size_t>(st.st_size);
  if (length == 0) fail(path, "empty (0 bytes)");

  std::size_t offset = 0, count = 0;
  if (kind == token_file_kind::llmc) {
    std::int32_t header[256];
    if (length < llmc_header_bytes || !pread_all(fd, header, llmc_header_bytes, 0, path))
      fail(path, "truncated: " + std::to_string(length) + " bytes, shorter than llm.c's header of " +
                     std::to_string(llmc_header_bytes));
    if (header[0] != llmc_magic)
      fail(path, "bad magic " + std::to_string(header[0]) + " at byte 0 (llm.c's is " + std::to_string(llmc_magic) + ")");
    if (header[1] != 1)
      fail(path, "unsupported version " + std::to_string(header[1]) +
                     " at byte 4 (version 1, uint16 tokens, is the one read)");
    if (header[2] <= 0) fail(path, "token count " + std::to_string(header[2]) + " at byte 8 is not positive");
    offset = llmc_header_bytes;
    count = static_cast<std::size_t>(header[2]);
    const std::size_t expected = offset + 2 * count;
    if (length < expected)
      fail(path, "truncated: the header at byte 8 promises " + std::to_string(count) + " tokens (" +
                     std::to_string(expected) + " bytes), the file holds " + std::to_string(length) + " bytes");
    if (length > expected)
      fail(path, "trailing bytes: the header at byte 8 promises " + std::to_string(count) + " tokens (" +
                     std::to_string(expected) + " bytes), the file holds " + std::to_string(length) + " bytes");
  } else {
    if (length % static_cast<std::size_t>(token_bytes) != 0)
      fail(path, "length " + std::to_string(length) + " bytes is not a multiple of the token size " +
                     std::to_string(token_bytes) + " (a truncated file, or the wrong token_bytes)");
    count = length / static_cast<std::size_t>(token_bytes);
  }
  if (vocab_size > 0) {
    if (token_bytes == 2)
      check_ids<std::uint16_t>(fd, offset, count, vocab_size, path);
    else
      check_ids<std::uint32_t>(fd, offset, count, vocab_size, path);
  }

  auto map = std::make_shared<mapping>();
  void* base = ::mmap(nullptr, length, PROT_READ, MAP_PRIVATE, fd, 0);
  if (base == MAP_FAILED) fail(path, std::string("cannot map: ") + std::strerror(errno));
  map->base = base;
  map->length = length;
  ::madvise(base, length, MADV_RANDOM);  // random starts: no read-ahead
  token_span span;
  span.data = static_cast<const std::uint8_t*>(base) + offset;
  span.count = count;
  span.bytes = token_bytes;
  span.owner = map;
  span.mapped = true;  // See Note [released windows]
  return span;
}

}  // namespace ap
