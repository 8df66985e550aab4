// Shared by the element-wise layers (activations, dropout): the shape check of their backward.
#pragma once

#include "model/layer.hpp"

namespace ap {

// cache.saved[0], after checking that forward ran and that dy has its shape; throws naming the layer.
const tensor& saved_matching(const layer& l, const tensor& dy, const layer_cache& cache);

}  // namespace ap
