#pragma once
// Every CUDA runtime and cuBLAS call goes through these macros, which keep the failing
// call's text and the CUDA error string in the tessera::Error they throw. NCCL calls have
// their own, TESSERA_NCCL_CHECK in nccl_library.h (NCCL is loaded at run time).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

namespace tessera::detail::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file,
                                   int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file,
                                     int line);
// After a kernel launch: checks the launch, and in launch-blocking mode
// (TESSERA_LAUNCH_BLOCKING=1) waits for the stream and checks the kernel, naming `what`.
void check_launch(cudaStream_t stream, const char* what, const char* file, int line);
bool launch_blocking();

}  // namespace tessera::detail::cuda

#define TESSERA_CUDA_CHECK(call)                                                             \
  do {                                                                                       \
    const cudaError_t tessera_status_ = (call);                                              \
    if (tessera_status_ != cudaSuccess) [[unlikely]] {                                       \
      ::tessera::detail::cuda::throw_cuda_error(tessera_status_, #call, __FILE__, __LINE__); \
    }                                                                                        \
  } while (false)

#define TESSERA_CUBLAS_CHECK(call)                                                             \
  do {                                                                                         \
    const cublasStatus_t tessera_status_ = (call);                                             \
    if (tessera_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]] {                               \
      ::tessera::detail::cuda::throw_cublas_error(tessera_status_, #call, __FILE__, __LINE__); \
    }                                                                                          \
  } while (false)

#define TESSERA_CUDA_CHECK_LAUNCH(stream, what) \
  ::tessera::detail::cuda::check_launch((stream), (what), __FILE__, __LINE__)
