#pragma once
// Running a oneDNN matmul primitive, built once for every CPU (not per instruction-set level):
// its argument map, compiled in a level's file, put that level's instructions into a
// standard-library function (scripts/check-isa).
#include <oneapi/dnnl/dnnl.hpp>

namespace tessera::detail {

const dnnl::engine& cpu_engine();

// Runs `primitive` (of `pd`) on src, weights and dst with this thread's scratchpad (Note [One
// primitive on several threads] in cpu_matmul.cpp) and waits. Throws dnnl::error.
void run_onednn_matmul(const dnnl::matmul& primitive, const dnnl::matmul::primitive_desc& pd,
                       const void* src, const void* weights, void* dst);

}  // namespace tessera::detail
