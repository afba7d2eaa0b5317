#include "backend/cuda/cuda_backend.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include <fmt/format.h>

#include "backend/cuda/cuda_check.h"
#include "core/tensor_impl.h"
#include "tessera/memory.h"

// Note [CUDA streams and memory]
// Each GPU has a non-blocking default stream; every op and copy on the GPU's memory is
// queued there (or on a side stream inside a StreamGuard: Note [CUDA streams]), so work on
// one device runs in order and the host never waits unless it reads values (copy_to_host)
// or calls synchronize. Memory freed on the host goes back to the
// device's cache and is reused by work queued later on the same stream, which is safe
// because that work runs after everything already queued. A copy between two GPUs runs on
// the source's stream after an event from the destination's stream (so earlier readers of
// the destination are done), and the destination's stream then waits for an event recorded
// after the copy. Host-to-device copies go through pinned staging blocks that are reused
// only once the copy that read them has finished; pinned CPU tensors are copied directly.

namespace tessera::detail {

CudaBackend& cuda_backend_impl() {
  // Never destroyed: tensors in static storage may be freed after main returns.
  static CudaBackend* backend = new CudaBackend();
  return *backend;
}

Backend* cuda_backend() { return &cuda_backend_impl(); }

namespace {

std::string visible_devices_note() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  if (v == nullptr) return "";
  return fmt::format("; CUDA_VISIBLE_DEVICES='{}' limits which GPUs this process sees", v);
}

std::string describe_probe_failure(cudaError_t status) {
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  switch (status) {
    case cudaErrorNoDevice:
      return "no NVIDIA GPU was found (the CUDA runtime reports no device)" +
             visible_devices_note();
    case cudaErrorInsufficientDriver:
      return driver == 0
                 ? "no NVIDIA driver is installed (libcuda could not be loaded)"
                 : fmt::format(
                       "the NVIDIA driver supports CUDA {}.{} but tessera was built with "
                       "CUDA {}.{}; update the driver",
                       driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
    default:
      return fmt::format("the CUDA runtime could not list GPUs: {} ({})",
                         cudaGetErrorString(status), cudaGetErrorName(status)) +
             visible_devices_note();
  }
}

}  // namespace

CudaBackend::CudaBackend() {
  int n = 0;
  const cudaError_t status = cudaGetDeviceCount(&n);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    reason_ = describe_probe_failure(status);
    return;
  }
  count_ = n < kMaxDevicesPerKind ? n : kMaxDevicesPerKind;
  if (count_ == 0) reason_ = "no NVIDIA GPU was found" + visible_devices_note();
}

std::string CudaBackend::unavailable_reason() const {
  if (count_ == 0) return reason_;
  return fmt::format("only {} GPU{} visible (cuda:0 to cuda:{}){}", count_,
                     count_ == 1 ? " is" : "s are", count_ - 1, visible_devices_note());
}

CudaBackend::PerDevice& CudaBackend::device(int index) {
  PerDevice& d = devices_[index];
  std::call_once(d.init, [&] {
    TESSERA_CUDA_CHECK(cudaSetDevice(index));
    d.events.set_device(index);
    for (StreamSlot& slot : d.streams) {
      TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&slot.stream, cudaStreamNonBlocking));
    }
    d.allocator = std::make_unique<CudaAllocator>(d.events);
    d.gemm_plans = std::make_unique<GemmPlans>();
    // Large reductions take scratch from the stream-ordered pool (cudaMallocAsync). By
    // default the pool returns its memory to the driver at every synchronization, and the
    // next allocation maps it again: ~100 us per host read. Keep it (empty_cache trims it).
    cudaMemPool_t pool;
    TESSERA_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, index));
    std::uint64_t keep = UINT64_MAX;
    TESSERA_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    // Made here, not at the first index kernel, which may be in a graph capture. Its host
    // address is its device address (unified addressing on every GPU tessera supports).
    void* fault = nullptr;
    TESSERA_CUDA_CHECK(cudaHostAlloc(&fault, sizeof(cuda::IndexFault),
                                     cudaHostAllocMapped | cudaHostAllocPortable));
    d.index_fault = new (fault) cuda::IndexFault{};
  });
  return d;
}

cublasHandle_t CudaBackend::cublas(int index) {
  activate(index);
  StreamSlot& slot = devices_[index].streams[current_stream(index)];
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  if (slot.cublas == nullptr) {
    TESSERA_CUBLAS_CHECK(cublasCreate(&slot.cublas));
    TESSERA_CUBLAS_CHECK(cublasSetStream(slot.cublas, slot.stream));
    // Half outputs (the cublasGemmEx fallback of Note [CUDA half GEMM]) keep float32 sums:
    // no split-K reduction in the output type. TF32 is chosen per call by the compute type,
    // not by the math mode, so this bit is the only one we set.
    cublasMath_t mode = CUBLAS_DEFAULT_MATH;
    TESSERA_CUBLAS_CHECK(cublasGetMathMode(slot.cublas, &mode));
    TESSERA_CUBLAS_CHECK(cublasSetMathMode(
        slot.cublas,
        static_cast<cublasMath_t>(mode | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    // A workspace of our own (32 MiB, what NVIDIA suggests for Hopper), so cuBLAS never
    // allocates inside a graph capture; one per stream, shared with cuBLASLt's calls there.
    TESSERA_CUDA_CHECK(cudaMalloc(&slot.workspace, kCublasWorkspace));
    TESSERA_CUBLAS_CHECK(cublasSetWorkspace(slot.cublas, slot.workspace, kCublasWorkspace));
  }
  return slot.cublas;
}

void* CudaBackend::cublas_workspace(int index) {
  cublas(index);  // made with the handle
  return devices_[index].streams[current_stream(index)].workspace;
}

GemmPlans& CudaBackend::gemm_plans(int index) { return *device(index).gemm_plans; }

DeviceInfo CudaBackend::info(int index) const {
  cudaDeviceProp prop{};
  TESSERA_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  int runtime = 0, driver = 0;
  TESSERA_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  TESSERA_CUDA_CHECK(cudaDriverGetVersion(&driver));
  std::string uuid = "GPU-";
  for (int i = 0; i < 16; ++i) {
    uuid += fmt::format("{:02x}", static_cast<unsigned char>(prop.uuid.bytes[i]));
    if (i == 3 || i == 5 || i == 7 || i == 9) uuid += '-';
  }
  DeviceInfo info;
  info.name = prop.name;
  info.total_memory = prop.totalGlobalMem;
  info.cores = prop.multiProcessorCount;
  info.details = fmt::format(
      "pci={:04x}:{:02x}:{:02x}.0 uuid={} cc={}.{} multiprocessors={} driver={}.{} "
      "runtime={}.{}",
      prop.pciDomainID, prop.pciBusID, prop.pciDeviceID, uuid, prop.major, prop.minor,
      prop.multiProcessorCount, driver / 1000, driver % 1000 / 10, runtime / 1000,
      runtime % 1000 / 10);
  return info;
}

void* CudaBackend::allocate(int index, std::size_t bytes, FirstWriter /*first*/) {
  activate(index);
  return devices_[index].allocator->allocate(bytes);
}

void CudaBackend::deallocate(int index, void* ptr, std::size_t bytes) {
  // No GPU made current (a free with no side stream in use costs no driver call): events
  // come from the GPU's pool, which makes its GPU current to create one, and a failure to
  // record them does not throw out of the tensor's destructor (BasicCachingAllocator).
  PerDevice& d = devices_[index];
  cudaStream_t buf[1 + kExtraStreams];
  d.allocator->deallocate(ptr, bytes, streams_in_use(d, buf));
}

std::size_t CudaBackend::reserved(int index) const {
  const PerDevice& d = devices_[index];
  return d.allocator ? d.allocator->reserved() : 0;
}

void CudaBackend::empty_cache(int index) {
  activate(index);
  devices_[index].allocator->empty_cache();
  cudaMemPool_t pool;
  TESSERA_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, index));
  TESSERA_CUDA_CHECK(cudaDeviceSynchronize());  // the pool frees only what no work uses
  TESSERA_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
}

std::string CudaBackend::memory_report(int index) const {
  std::size_t free = 0, total = 0;
  const_cast<CudaBackend*>(this)->activate(index);
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) (void)cudaGetLastError();
  const PerDevice& d = devices_[index];
  return fmt::format(
      "reserved by tessera {}, largest free cached block {}, the driver reports {} "
      "available of {}",
      format_bytes(d.allocator ? d.allocator->reserved() : 0),
      format_bytes(d.allocator ? d.allocator->largest_cached_block() : 0), format_bytes(free),
      format_bytes(total));
}

void* CudaBackend::allocate_pinned(std::size_t bytes) { return pinned_.allocate(bytes); }
void CudaBackend::deallocate_pinned(void* ptr, std::size_t bytes, StillRead still_read) {
  pinned_.deallocate(ptr, bytes, std::move(still_read));
}

}  // namespace tessera::detail
