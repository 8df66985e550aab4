#include "model/text_generation.hpp"

#include <cmath>
#include <stdexcept>
#include <vector>

namespace ap {

std::size_t sample_token(const float* logits, std::size_t n, float temperature, splitmix64& random) {
  if (!(temperature >= 0.0f)) throw std::invalid_argument("sampling temperature must not be negative");
  std::size_t best = 0;
  for (std::size_t i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  if (temperature == 0.0f) return best;
  std::vector<double> weights(n);
  double sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) sum += weights[i] = std::exp(double(logits[i] - logits[best]) / temperature);
  double u = double(unit_float(random.next())) * sum;
  for (std::size_t i = 0; i < n; ++i) {
    if (u < weights[i]) return i;
    u -= weights[i];
  }
  return best;  // rounding left u at the end
}

std::string generate_text(const sequential& model, std::size_t context, const std::string& prompt, std::size_t tokens,
                          float temperature, std::uint64_t seed) {
  std::string text = prompt.empty() ? std::string("\n") : prompt;
  splitmix64 random(seed);
  for (std::size_t n = 0; n < tokens; ++n) {
    const std::size_t t = std::min(context, text.size());
    tensor ids = tensor::from_shape({1, t});  // (1, sequence)
    for (std::size_t i = 0; i < t; ++i) ids.data()[i] = float(static_cast<unsigned char>(text[text.size() - t + i]));
    const tensor logits = model.forward(ids);  // (1, sequence, vocabulary)
    const std::size_t vocabulary = cols(logits);
    text += static_cast<char>(sample_token(logits.data() + (t - 1) * vocabulary, vocabulary, temperature, random));
  }
  return prompt.empty() ? text.substr(1) : text;
}

}  // namespace ap
