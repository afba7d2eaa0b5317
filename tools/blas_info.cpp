#include "blas_info.h"

#include <cblas.h>
#include <dnnl.h>
#include <fmt/format.h>

namespace tessera::tools {
namespace {

std::string openblas() {
  // openblas_get_config() gives e.g. "OpenBLAS 0.3.21 USE_OPENMP Haswell MAX_THREADS=64".
  std::string config = openblas_get_config();
  const char* parallel = "single-threaded";
  switch (openblas_get_parallel()) {
    case 1:
      parallel = "pthreads";
      break;
    case 2:
      parallel = "OpenMP";
      break;
    default:
      break;
  }
  return fmt::format("{} ({}, {} threads)", config, parallel, openblas_get_num_threads());
}

std::string onednn() {
  const dnnl_version_t* v = dnnl_version();
  const char* runtime = v->cpu_runtime == DNNL_RUNTIME_OMP   ? "OpenMP"
                        : v->cpu_runtime == DNNL_RUNTIME_SEQ ? "sequential"
                                                             : "threadpool/TBB";
  return fmt::format("oneDNN {}.{}.{} ({} runtime)", v->major, v->minor, v->patch, runtime);
}

}  // namespace

std::string describe_blas() { return openblas() + "; " + onednn(); }

}  // namespace tessera::tools
