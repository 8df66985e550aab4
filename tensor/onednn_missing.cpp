// The *_onednn ops in a build without oneDNN (-DAP_COMPUTE=reference): callers get an error, not a link failure.
#include <stdexcept>
#include <string>

#include "tensor/batched_matmul.hpp"
#include "tensor/matmul.hpp"
#include "tensor/nn_ops.hpp"

namespace ap {
namespace {

[[noreturn]] void missing(const char* op) {
  throw std::logic_error(std::string(op) + ": this build has no oneDNN (built with -DAP_COMPUTE=reference)");
}

}  // namespace

bool onednn_uses_amx() { return false; }
bool onednn_avx512() { return false; }
void gemm_onednn(bool, bool, std::size_t, std::size_t, std::size_t, float, const float*, const float*, float, float*) {
  missing("gemm_onednn");
}
void gemm_onednn(bool, bool, std::size_t, std::size_t, std::size_t, float, const bfloat16*, const bfloat16*, float,
                 float*) {
  missing("gemm_onednn");
}
void gemm_bias_onednn(std::size_t, std::size_t, std::size_t, const float*, const float*, const float*, float*) {
  missing("gemm_bias_onednn");
}
void gemm_bias_onednn(std::size_t, std::size_t, std::size_t, const bfloat16*, const bfloat16*, const float*, float*) {
  missing("gemm_bias_onednn");
}
void batched_gemm_onednn(bool, bool, std::size_t, std::size_t, std::size_t, std::size_t, float, const float*,
                         const float*, float, float*) {
  missing("batched_gemm_onednn");
}
void batched_gemm_onednn(bool, bool, std::size_t, std::size_t, std::size_t, std::size_t, float, const bfloat16*,
                         const bfloat16*, float, float*) {
  missing("batched_gemm_onednn");
}
void layer_norm_forward_onednn(const float*, const float*, const float*, float, std::size_t, std::size_t, float*,
                               float*, float*) {
  missing("layer_norm_forward_onednn");
}

}  // namespace ap
