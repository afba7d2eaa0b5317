#include "backend/cuda/cuda_check.h"

#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "tessera/error.h"

namespace tessera::detail::cuda {

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  // A non-sticky error stays the runtime's last error until read: clear it, so that a caught
  // error is not reported again by the next launch's check.
  (void)cudaGetLastError();
  throw Error(fmt::format("[cuda] {} failed: {} ({}) at {}:{}", call, cudaGetErrorString(status),
                          cudaGetErrorName(status), file, line));
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  throw Error(fmt::format("[cublas] {} failed: {} ({}) at {}:{}", call,
                          cublasGetStatusString(status), static_cast<int>(status), file, line));
}

bool launch_blocking() {
  static const bool enabled = [] {
    const char* v = std::getenv("TESSERA_LAUNCH_BLOCKING");
    return v != nullptr && std::string(v) != "0" && std::string(v) != "";
  }();
  return enabled;
}

void check_launch(cudaStream_t stream, const char* what, const char* file, int line) {
  const cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess) {
    throw Error(fmt::format("[{}] kernel launch failed: {} ({}) at {}:{}", what,
                            cudaGetErrorString(launched), cudaGetErrorName(launched), file, line));
  }
  if (!launch_blocking()) return;
  // Synchronizing a stream that is recording a graph would break the recording; its kernels
  // run (and are checked) at replay.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) (void)cudaGetLastError();
  if (capture != cudaStreamCaptureStatusNone) return;
  // Debug mode: wait for this kernel so a fault is blamed on it, not on a later op.
  const cudaError_t ran = cudaStreamSynchronize(stream);
  if (ran != cudaSuccess) {
    throw Error(fmt::format("[{}] kernel failed: {} ({}) at {}:{} (TESSERA_LAUNCH_BLOCKING=1)",
                            what, cudaGetErrorString(ran), cudaGetErrorName(ran), file, line));
  }
}

}  // namespace tessera::detail::cuda
