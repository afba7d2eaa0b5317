#pragma once
// The CUDA backend: a default stream and side streams per GPU, a caching allocator per GPU,
// pinned staging for host copies, peer copies ordered with events. See Note [CUDA streams and
// memory] in cuda_backend.cpp.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_allocator.h"
#include "backend/cuda/cuda_event_pool.h"
#include "backend/cuda/cuda_gemm_plan.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pinned_pool.h"
#include "core/device_registry.h"

namespace tessera::detail {

class CudaBackend final : public Backend {
 public:
  CudaBackend();

  DeviceKind kind() const override { return DeviceKind::kCuda; }
  int device_count() const override { return count_; }
  std::string unavailable_reason() const override;
  DeviceInfo info(int index) const override;

  void* allocate(int index, std::size_t bytes, FirstWriter first) override;
  void deallocate(int index, void* ptr, std::size_t bytes) override;
  std::size_t reserved(int index) const override;
  void empty_cache(int index) override;
  std::string memory_report(int index) const override;

  void copy_from_host(const void* src, const Tensor& dst) override;
  void copy_to_host(const Tensor& src, void* dst) override;
  void copy_from_cpu(const Tensor& src, const Tensor& dst) override;
  void copy(const Tensor& src, const Tensor& dst) override;
  void synchronize(int index) override;

  int extra_streams() const override { return kExtraStreams; }  // cuda_streams.cpp
  void enter_stream(int index, int id, int previous) override;
  void leave_stream(int index, int id, int previous) override;
  void order_stream_after(int index, int waiter, int waited) override;
  int current_stream(int index) const override;
  void synchronize_stream(int index, int id) override;

  // One GPU per graph (cuda_graph.cpp).
  int max_capture_devices() const override { return 1; }
  void begin_capture(const std::vector<int>& indices) override;
  std::unique_ptr<CapturedWork> end_capture(const std::vector<int>& indices) override;
  void abort_capture(const std::vector<int>& indices) override;
  bool capturing(int index) const override;

  void* allocate_pinned(std::size_t bytes) override;
  void deallocate_pinned(void* ptr, std::size_t bytes, StillRead still_read) override;

  void fill(const Tensor& out, double value) override;
  void arange(const Tensor& out, double start, double step) override;
  void random(const Tensor& out, RandomKind kind, double a, double b, std::uint64_t seed,
              std::uint64_t offset) override;
  void random_int(const Tensor& out, std::int64_t low, std::uint64_t span, std::uint64_t seed,
                  std::uint64_t offset) override;
  void index_select(const Tensor& x, int dim, const Tensor& index, const Tensor& out) override;
  void index_add(const Tensor& target, int dim, const Tensor& index, const Tensor& source) override;
  void unary(UnaryOp op, const Tensor& in, const Tensor& out) override;
  void unary_backward(UnaryOp op, const Tensor& grad, const Tensor& saved,
                      const Tensor& grad_in) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void binary_scalar(BinaryOp op, const Tensor& a, double scalar, bool scalar_first,
                     const Tensor& out) override;
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void reduce(ReduceOp op, const Tensor& in, std::uint32_t dim_mask, const Tensor& out) override;
  void matmul(const Tensor& a, const Tensor& b, const Tensor& out) override;  // cuda_matmul.cpp
  bool matmul_takes_half(Dtype dtype) const override;                         // cuda_matmul.cpp
  void softmax(const Tensor& in, int dim, bool log, const Tensor& out) override;
  void cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& losses,
                     const Tensor& probs) override;  // cuda_ops.cpp
  void cross_entropy_backward(const Tensor& probs, const Tensor& targets, const Tensor& grad_losses,
                              double divisor, const Tensor& grad_logits) override;
  void conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
              const Window2d& w) override;  // cuda_conv.cpp
  void conv2d_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_out,
                       const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias,
                       const Window2d& w) override;
  void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                  const Tensor& y, const Tensor& save_mean, const Tensor& save_invstd) override;
  void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_y,
                           const Tensor& save_mean, const Tensor& save_invstd, const Tensor& grad_x,
                           const Tensor& grad_weight, const Tensor& grad_bias) override;
  void batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const Tensor& running_mean, const Tensor& running_var, const Tensor& y,
                  const Tensor& save_mean, const Tensor& save_invstd,
                  const BatchNormParams& p) override;
  void batch_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_y,
                           const Tensor& save_mean, const Tensor& save_invstd, bool training,
                           const Tensor& grad_x, const Tensor& grad_weight,
                           const Tensor& grad_bias) override;
  void pool2d(PoolKind kind, const Tensor& x, const Tensor& out, const Tensor& indices,
              const Window2d& w) override;
  void pool2d_backward(PoolKind kind, const Tensor& grad_out, const Tensor& indices,
                       const Tensor& grad_x, const Window2d& w) override;
  void sgd_steps(std::span<const SgdStep> steps, const SgdParams& p) override;  // cuda_optim.cpp
  void adam_steps(std::span<const AdamStep> steps) override;
  void unscale_grad(const Tensor& grad, const Tensor& inv_scale, const Tensor& found_inf) override;
  void collective(const CollectiveCall& call) override;  // nccl_collectives.cpp
  // nccl_process_collectives.cpp
  void process_collective(const ProcessCollectiveCall& call) override;

  // Makes `index` the calling thread's current CUDA device and returns the stream this
  // thread queues its work on (the default stream, or a StreamGuard's), after making the
  // default stream wait for the side streams left since (Note [CUDA streams]).
  cudaStream_t activate(int index);
  // The same without those waits: for entering a side stream, which must not inherit them.
  cudaStream_t select(int index);
  // The cuBLAS handle of that stream (one per stream, created on first use).
  cublasHandle_t cublas(int index);
  // The workspace cuBLAS and cuBLASLt use on that stream (kCublasWorkspace bytes).
  void* cublas_workspace(int index);
  // The device's cuBLASLt handle and its cache of matmul plans (cuda_gemm_plan.h).
  GemmPlans& gemm_plans(int index);
  // The device's pool of events.
  EventPool& events(int index) { return device(index).events; }
  static constexpr std::size_t kCublasWorkspace = std::size_t{32} << 20;

  static constexpr int kExtraStreams = 4;  // side streams per GPU (new_stream's pool)

  // Held while one operation queues work on several GPUs' streams that waits across them (an
  // NCCL group, a peer copy's event waits), so that two threads' such operations reach every
  // stream in one order: interleaved, an NCCL kernel on one GPU could wait for its partner
  // queued behind a stream wait for work queued behind the first kernel. The rule of Note
  // [Cross-device submissions] (backend/cpu/cpu_backend.h) for logical CPU devices.
  [[nodiscard]] std::unique_lock<std::mutex> hold_cross_device_submissions() {
    return std::unique_lock(cross_device_submissions_);
  }

 private:
  struct StreamSlot {
    cudaStream_t stream = nullptr;
    cublasHandle_t cublas = nullptr;
    void* workspace = nullptr;
  };
  struct PerDevice {
    std::array<StreamSlot, 1 + kExtraStreams> streams;  // [0] is the default stream
    EventPool events;
    std::unique_ptr<CudaAllocator> allocator;
    std::unique_ptr<GemmPlans> gemm_plans;
    std::once_flag init;
    // Side-stream bookkeeping (Note [CUDA streams] in cuda_streams.cpp), under side_mutex.
    std::mutex side_mutex;
    std::vector<std::pair<cudaEvent_t, int>> pending_joins;  // the default stream waits next
    std::array<int, 1 + kExtraStreams> open{}, pending{};    // guards open, joins pending, per id
    std::atomic<bool> has_pending_joins{false};
    // Bit i: side stream i may still run work the default stream has not joined.
    std::atomic<unsigned> active{0};
    // Graph capture (cuda_graph.cpp).
    std::atomic<bool> capturing{false};
    std::shared_ptr<GraphPool> capture_pool;
    // Where index kernels record a bad index (Note [Indices checked by the kernel] in
    // backend/indexing.h): mapped pinned host memory, made with the device.
    cuda::IndexFault* index_fault = nullptr;
    // Bit g: data computed on GPU g reached this one (a copy, a collective), so a fault
    // recorded there may be behind this GPU's values too (Note [Faults follow the data]).
    std::atomic<std::uint64_t> fault_sources{0};
  };
  // Throws the IndexError an index kernel recorded on GPU `index`, or on a GPU whose data
  // reached it, since the last report, and clears it; call after waiting for the GPU
  // (cuda_ops.cpp).
  void report_index_fault(int index);
  // Throws the fault recorded in GPU g's slot, if any, once every stream of g is done.
  void take_index_fault(int g);
  // Records that values computed on GPU `from` were copied or reduced into GPU `to`.
  void note_data_from(int to, int from);
  PerDevice& device(int index);
  void apply_joins(PerDevice& d);
  // The streams a freed block may still be used on (empty when only the default runs).
  std::span<const cudaStream_t> streams_in_use(PerDevice& d,
                                               cudaStream_t (&buf)[1 + kExtraStreams]);
  // Returns a graph's memory to the device's cache, behind the streams in use (cuda_graph.cpp).
  void release_pool(int index, const std::shared_ptr<GraphPool>& pool);
  friend class CudaGraph;

  int count_ = 0;
  std::string reason_;  // why no GPU is visible, when count_ == 0
  std::array<PerDevice, kMaxDevicesPerKind> devices_;
  PinnedPool pinned_;
  std::mutex cross_device_submissions_;
};

CudaBackend& cuda_backend_impl();

// The kernel's view of a tensor.
cuda::KernelArg kernel_arg(const Tensor& t);

}  // namespace tessera::detail
