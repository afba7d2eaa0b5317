#include "backend/cuda/pinned_pool.h"

#include "backend/cuda/cuda_check.h"

namespace tessera::detail {

template class BasicPinnedPool<CudaPinnedRuntime>;

void* CudaPinnedRuntime::host_alloc(std::size_t bytes) {
  void* p = nullptr;
  TESSERA_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
  return p;
}

void* CudaPinnedRuntime::try_host_alloc(std::size_t bytes) {
  void* p = nullptr;
  const cudaError_t status = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // clear it: running out is an answer here, not an error
    return nullptr;
  }
  TESSERA_CUDA_CHECK(status);
  return p;
}

// A failure (e.g. the runtime is shutting down at exit) leaks the block instead.
void CudaPinnedRuntime::host_free(void* ptr) {
  if (cudaFreeHost(ptr) != cudaSuccess) (void)cudaGetLastError();
}

cudaEvent_t CudaPinnedRuntime::new_event() {
  cudaEvent_t event = nullptr;
  TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return event;
}

void CudaPinnedRuntime::destroy_event(cudaEvent_t event) {
  if (cudaEventDestroy(event) != cudaSuccess) (void)cudaGetLastError();
}

void CudaPinnedRuntime::record(cudaEvent_t event, cudaStream_t stream) {
  TESSERA_CUDA_CHECK(cudaEventRecord(event, stream));
}

bool CudaPinnedRuntime::done(cudaEvent_t event) {
  const cudaError_t state = cudaEventQuery(event);
  if (state == cudaErrorNotReady) {
    (void)cudaGetLastError();  // not an error: clear it so later calls do not see it
    return false;
  }
  TESSERA_CUDA_CHECK(state);
  return true;
}

}  // namespace tessera::detail
