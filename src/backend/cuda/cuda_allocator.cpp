// The CUDA runtime calls of the GPU caching allocator (cuda_allocator.h).
#include "backend/cuda/cuda_allocator.h"

#include "backend/cuda/cuda_check.h"

namespace tessera::detail {

template class BasicCachingAllocator<CudaDeviceRuntime>;

void* CudaDeviceRuntime::try_malloc(std::size_t bytes) {
  void* p = nullptr;
  const cudaError_t status = cudaMalloc(&p, bytes);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // not sticky: clear it so later calls do not see it
    return nullptr;
  }
  TESSERA_CUDA_CHECK(status);
  return p;
}

void CudaDeviceRuntime::free(void* ptr) { TESSERA_CUDA_CHECK(cudaFree(ptr)); }

void CudaDeviceRuntime::record(cudaEvent_t event, cudaStream_t stream) {
  TESSERA_CUDA_CHECK(cudaEventRecord(event, stream));
}

bool CudaDeviceRuntime::done(cudaEvent_t event) {
  const cudaError_t status = cudaEventQuery(event);
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  TESSERA_CUDA_CHECK(status);
  return true;
}

void CudaDeviceRuntime::synchronize(cudaEvent_t event) {
  TESSERA_CUDA_CHECK(cudaEventSynchronize(event));
}

bool CudaDeviceRuntime::try_synchronize(cudaStream_t stream) {
  if (cudaStreamSynchronize(stream) == cudaSuccess) return true;
  (void)cudaGetLastError();
  return false;
}

}  // namespace tessera::detail
