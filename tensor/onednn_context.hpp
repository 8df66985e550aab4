// The process's oneDNN engine and the calling thread's stream (Note [primitive cache per thread] in
// matmul_onednn.cpp). Only for the tensor library's *_onednn.cpp files: it includes <dnnl.hpp>.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

namespace ap::onednn {

inline dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

inline dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

}  // namespace ap::onednn
