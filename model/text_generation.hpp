// Sampling text from a byte-level language model (a Sequential whose output is (1, sequence, 256) logits).
#pragma once

#include <cstdint>
#include <string>

#include "model/sequential.hpp"
#include "random/seeded_random.hpp"

namespace ap {

// A token drawn from softmax(logits / temperature) over n logits, with one draw of `random`; temperature 0
// takes the arg-max (the first on ties). Throws std::invalid_argument for a negative temperature.
std::size_t sample_token(const float* logits, std::size_t n, float temperature, splitmix64& random);

// `prompt` followed by `tokens` bytes, each sampled from the logits at the last position of the last
// `context` bytes (an empty prompt starts from a newline). The same seed gives the same text.
std::string generate_text(const sequential& model, std::size_t context, const std::string& prompt, std::size_t tokens,
                          float temperature, std::uint64_t seed);

}  // namespace ap
