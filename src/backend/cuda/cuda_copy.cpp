// CUDA copies: host <-> device through pinned memory, device <-> device on one GPU or
// between two (peer copies ordered with events). See Note [CUDA streams and memory].
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <utility>

#include <fmt/format.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "core/tensor_impl.h"
#include "tessera/graph.h"

namespace tessera::detail {
namespace {

// Pinned CPU tensors being read by asynchronous copies, kept alive until their event fires.
struct InFlight {
  cudaEvent_t done;
  Tensor source;
};
std::mutex g_in_flight_mutex;
// Never destroyed: releasing a pinned tensor after the CUDA runtime shut down would fail.
std::deque<InFlight>& g_in_flight = *new std::deque<InFlight>();

void reap_finished_copies() {
  std::lock_guard lock(g_in_flight_mutex);
  while (!g_in_flight.empty() && cudaEventQuery(g_in_flight.front().done) == cudaSuccess) {
    TESSERA_CUDA_CHECK(cudaEventDestroy(g_in_flight.front().done));
    g_in_flight.pop_front();
  }
  (void)cudaGetLastError();  // cudaErrorNotReady from the query is not an error
}

// Makes `waiter` wait for everything queued so far on `signaller`, which belongs to GPU
// `signaller_device`.
void order_streams(CudaBackend& backend, int signaller_device, cudaStream_t signaller,
                   cudaStream_t waiter) {
  backend.activate(signaller_device);
  wait_for(backend.events(signaller_device), waiter, signaller);
}

// Lets GPU `from`, the current one, read and write GPU `to`'s memory, so that a copy queued
// on `from`'s stream goes directly between them instead of through the host. Asked once per
// ordered pair: cudaDeviceEnablePeerAccess(to) enables access from the current device to
// `to`, and the copy runs on the source's stream (PyTorch enables the same direction).
void enable_peer_access(int from, int to) {
  static std::mutex mutex;
  static std::array<std::atomic<bool>, kMaxDevicesPerKind * kMaxDevicesPerKind> asked{};
  std::atomic<bool>& pair = asked[from * kMaxDevicesPerKind + to];
  if (pair.load(std::memory_order_acquire)) return;
  std::lock_guard lock(mutex);
  if (pair.load(std::memory_order_relaxed)) return;
  int can = 0;
  TESSERA_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, from, to));
  if (can != 0) {
    const cudaError_t status = cudaDeviceEnablePeerAccess(to, 0);
    if (status == cudaErrorPeerAccessAlreadyEnabled) {
      (void)cudaGetLastError();  // enabled before us (another library): what we wanted
    } else {
      TESSERA_CUDA_CHECK(status);
    }
  }
  pair.store(true, std::memory_order_release);
}

}  // namespace

cuda::KernelArg kernel_arg(const Tensor& t) {
  const TensorImpl& impl = impl_of(t);
  cuda::KernelArg arg;
  arg.data = impl.data();
  arg.dtype = impl.dtype;
  arg.ndim = impl.shape.size();
  for (int d = 0; d < arg.ndim; ++d) {
    arg.sizes[d] = impl.shape[d];
    arg.strides[d] = impl.strides[d];
  }
  arg.numel = impl.numel();
  arg.contiguous = impl.contiguous;
  return arg;
}

void CudaBackend::copy_from_host(const void* src, const Tensor& dst) {
  const std::size_t bytes = dst.nbytes();
  if (bytes == 0) return;
  const int index = dst.device().index();
  const cudaStream_t stream = activate(index);
  // Stage through pinned memory so the DMA is asynchronous and the caller's buffer is free
  // to go as soon as we return.
  void* staging = pinned_.acquire_staging(bytes, index);
  std::memcpy(staging, src, bytes);
  TESSERA_CUDA_CHECK(
      cudaMemcpyAsync(impl_of(dst).data(), staging, bytes, cudaMemcpyHostToDevice, stream));
  pinned_.release_staging(staging, stream);
}

void CudaBackend::copy_from_cpu(const Tensor& src, const Tensor& dst) {
  reap_finished_copies();
  if (!impl_of(src).storage->pinned) {
    copy_from_host(impl_of(src).data(), dst);
    return;
  }
  const std::size_t bytes = dst.nbytes();
  if (bytes == 0) return;
  const cudaStream_t stream = activate(dst.device().index());
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(impl_of(dst).data(), impl_of(src).data(), bytes,
                                     cudaMemcpyHostToDevice, stream));
  InFlight copy{nullptr, src};
  TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&copy.done, cudaEventDisableTiming));
  TESSERA_CUDA_CHECK(cudaEventRecord(copy.done, stream));
  std::lock_guard lock(g_in_flight_mutex);
  g_in_flight.push_back(std::move(copy));
}

void CudaBackend::copy_to_host(const Tensor& src, void* dst) {
  const cudaStream_t stream = activate(src.device().index());
  const std::size_t bytes = src.nbytes();
  if (bytes > 0) {
    TESSERA_CUDA_CHECK(
        cudaMemcpyAsync(dst, impl_of(src).data(), bytes, cudaMemcpyDeviceToHost, stream));
  }
  // No unsafe asynchronous device-to-host copy: the host has the values when we return.
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream));
  report_index_fault(src.device().index());
}

void CudaBackend::copy(const Tensor& src, const Tensor& dst) {
  if (dst.numel() == 0) return;
  const int s = src.device().index(), d = dst.device().index();
  const bool plain = src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous();
  if (s == d) {
    const cudaStream_t stream = activate(d);
    if (plain) {
      TESSERA_CUDA_CHECK(cudaMemcpyAsync(impl_of(dst).data(), impl_of(src).data(), dst.nbytes(),
                                         cudaMemcpyDeviceToDevice, stream));
    } else {
      cuda::launch_copy(stream, kernel_arg(src), kernel_arg(dst));
    }
    return;
  }
  if (capturing(s) || capturing(d)) [[unlikely]] {
    // Its events order two GPUs' streams, and a CUDA graph records the work of one GPU.
    throw GraphCaptureError(fmt::format(
        "[Graph::capture] cuda:{} is capturing a graph, and a copy between two GPUs (cuda:{} "
        "to cuda:{}) cannot be recorded: a graph holds the work of one GPU. Do the copy before "
        "Graph::capture or after it (outside the captured code)",
        capturing(s) ? s : d, s, d));
  }
  if (!plain) {
    // Pack on the source GPU in the destination's dtype, move the bytes, unpack there.
    Tensor packed = make_tensor(src.shape(), dst.dtype(), src.device(), "copy_");
    copy(src, packed);
    Tensor landed = make_tensor(dst.shape(), dst.dtype(), dst.device(), "copy_");
    copy(packed, landed);
    copy(landed, dst);
    return;
  }
  // Waits on both GPUs' streams, queued as one step (hold_cross_device_submissions).
  const auto lock = hold_cross_device_submissions();
  const cudaStream_t dst_stream = activate(d);
  const cudaStream_t src_stream = activate(s);
  enable_peer_access(s, d);
  order_streams(*this, d, dst_stream, src_stream);  // earlier readers of dst are done
  activate(s);
  // Direct once peer access is enabled (above); through the host when the GPUs have no peer
  // path.
  TESSERA_CUDA_CHECK(cudaMemcpyPeerAsync(impl_of(dst).data(), d, impl_of(src).data(), s,
                                         dst.nbytes(), src_stream));
  order_streams(*this, s, src_stream, dst_stream);  // dst's later work sees the copy
  note_data_from(d, s);                             // Note [Faults follow the data]
}

void CudaBackend::synchronize(int index) {
  activate(index);  // applies pending joins, though every stream is waited for below anyway
  for (const StreamSlot& slot : devices_[index].streams) {
    TESSERA_CUDA_CHECK(cudaStreamSynchronize(slot.stream));
  }
  reap_finished_copies();
  report_index_fault(index);
}

}  // namespace tessera::detail
