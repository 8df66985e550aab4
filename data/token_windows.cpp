#include "data/token_windows.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <utility>

#include "random/seeded_random.hpp"

namespace ap {

token_span token_span::part(std::size_t begin, std::size_t end) const {
  if (begin > end || end > count)
    throw std::out_of_range("token span part [" + std::to_string(begin) + ", " + std::to_string(end) +
                            ") of " + std::to_string(count) + " tokens");
  token_span s = *this;
  s.data = static_cast<const std::uint8_t*>(data) + begin * static_cast<std::size_t>(bytes);
  s.count = end - begin;
  return s;
}

std::size_t window_start(std::uint64_t seed, std::size_t i, std::size_t tokens, std::size_t context) {
  const unsigned __int128 r = hash_counters(mix_seed(seed, 0x7e47), i);
  return static_cast<std::size_t>((r * (tokens - context)) >> 64);
}

namespace {

// Windows of a span: seeded (a seed) or in order (no seed: window i starts at i * context).
class windows_source final : public data_source {
 public:
  windows_source(token_span tokens, std::size_t context, std::size_t count, bool seeded, std::uint64_t seed,
                 std::size_t vocab, std::string name)
      : tokens_(std::move(tokens)), context_(context), count_(count), seeded_(seeded), seed_(seed), vocab_(vocab),
        name_(std::move(name)) {
    if (tokens_.bytes != 1 && tokens_.bytes != 2 && tokens_.bytes != 4)
      throw std::invalid_argument(name_ + ": tokens of " + std::to_string(tokens_.bytes) +
                                  " bytes (expected 1, 2 or 4)");
    if (context_ == 0 || tokens_.count < context_ + 1)
      throw std::invalid_argument(name_ + ": " + std::to_string(tokens_.count) +
                                  " tokens cannot fill a window of context " + std::to_string(context_) +
                                  " + 1 (the model spec's key 'context')");
  }
  std::string name() const override { return name_; }
  std::size_t size() const override { return count_; }
  std::size_t num_classes() const override { return vocab_; }
  shape_t sample_shape() const override { return {context_}; }
  bool is_sequence() const override { return true; }
  batch gather(const std::size_t* indices, std::size_t count) const override {
    batch b{tensor::from_shape({count, context_}), tensor::from_shape({count, context_})};
    float* in = b.inputs.data();
    float* out = b.labels.data();
    for (std::size_t w = 0; w < count; ++w) {
      const std::size_t i = indices[w];
      if (i >= count_)
        throw std::out_of_range("window " + std::to_string(i) + " is out of range for '" + name_ + "' with " +
                                std::to_string(count_) + " windows");
      const std::size_t start = seeded_ ? window_start(seed_, i, tokens_.count, context_) : i * context_;
      float previous = float(tokens_.at(start));
      for (std::size_t p = 0; p < context_; ++p) {
        const float next = float(tokens_.at(start + p + 1));
        in[w * context_ + p] = previous;
        out[w * context_ + p] = next;
        previous = next;
      }
      if (tokens_.mapped) release(start, start + context_ + 1);
    }
    return b;
  }

 private:
  // See Note [released windows].
  void release(std::size_t first, std::size_t end) const {
    const auto at = [&](std::size_t token) {
      return reinterpret_cast<std::uintptr_t>(tokens_.data) + token * static_cast<std::size_t>(tokens_.bytes);
    };
    const auto round_down = [](std::uintptr_t a, std::uintptr_t to) { return a & ~(to - 1); };
    const std::uintptr_t page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE)), block = released_block_bytes;
    // Clamped to the span's pages: a block may reach into a neighbouring mapping.
    const std::uintptr_t lowest = round_down(at(0), page), highest = round_down(at(tokens_.count) + page - 1, page);
    const std::uintptr_t begin = std::max(lowest, round_down(at(first), block));
    const std::uintptr_t stop = std::min(highest, round_down(at(end) + block - 1, block));
    if (stop > begin) ::madvise(reinterpret_cast<void*>(begin), stop - begin, MADV_DONTNEED);
  }

  token_span tokens_;
  std::size_t context_, count_;
  bool seeded_;
  std::uint64_t seed_;
  std::size_t vocab_;
  std::string name_;
};

}  // namespace

std::shared_ptr<const data_source> token_windows(token_span tokens, std::size_t context, std::size_t count,
                                                 std::uint64_t seed, std::size_t vocab, std::string name) {
  return std::make_shared<windows_source>(std::move(tokens), context, count, true, seed, vocab, std::move(name));
}

std::shared_ptr<const data_source> token_windows_in_order(token_span tokens, std::size_t context,
                                                          std::size_t max_count, std::size_t vocab, std::string name) {
  const std::size_t fit = context == 0 || tokens.count < context + 1 ? 0 : (tokens.count - 1) / context;
  return std::make_shared<windows_source>(std::move(tokens), context, std::min(fit, max_count), false, 0, vocab,
                                          std::move(name));
}

}  // namespace ap
