#include "model/layer.hpp"

#include <cmath>

#include "random/seeded_random.hpp"

#include <stdexcept>

namespace ap {

void layer_cache::wrong_cache(const layer& who) const {
  if (!state_)
    throw std::invalid_argument(who.describe() +
                                " backward: the cache is empty (no forward of this layer ran into it, or it was freed)");
  throw std::invalid_argument(who.describe() + " backward: the cache holds what a forward of another layer kind saved");
}

std::optional<layer_cache> layer_cache::join(const std::vector<const layer_cache*>& parts) {
  layer_cache out;
  if (parts.empty() || parts.front()->empty()) {
    for (const layer_cache* p : parts)
      if (!p->empty()) return std::nullopt;
    return out;  // a layer that saves nothing (Sleep) saved nothing for the whole batch either
  }
  std::vector<const saved_state*> states;
  for (const layer_cache* p : parts) {
    if (p->empty() || typeid(*p->state_) != typeid(*parts.front()->state_)) return std::nullopt;
    states.push_back(p->state_.get());
  }
  out.state_ = parts.front()->state_->join_rows(states);
  if (!out.state_) return std::nullopt;
  return out;
}

layer_error::layer_error(std::string path, std::string detail, bool complete)
    : std::invalid_argument((complete ? "layer " : "part ") + path + " " + detail), path_(std::move(path)),
      detail_(std::move(detail)), complete_(complete) {}

std::string said_by(const layer& who, const std::string& what) {
  const std::string name = who.describe();
  if (what.compare(0, name.size(), name) == 0) return what;
  return name + ": " + what;
}

void check_float32(const tensor& t, const layer& who, const char* role) {
  if (t.type() != dtype::float32)
    throw std::invalid_argument(who.describe() + " takes float32 " + role + ", got " + describe(t));
}

void round_to_compute_dtype(tensor& t, dtype type) {
  if (type == dtype::bfloat16 && t.size() > 0) round_to_bfloat16(t.data(), t.size());
}

tensor entering_values(const tensor& t, dtype type) {
  if (t.type() == dtype::bfloat16) return t.astype(dtype::float32);  // exact; bfloat16 values already
  tensor out = t;
  round_to_compute_dtype(out, type);
  return out;
}

const tensor& float32_view(const tensor& stashed, tensor& scratch) {
  if (stashed.type() == dtype::float32) return stashed;
  assign_as(scratch, stashed, dtype::float32);
  return scratch;
}

namespace {
bool unset(const tensor& t) { return t.dimension() == 0 || t.size() == 0; }
}  // namespace

float* accumulate_into(tensor& dx, const shape_t& shape, const layer& who, bool* fresh) {
  if (fresh) *fresh = unset(dx);
  if (unset(dx)) {
    dx = fresh ? tensor::from_shape(shape) : zeros(shape);
  } else if (shape_of(dx) != shape) {
    throw std::invalid_argument(who.describe() + " backward: dx buffer of shape " + shape_string(dx) +
                                " does not match the forward's input " + shape_string(shape));
  }
  return dx.data();
}

void check_dy_shape(const tensor& dy, const shape_t& expected, const layer& who) {
  if (shape_of(dy) != expected)
    throw std::invalid_argument(who.describe() + " backward: dy of shape " + shape_string(dy) +
                                " does not match the forward's " + shape_string(expected));
}

void fill_normal(tensor& t, float std, std::uint64_t seed) {
  splitmix64 random(seed);
  float* p = t.data();
  const std::size_t n = t.size();
  constexpr double two_pi = 6.283185307179586476925;
  for (std::size_t i = 0; i < n; i += 2) {
    // 1 - unit_float lies in (0, 1]: the logarithm stays finite.
    const double u1 = 1.0 - double(unit_float(random.next())), u2 = double(unit_float(random.next()));
    const double r = std::sqrt(-2.0 * std::log(u1)) * double(std);
    p[i] = float(r * std::cos(two_pi * u2));
    if (i + 1 < n) p[i + 1] = float(r * std::sin(two_pi * u2));
  }
}

}  // namespace ap
