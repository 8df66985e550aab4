#include "model/elementwise.hpp"

#include <stdexcept>

namespace ap {

const tensor& saved_matching(const layer& l, const tensor& dy, const layer_cache& cache) {
  if (cache.saved.empty())
    throw std::invalid_argument(l.describe() + " backward: the cache is empty (no forward ran into it)");
  const tensor& saved = cache.saved[0];
  if (dy.shape() != saved.shape())
    throw std::invalid_argument(l.describe() + " backward: dy of shape " + shape_string(dy) +
                                " does not match the forward's " + shape_string(saved));
  return saved;
}

}  // namespace ap
