#pragma once
// What BLAS tessera's CPU kernels call, as the libraries themselves report it.
#include <string>

namespace tessera::tools {

// "OpenBLAS 0.3.21 (OpenMP, Haswell, 2 threads); oneDNN 3.0.0 (cpu runtime OMP)"
std::string describe_blas();

}  // namespace tessera::tools
