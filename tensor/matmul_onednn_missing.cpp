// gemm_onednn in a build without oneDNN (-DAP_COMPUTE=reference): callers get an error, not a link failure.
#include <stdexcept>

#include "tensor/matmul.hpp"

namespace ap {

void gemm_onednn(bool, bool, std::size_t, std::size_t, std::size_t, float, const float*, const float*, float, float*) {
  throw std::logic_error("gemm_onednn: this build has no oneDNN (built with -DAP_COMPUTE=reference)");
}

void gemm_onednn(bool, bool, std::size_t, std::size_t, std::size_t, float, const bfloat16*, const bfloat16*, float,
                 float*) {
  throw std::logic_error("gemm_onednn: this build has no oneDNN (built with -DAP_COMPUTE=reference)");
}

}  // namespace ap
