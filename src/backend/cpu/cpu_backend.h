#pragma once
// The CPU backend: the plain CPU, or logical CPU devices each with its own in-order work
// queue (see cpu_devices.h). Kernels run through launch() or launch_with(), which either run
// them now or queue them on the device's thread. launch_with() queues borrowed handles, so
// memory goes back to the allocator when the host drops a tensor and is reused in queue order
// (Note [Memory freed in queue order] in cpu_allocator.cpp); a lambda given to launch()
// holds its captured handles, and their storage, until it has run.
//
// Every CPU device also has side streams (cpu_streams.cpp, Note [CPU side streams]): more
// in-order queues, each on its own thread, that launch() uses while a StreamGuard is open.
//
// Two classes (Note [CPU kernel variants] in cpu_backend.cpp): CpuBackendBase holds the
// devices, memory, copies, queues and graphs, built once for any x86-64; CpuBackend adds
// the kernels, and is built once per instruction-set level, each in its own namespace
// (TESSERA_CPU_ISA, set by the build), so the process picks the best its CPU can run.
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/borrowed_tensor.h"
#include "backend/cpu/copy_kernel.h"
#include "backend/cpu/cpu_allocator.h"
#include "backend/cpu/work_queue.h"
#include "core/device_registry.h"

namespace tessera::detail {

class CpuBackendBase : public Backend {
 public:
  CpuBackendBase();

  DeviceKind kind() const override { return DeviceKind::kCpu; }
  int device_count() const override;
  std::string unavailable_reason() const override { return ""; }
  DeviceInfo info(int index) const override;

  void* allocate(int index, std::size_t bytes, FirstWriter first) override;
  void deallocate(int index, void* ptr, std::size_t bytes) override;
  StillRead queued_readers(int index) override;
  std::size_t reserved(int index) const override;
  void empty_cache(int index) override;
  std::string memory_report(int index) const override;

  void copy_from_host(const void* src, const Tensor& dst) override;
  void copy_to_host(const Tensor& src, void* dst) override;
  void copy(const Tensor& src, const Tensor& dst) override;
  void copy_from_cpu(const Tensor& src, const Tensor& dst) override;
  bool fills_from_host() const override { return true; }
  void fill_from_host(int index, std::vector<Tensor> outputs, HostFill fill) override;
  void synchronize(int index) override;

  // Side streams (cpu_streams.cpp, Note [CPU side streams]): kSideStreams per device, each
  // its own WorkQueue, made the first time a thread enters it.
  static constexpr int kSideStreams = 4;
  int extra_streams() const override { return kSideStreams; }
  void enter_stream(int index, int id, int previous) override;
  void leave_stream(int index, int id, int previous) override;
  void order_stream_after(int index, int waiter, int waited) override;
  int current_stream(int index) const override;
  void synchronize_stream(int index, int id) override;
  // Waits for the work queued on every side stream, reporting no error (at exit).
  void drain_side_streams();
  // At exit: waits for the work queued on every device's default queue and side streams, so
  // that no kernel still runs while the libraries it calls (OpenBLAS, oneDNN) are torn down.
  void drain_queues();
  // Makes the calling thread, when it is the main thread, drain every queue when main returns
  // (Note [Exit with work queued]). Called where work is first queued: a launch, a stream.
  static void drain_when_main_returns();

  // Between processes, through MPI on the host (cpu_process_collectives.cpp).
  void process_collective(const ProcessCollectiveCall& call) override;

  // Graph capture (cpu_graph.cpp, Note [CPU graphs]). A Recording holds recorded kernels.
  struct Recording;
  int max_capture_devices() const override { return kMaxDevicesPerKind; }
  void begin_capture(const std::vector<int>& indices) override;
  std::unique_ptr<CapturedWork> end_capture(const std::vector<int>& indices) override;
  void abort_capture(const std::vector<int>& indices) override;
  // Note [Captures and other threads]: this thread's capture only.
  bool capturing(int index) const override {
    return capturing_[index].load(std::memory_order_relaxed) && records_here(index);
  }
  bool capturing_on_any_thread(int index) const override {
    return capture_claimed_[index].load(std::memory_order_acquire);
  }

  // Runs `kernel` on the queue of this thread's current stream of `index`, or now when that
  // stream has none (the default stream of the plain CPU, or with TESSERA_CPU_ASYNC=0);
  // while the device records a graph, keeps it for the graph instead.
  template <typename F>
  void launch(int index, F&& kernel) {
    if (capturing_[index].load(std::memory_order_relaxed) && records_here(index)) [[unlikely]] {
      record(index, std::function<void()>(std::forward<F>(kernel)));
      return;
    }
    if (WorkQueue* q = stream_queue(index)) {
      q->submit(QueuedTask(std::forward<F>(kernel)), run_ahead(index));
    } else {
      const InlineThreads threads(kernel_threads());
      kernel();
    }
  }
  // Runs kernel(tensors...) now, or queues it with borrowed handles (borrow()), so the
  // tensors' memory is reused in queue order once the host drops them; a recording borrows
  // them too, and the graph keeps their memory (Note [Memory of CPU graphs]). Cheaper than
  // capturing the handles in the lambda when the device has no queue (no refcount traffic).
  template <typename F, typename... Ts>
  void launch_with(int index, F kernel, const Ts&... tensors) {
    if (capturing_[index].load(std::memory_order_relaxed) && records_here(index)) [[unlikely]] {
      (keep_for_graph(index, tensors), ...);
      record(index, [kernel, held = std::tuple{borrow(tensors)...}] { std::apply(kernel, held); });
      return;
    }
    if (WorkQueue* q = stream_queue(index)) {
      q->submit([kernel, held = std::tuple{borrow(tensors)...}] { std::apply(kernel, held); },
                run_ahead(index));
    } else {
      const InlineThreads threads(kernel_threads());
      kernel(tensors...);
    }
  }
  // launch_with for a number of tensors known at run time: kernel(tensors).
  template <typename F>
  void launch_with_all(int index, F kernel, std::vector<Tensor> tensors) {
    const bool recording = capturing_[index].load(std::memory_order_relaxed) && records_here(index);
    if (recording) [[unlikely]] {
      for (const Tensor& t : tensors) keep_for_graph(index, t);
    }
    WorkQueue* q = recording ? nullptr : stream_queue(index);
    if (!recording && q == nullptr) {
      const InlineThreads threads(kernel_threads());
      kernel(tensors);
      return;
    }
    for (Tensor& t : tensors) t = borrow(t);
    auto task = [kernel, held = std::move(tensors)] { kernel(held); };
    if (recording) {
      record(index, std::move(task));
    } else {
      q->submit(std::move(task), run_ahead(index));
    }
  }
  // Runs `work` on the calling thread with the kernel threads of a logical device.
  template <typename F>
  void run_here(F&& work) {
    const InlineThreads threads(kernel_threads());
    work();
  }
  // The device's own queue (its default stream's), or nullptr when the default stream's work
  // runs on the calling thread.
  WorkQueue* queue(int index);
  // The queue of this thread's current stream of `index` (a side stream's, or the device's
  // own after the default stream's pending joins are applied), or nullptr when work on it
  // runs on the calling thread (then the joins were waited for here).
  WorkQueue* stream_queue(int index);
  // Makes the calling thread wait for the work queued so far on this thread's current stream
  // of `index` (cpu_streams.cpp): before a host thread runs work of that device itself.
  void wait_for_current_stream(int index);
  // The queue this thread's next work on `index` goes to (its current stream's), nullptr when
  // that work runs on the calling thread; unlike stream_queue, applies no joins.
  WorkQueue* current_queue(int index);
  // Kernel threads of each logical device (Note [Devices own their cores]); 0 for the plain
  // CPU, whose kernels use the calling thread's OpenMP setting.
  int kernel_threads();
  // Held while one operation queues tasks on the queues of several devices that wait for
  // each other. See Note [Cross-device submissions].
  [[nodiscard]] std::unique_lock<std::mutex> hold_cross_device_submissions() {
    return std::unique_lock(cross_device_submissions_);
  }

 protected:
  // Gives the calling thread's OpenMP regions `threads` threads for one inline kernel, and
  // restores its own setting after (the thread is the user's).
  class InlineThreads {
   public:
    explicit InlineThreads(int threads);
    ~InlineThreads();
    InlineThreads(const InlineThreads&) = delete;
    InlineThreads& operator=(const InlineThreads&) = delete;

   private:
    int before_ = 0;
  };

  // How many tasks this thread may queue ahead of device `index` (Note [Run-ahead memory]):
  // WorkQueue::kMaxPending while it also feeds other devices (data-parallel replicas), else
  // WorkQueue::kMaxPendingAlone.
  std::uint64_t run_ahead(int index);
  // The last task queued so far on each of `index`'s queues that has not run yet.
  QueueUses queue_uses(int index) const;
  // Keeps a kernel for the graph `index` is recording (cpu_graph.cpp).
  void record(int index, std::function<void()> kernel);
  // Makes the graph `index` is recording keep `t`'s memory alive, unless the capture made it
  // (the graph's pool keeps that).
  void keep_for_graph(int index, const Tensor& t);
  // Throws GraphCaptureError when `index` records a graph: `what` cannot be recorded.
  void refuse_while_capturing(int index, const char* what) const;

  // Graph capture: while capturing_[i], device i's kernels go to recordings_[i] (devices
  // captured together without queues share one, so their work keeps its order).
  std::array<std::atomic<bool>, kMaxDevicesPerKind> capturing_{};
  std::array<std::shared_ptr<Recording>, kMaxDevicesPerKind> recordings_;
  // Set by the one begin_capture that claims the device until its end or abort: two threads
  // beginning at once both passed the front end's check and overwrote each other's recording
  // (Note [Captures and other threads]).
  std::array<std::atomic<bool>, kMaxDevicesPerKind> capture_claimed_{};
  // The thread recording on each device: its work is recorded and its allocations come from
  // the graph's pool (Note [Captures and other threads]).
  std::array<std::atomic<std::thread::id>, kMaxDevicesPerKind> capture_thread_{};
  // Whether the calling thread is the one capturing on `index`, given that a capture is on.
  // Acquire: a thread that sees the capture begun sees its thread's id, not a former one.
  bool records_here(int index) const {
    return capturing_[index].load(std::memory_order_acquire) &&
           capture_thread_[index].load(std::memory_order_relaxed) == std::this_thread::get_id();
  }

  // Side streams of each device (cpu_streams.cpp). queues[id] (1..kSideStreams) is made
  // once and never destroyed; joins[id] is the ticket of queues[id] the default stream must
  // wait for before its next work (0: none).
  struct SideStreams {
    std::mutex mutex;  // guards making queues and joins
    std::array<std::unique_ptr<WorkQueue>, kSideStreams + 1> queues;
    // queues[id].get() once made, for readers that must not take the mutex (deallocate runs
    // on queue threads, and the mutex is held while a full queue makes submit() wait).
    std::array<std::atomic<WorkQueue*>, kSideStreams + 1> made{};
    std::array<std::uint64_t, kSideStreams + 1> joins{};
    std::atomic<bool> has_joins{false};
    std::atomic<bool> any{false};  // some side queue was made (synchronize's fast path)
  };
  // The side queue `id` of `index`, made on first use.
  WorkQueue* side_queue(int index, int id);
  // The queue of stream `id` of `index` (nullptr: the default stream runs on the caller).
  WorkQueue* queue_of_stream(int index, int id);
  // Stream `waiter` of `index` runs its later work after what stream `waited` has queued
  // so far (a queued wait, or a wait on this thread when `waiter` runs on it).
  void order_after(int index, int waiter, int waited);
  // Orders the default stream of `index` after the side streams' pending joins.
  void apply_joins(int index);
  std::array<SideStreams, kMaxDevicesPerKind> side_;

  // Note [Cross-device submissions]
  // A collective among queued logical devices queues one task per device, and the tasks meet
  // at a barrier; a copy between two queued devices queues a task on each that waits for the
  // other's; a replay of a graph recorded on several devices queues one task per device whose
  // collectives meet again. Each is correct alone, but two threads queueing such operations
  // at once can interleave them: thread A's collective reaches cpu:0, thread B's copy from
  // cpu:0 to cpu:1 reaches both queues, then A's collective reaches cpu:1. Now cpu:0 runs A's
  // task, which waits at the barrier for cpu:1's, which sits behind B's wait for the copy,
  // which sits behind A's task on cpu:0: a deadlock, with no error and no timeout. So every
  // operation that queues interdependent tasks on several devices' queues does it holding
  // this one lock, and all queues see those operations in one order. The remaining waits
  // between queues are between the streams of one device (Note [CPU side streams]) and
  // wait only for tasks queued earlier, which a collective (one task per device) cannot
  // close into a cycle. Holding the lock while a full queue makes submit() wait is safe: the
  // tasks ahead in that queue belong to operations already queued whole.
  std::mutex cross_device_submissions_;

  // Each logical device has its own allocator so its cache is its own; the plain CPU uses
  // allocators_[0].
  std::array<std::unique_ptr<CpuAllocator>, kMaxDevicesPerKind> allocators_;
  std::array<std::unique_ptr<WorkQueue>, kMaxDevicesPerKind> queues_;
  std::once_flag queues_once_;
  std::atomic<bool> queues_made_{false};  // queues_ is filled (deallocate reads it)
  std::once_flag threads_once_;
  int kernel_threads_ = 0;
};

// The one CPU backend of the process, of the kernel variant the CPU runs best.
CpuBackendBase& cpu_backend_impl();

// The instruction-set level of the CPU kernels the process runs: "x86-64" (any x86-64),
// "x86-64-v3" (AVX2, FMA) or "x86-64-v4" (AVX-512); "native" in a build for this machine
// only (TESSERA_CPU_DISPATCH=OFF). TESSERA_CPU_ISA=<level> picks a lower one (tests).
const char* cpu_kernel_isa();

}  // namespace tessera::detail

#ifndef TESSERA_CPU_ISA
#define TESSERA_CPU_ISA cpu_isa_unset  // only kernel files, built per level, define CpuBackend
#endif

namespace tessera::detail::TESSERA_CPU_ISA {

// The kernels, built for one instruction-set level (the files that define them are compiled
// once per level, each with its own TESSERA_CPU_ISA).
// This level's float32 <-> float16 rows for the copy kernel (half_rows.cpp).
HalfRowConverters half_row_converters();

class CpuBackend final : public CpuBackendBase {
 public:
  CpuBackend() { use_half_row_converters(half_row_converters()); }
  void fill(const Tensor& out, double value) override;
  void arange(const Tensor& out, double start, double step) override;
  void random(const Tensor& out, RandomKind kind, double a, double b, std::uint64_t seed,
              std::uint64_t offset) override;
  void random_int(const Tensor& out, std::int64_t low, std::uint64_t span, std::uint64_t seed,
                  std::uint64_t offset) override;
  void index_select(const Tensor& x, int dim, const Tensor& index,
                    const Tensor& out) override;  // cpu_index.cpp
  void index_add(const Tensor& target, int dim, const Tensor& index, const Tensor& source) override;
  void unary(UnaryOp op, const Tensor& in, const Tensor& out) override;
  void unary_backward(UnaryOp op, const Tensor& grad, const Tensor& saved,
                      const Tensor& grad_in) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override;
  bool dense_half_elementwise() const override { return true; }  // Note [Half elementwise]
  bool half_reduce() const override { return true; }             // Note [Half reductions]
  void binary_scalar(BinaryOp op, const Tensor& a, double scalar, bool scalar_first,
                     const Tensor& out) override;
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void reduce(ReduceOp op, const Tensor& in, std::uint32_t dim_mask, const Tensor& out) override;
  void matmul(const Tensor& a, const Tensor& b, const Tensor& out) override;
  bool matmul_takes_half(Dtype dtype) const override;  // cpu_matmul.cpp
  bool conv2d_takes_half(Dtype dtype, const Shape& x, const Shape& weight,
                         const Window2d& w) const override;  // conv/cpu_conv.cpp
  void softmax(const Tensor& in, int dim, bool log, const Tensor& out) override;
  bool half_softmax() const override { return true; }  // Note [Half softmax]
  void cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& losses,
                     const Tensor& probs) override;  // cpu_loss.cpp
  void cross_entropy_backward(const Tensor& probs, const Tensor& targets, const Tensor& grad_losses,
                              double divisor, const Tensor& grad_logits) override;
  void conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
              const Window2d& w) override;  // conv/cpu_conv.cpp
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
              const Window2d& w) override;  // cpu_pool.cpp
  void pool2d_backward(PoolKind kind, const Tensor& grad_out, const Tensor& indices,
                       const Tensor& grad_x, const Window2d& w) override;
  void sgd_steps(std::span<const SgdStep> steps, const SgdParams& p) override;  // cpu_optim.cpp
  void adam_steps(std::span<const AdamStep> steps) override;
  void unscale_grad(const Tensor& grad, const Tensor& inv_scale, const Tensor& found_inf) override;
  void collective(const CollectiveCall& call) override;  // cpu_collectives.cpp
};

// A new CpuBackend of this level (cpu_kernel_variant.cpp).
CpuBackendBase* make_cpu_backend();

}  // namespace tessera::detail::TESSERA_CPU_ISA
