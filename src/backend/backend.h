#pragma once
// The one seam a device kind implements (CPU, CUDA). The front end (src/ops, src/core) has
// already checked devices, shapes and dtypes and allocated outputs, so a backend only
// moves bytes and runs kernels. Kernels may run asynchronously, in order per device; a
// backend keeps the tensors it was handed alive until its queued work is done.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/device.h"
#include "tessera/tensor.h"

namespace tessera::detail {

enum class FirstWriter : std::uint8_t;  // core/tensor_impl.h

// kGelu is x * Phi(x), kGeluTanh its tanh approximation, kSilu x * sigmoid(x).
enum class UnaryOp : std::uint8_t {
  kNeg,
  kExp,
  kLog,
  kSqrt,
  kAbs,
  kRelu,
  kSigmoid,
  kTanh,
  kGelu,
  kGeluTanh,
  kSilu,
};

enum class BinaryOp : std::uint8_t {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kPow,
  kMaximum,
  kMinimum,
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,  // comparisons write bool
};
constexpr bool is_comparison(BinaryOp op) { return op >= BinaryOp::kEq; }

// kSumSquares is sum(x * x) in one pass; kNorm is its square root (the 2-norm), also in one
// pass, so norm() is one kernel.
enum class ReduceOp : std::uint8_t {
  kSum,
  kMean,
  kMax,
  kMin,
  kArgMax,
  kArgMin,
  kSumSquares,
  kNorm
};

enum class RandomKind : std::uint8_t { kUniform, kNormal };

// Geometry of a 2-D convolution or pooling window over NCHW tensors (kernel sizes of a
// convolution come from its weight).
struct Window2d {
  int kernel_h = 1, kernel_w = 1;
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;
};

enum class PoolKind : std::uint8_t { kMax, kAvg };

// Scalars of batch normalization (Backend::batch_norm).
struct BatchNormParams {
  bool training = false;  // normalize by the batch's statistics (else the running ones)
  double momentum = 0;    // the batch's weight in the running statistics
  double eps = 0;
};

// Scalars of one fused SGD step (PyTorch's torch.optim.SGD); see Backend::sgd_step.
struct SgdParams {
  double lr = 0;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

// Scalars of one fused Adam/AdamW step. Bias corrections are computed on the host from the
// step count: step_size = lr / (1 - beta1^t), bias_correction2_sqrt = sqrt(1 - beta2^t);
// with a device step count (DeviceStepState::step), the kernel computes them from it.
struct AdamParams {
  double lr = 0;
  double beta1 = 0;
  double beta2 = 0;
  double eps = 0;
  double weight_decay = 0;
  bool decoupled = false;  // AdamW: param *= 1 - lr * weight_decay before the update
  double step_size = 0;
  double bias_correction2_sqrt = 1;
};

// The values of one optimizer step that live on the parameter's device, as 0-dim tensors
// there (each undefined when unused): the kernel reads them, so a step recorded in a graph
// replays as the next one (Optimizer::set_capturable) and a gradient scaler skips a step
// without the host reading anything (GradScaler).
struct DeviceStepState {
  Tensor found_inf;   // float32; nonzero: skip the step, writing nothing at all
  Tensor step;        // Adam: the float64 step count t, already counting this step
  Tensor first_step;  // SGD: float32; nonzero: the momentum buffer is unwritten (as first_step)
};

// One parameter's part of an optimizer step (Backend::sgd_steps, adam_steps).
struct SgdStep {
  Tensor param, grad;
  Tensor momentum_buf;      // undefined when SgdParams::momentum == 0
  DeviceStepState device;   // the step's device-side values
  bool first_step = false;  // the momentum buffer is uninitialized: it becomes the gradient
};
struct AdamStep {
  Tensor param, grad, exp_avg, exp_avg_sq;
  DeviceStepState device;
  AdamParams p;  // the bias corrections follow this parameter's own step count
};

enum class CollectiveKind : std::uint8_t { kAllReduce, kBroadcast, kAllGather, kReduceScatter };
// "all_reduce", "broadcast", "all_gather", "reduce_scatter": the op's name in messages.
const char* collective_name(CollectiveKind kind);

// One collective over one tensor per device (collectives.h). The front end has checked that
// the devices are distinct devices of this backend, and that every tensor is contiguous, of
// one dtype and of the shapes the kind needs:
//   kAllReduce      outputs[i] = sum (or mean) over j of inputs[j]; same shape; may alias
//   kBroadcast      outputs[i] = inputs[root]; same shape; may alias
//   kAllGather      outputs[i] = concat over j of inputs[j] along dim 0 (k times the rows)
//   kReduceScatter  outputs[i] = rows [i*r, (i+1)*r) of sum over j of inputs[j]
struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  std::vector<Tensor> inputs, outputs;  // one per device, in group order
  bool mean = false;                    // reduce kinds: divide the sum by the group size
  int root = 0;                         // kBroadcast: the index into inputs
};

// One collective across the processes of a process group (process_group.h) over this
// process's one tensor. The front end has checked that the tensor is contiguous, on a device
// of this backend, and of one dtype and shape on every rank, and allocated the output:
//   kAllReduce  output = sum (or mean) over the ranks of input; may alias input
//   kBroadcast  output = rank root's input; aliases input
//   kAllGather  output = concat over the ranks of input along dim 0 (size times the rows)
struct ProcessCollectiveCall {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  Tensor input, output;
  bool mean = false;  // kAllReduce: divide the sum by size
  int root = 0;       // kBroadcast: the rank whose input every rank gets
  int rank = 0;       // this process's rank in the world
  int size = 1;       // the world's size
};

struct DeviceInfo {
  std::string name;  // "AMD EPYC", "NVIDIA H100 80GB HBM3"
  std::size_t total_memory = 0;
  int cores = 0;           // CPU cores or GPU multiprocessors
  std::string details;     // free-form extra lines for `tessera info`
  std::string kernel_isa;  // the CPU kernels' instruction-set level (Note [CPU kernel variants])
};

// Work recorded once (a CUDA graph, or a CPU device's kernels) that can be queued again and
// again; see graph.h.
class CapturedWork {
 public:
  virtual ~CapturedWork() = default;
  // Queues one run on each recorded device's current stream (or queue) for this thread. No
  // host wait.
  virtual void replay() = 0;
  virtual std::size_t node_count() const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceKind kind() const = 0;
  virtual int device_count() const = 0;
  // Why no (or no more) device of this kind is visible; "" when nothing is missing.
  virtual std::string unavailable_reason() const = 0;
  virtual DeviceInfo info(int index) const = 0;

  // Memory. allocate returns nullptr when the device has no memory left (the front end
  // turns that into OutOfMemoryError after emptying the cache once). `first`: who writes the
  // memory first (a GPU's memory is only ever written by its streams, so GPUs ignore it).
  virtual void* allocate(int index, std::size_t bytes, FirstWriter first) = 0;
  virtual void deallocate(int index, void* ptr, std::size_t bytes) = 0;
  virtual std::size_t reserved(int index) const = 0;
  virtual void empty_cache(int index) = 0;
  // Extra facts for an out-of-memory message (cache, driver free/total); "" when none.
  virtual std::string memory_report(int /*index*/) const { return ""; }
  // Page-locked host memory for pinned CPU tensors; nullptr when the backend has none.
  // deallocate_pinned hands the block out again only once `still_read` (when set) says no
  // queued work reads it any more (queued_readers, of the tensor's CPU device).
  using StillRead = std::function<bool()>;
  virtual void* allocate_pinned(std::size_t /*bytes*/) { return nullptr; }
  virtual void deallocate_pinned(void* /*ptr*/, std::size_t /*bytes*/, StillRead /*still_read*/) {}
  // True until the work queued on device `index` so far has run: that work reads memory
  // through handles that do not keep it (Note [Memory freed in queue order]), so memory
  // freed outside the device's allocator (a pinned block) waits for it. Empty where no queued
  // work can read memory freed now (no work queues, or all of them done).
  virtual StillRead queued_readers(int /*index*/) { return {}; }

  // Host <-> device bytes for contiguous tensors. copy_from_host finishes reading `src`
  // before it returns; copy_to_host waits for the device.
  virtual void copy_from_host(const void* src, const Tensor& dst) = 0;
  virtual void copy_to_host(const Tensor& src, void* dst) = 0;
  // Same shape, any strides and dtypes; src and dst on devices of this backend (they may
  // be two devices: the backend orders both devices' queues).
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;
  // From a contiguous CPU tensor of dst's dtype (its CPU device already synchronized) into a
  // contiguous dst on this backend. A backend may copy asynchronously from pinned memory;
  // it then keeps src alive until the copy is done. The CPU backend is handed only sources
  // the host alone wrote and will not write again (SourceWriters::kHostOnly), and reads them
  // on dst's queue.
  virtual void copy_from_cpu(const Tensor& src, const Tensor& dst);
  // Runs fill(outputs), host code that writes only `outputs`, fresh tensors of device
  // `index` (nothing queued reads them yet), in the order of the work this thread queues on
  // the device: on the queue of its current stream, or now when that stream has none. A
  // queued fill gets handles that do not keep the outputs' memory (Note [Memory freed in
  // queue order]). Only a backend whose memory the host writes runs it (fills_from_host());
  // the base class throws.
  using HostFill = std::function<void(const std::vector<Tensor>& outputs)>;
  virtual bool fills_from_host() const { return false; }
  virtual void fill_from_host(int index, std::vector<Tensor> outputs, HostFill fill);
  // Waits for all work queued on the device, on every stream.
  virtual void synchronize(int index) = 0;

  // Streams beyond the default one (stream.h). A backend with one queue per device keeps
  // these defaults: no extra stream exists, and the front end never enters one.
  virtual int extra_streams() const { return 0; }
  // This thread's work for `index` goes to stream `id` (0 = default) from now on; `previous`
  // is the id it leaves. Entering a side stream orders it after the default stream's queued
  // work; leaving it makes the default stream's later work wait for it. No host wait.
  virtual void enter_stream(int /*index*/, int /*id*/, int /*previous*/) {}
  virtual void leave_stream(int /*index*/, int /*id*/, int /*previous*/) {}
  virtual int current_stream(int /*index*/) const { return 0; }
  virtual void synchronize_stream(int index, int /*id*/) { synchronize(index); }
  // Work queued on stream `waiter` from now on waits for everything queued on `waited` so far
  // (for the default stream: with the side streams it has joined). No host wait, except where
  // the waiter is a default stream run by the calling thread.
  virtual void order_stream_after(int /*index*/, int /*waiter*/, int /*waited*/) {}

  // Graph capture (graph.h). begin_capture starts recording the work this thread queues on
  // the default streams of the devices `indices` (distinct devices of this backend, at most
  // max_capture_devices() of them); end_capture stops and returns it as one replayable piece
  // (or throws if the recording broke); abort_capture drops it after an error.
  // max_capture_devices() is 0 for a backend that cannot record.
  virtual int max_capture_devices() const { return 0; }
  virtual void begin_capture(const std::vector<int>& /*indices*/) {}
  virtual std::unique_ptr<CapturedWork> end_capture(const std::vector<int>& /*indices*/) {
    return nullptr;
  }
  virtual void abort_capture(const std::vector<int>& /*indices*/) {}
  // Whether the device records what the calling thread issues: a capture is in progress
  // on it (on the CPU: begun by this thread; other threads' work runs as usual).
  virtual bool capturing(int /*index*/) const { return false; }
  // Whether any thread is capturing on the device (captures do not nest).
  virtual bool capturing_on_any_thread(int index) const { return capturing(index); }

  // Kernels. Inputs of elementwise kernels are already broadcast (expanded) to out's shape
  // and converted to the compute dtype; out is freshly allocated or an in-place target.
  virtual void fill(const Tensor& out, double value) = 0;
  virtual void arange(const Tensor& out, double start, double step) = 0;
  virtual void random(const Tensor& out, RandomKind kind, double a, double b, std::uint64_t seed,
                      std::uint64_t offset) = 0;
  // out (contiguous int64) gets low + (64 random bits of counter offset + i) mod span, the
  // same values on every backend (philox.h: uniform_int). span >= 1.
  virtual void random_int(const Tensor& out, std::int64_t low, std::uint64_t span,
                          std::uint64_t seed, std::uint64_t offset) = 0;
  virtual void unary(UnaryOp op, const Tensor& in, const Tensor& out) = 0;
  // grad_in = the gradient of an activation (kRelu, kSigmoid, kTanh, kGelu, kGeluTanh, kSilu)
  // in one pass, from the gradient of its output and `saved` (the op's output for kSigmoid
  // and kTanh, its input otherwise).
  // Contiguous, of one floating dtype and shape.
  virtual void unary_backward(UnaryOp op, const Tensor& grad, const Tensor& saved,
                              const Tensor& grad_in) = 0;
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // a (op) scalar, or scalar (op) a when scalar_first.
  virtual void binary_scalar(BinaryOp op, const Tensor& a, double scalar, bool scalar_first,
                             const Tensor& out) = 0;
  virtual void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // Whether unary, unary_backward, binary (not comparisons) and binary_scalar (not
  // comparisons) take contiguous operands and output of one half dtype and shape as they are
  // (binary: operands of out's shape with any strides, broadcast ones expanded), computing
  // each value as the float32 kernel does and rounding it once: bit for bit the float32
  // copies' result, which the front end makes otherwise (Note [Half precision]).
  virtual bool dense_half_elementwise() const { return false; }
  // Reduces `in` over the dims set in `dim_mask`; out has in's rank with those dims size 1.
  // kArgMax/kArgMin reduce exactly one dim and write int64; kSum of bool or integer input
  // writes int64; the others write in's dtype. in may be any strided view.
  virtual void reduce(ReduceOp op, const Tensor& in, std::uint32_t dim_mask, const Tensor& out) = 0;
  // Whether reduce takes a bfloat16 or float16 `in` as it is, reading each element as its
  // float32 value and writing what the float32 reduction of those values writes (float32, or
  // int64 for kArgMax/kArgMin); otherwise the front end hands it a float32 copy (Note [Half
  // precision]).
  virtual bool half_reduce() const { return false; }
  // Batched: a [B, M, K], b [B, K, N], out [B, M, N] contiguous; a and b may be transposed
  // views in their last two dims.
  virtual void matmul(const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // Whether matmul takes a and b of half dtype `dtype` as they are, summing exact products in
  // float32 and rounding once into an out of that dtype, or not at all into a float32 out
  // (a layer that adds a bias before its one rounding: detail::half_product_float32);
  // otherwise the front end hands it float32 copies (Note [Half precision]). Must not change
  // while the process runs.
  virtual bool matmul_takes_half(Dtype /*dtype*/) const { return false; }
  // Softmax (or log-softmax) along `dim` of a contiguous tensor.
  virtual void softmax(const Tensor& in, int dim, bool log, const Tensor& out) = 0;
  // Whether softmax takes a bfloat16 or float16 in and out as they are, computing each value
  // as the float32 kernel does on the converted input and rounding it once; otherwise the
  // front end hands it a float32 copy (Note [Half precision]).
  virtual bool half_softmax() const { return false; }
  // Cross-entropy of contiguous logits [N, C] against int64 class indices [N], fused with a
  // stable log-softmax: losses[i] = logsumexp(logits[i]) - logits[i, targets[i]], and probs
  // (contiguous [N, C], logits' dtype) gets softmax(logits) for the backward pass. A target
  // outside [0, C) gives a NaN loss (found without a host wait; the front end documents it).
  virtual void cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& losses,
                             const Tensor& probs) = 0;
  // grad_logits[i, c] = (probs[i, c] - (c == targets[i])) * (grad_losses[i] / divisor), the
  // quotient in the probs' dtype: divisor N for a mean over the batch, else 1. grad_losses
  // [N], of probs' dtype, may have any stride, 0 included (a mean's or a sum's gradient is
  // one value for every sample); the others are contiguous.
  virtual void cross_entropy_backward(const Tensor& probs, const Tensor& targets,
                                      const Tensor& grad_losses, double divisor,
                                      const Tensor& grad_logits) = 0;

  // Batch normalization of contiguous x seen as [N, C, S] (S: the product of the dims after
  // dim 1) into y (contiguous, like x), float32 or float64; every other tensor is [C],
  // contiguous, of x's dtype, or undefined where allowed. Training: the mean and the biased
  // variance of each channel's N x S values go to save_mean and, as 1 / sqrt(var + eps), to
  // save_invstd; defined running_mean and running_var move toward them in place,
  // r = (1 - momentum) r + momentum stat, the variance unbiased (M / (M - 1), M = N S).
  // Evaluation: save_mean = running_mean, save_invstd = 1 / sqrt(running_var + eps). Then
  // y = (x - save_mean) save_invstd weight + bias (weight 1, bias 0 when undefined). N S > 0.
  virtual void batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                          const Tensor& running_mean, const Tensor& running_var, const Tensor& y,
                          const Tensor& save_mean, const Tensor& save_invstd,
                          const BatchNormParams& p) = 0;
  // Its gradients from grad_y (contiguous, like x), each written only when defined: grad_x
  // (like x), grad_weight and grad_bias [C]. With xhat = (x - save_mean) save_invstd:
  // grad_bias = sum grad_y, grad_weight = sum grad_y xhat (over each channel's N x S), and
  // grad_x = weight save_invstd (grad_y - (grad_bias + xhat grad_weight) / M) in training,
  // weight save_invstd grad_y in evaluation. weight may be undefined (1).
  virtual void batch_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_y,
                                   const Tensor& save_mean, const Tensor& save_invstd,
                                   bool training, const Tensor& grad_x, const Tensor& grad_weight,
                                   const Tensor& grad_bias) = 0;

  // Layer normalization of contiguous x seen as [R, D] (D: the product of the normalized
  // dims) into y (contiguous, like x), float32 or float64; weight and bias [D] (or
  // undefined: 1 and 0), save_mean and save_invstd [R], all contiguous and of x's dtype. Per
  // row: its mean and biased variance, save_invstd = 1 / sqrt(var + eps), and
  // y = (x - mean) invstd weight + bias. R D > 0.
  virtual void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                          const Tensor& y, const Tensor& save_mean, const Tensor& save_invstd) = 0;
  // Its gradients from grad_y (contiguous, like x), each written only when defined: with
  // xhat = (x - mean) invstd and h = grad_y weight, grad_x = invstd (h - mean(h) - xhat
  // mean(h xhat)) over each row; grad_weight = the sum over rows of grad_y xhat, grad_bias
  // the sum over rows of grad_y ([D]).
  virtual void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_y,
                                   const Tensor& save_mean, const Tensor& save_invstd,
                                   const Tensor& grad_x, const Tensor& grad_weight,
                                   const Tensor& grad_bias) = 0;

  // Indexing along `dim` (Note [Indices checked by the kernel] in backend/indexing.h: an
  // index outside [0, size of dim) is found and reported by the kernel, never read past).
  // index is contiguous int64 [k] with k > 0. index_select: out's slice i along dim = x's
  // slice index[i]; x and out contiguous, of one dtype, any (halves too: rows are moved as
  // bytes). index_add: target's slice index[i] += source's slice i, in place, in the order of
  // i for each element (so the same on every run); target and source contiguous, of one
  // dtype that is not a half type (bool adds as logical or).
  virtual void index_select(const Tensor& x, int dim, const Tensor& index, const Tensor& out) = 0;
  virtual void index_add(const Tensor& target, int dim, const Tensor& index,
                         const Tensor& source) = 0;

  // 2-D convolution (cross-correlation, like PyTorch) of contiguous NCHW x [N, C, H, W] with
  // weight [O, C, kH, kW] into out [N, O, OH, OW]; bias [O] or undefined.
  virtual void conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
                      const Window2d& w) = 0;
  // Whether conv2d takes x, weight, bias and out of half dtype `dtype` as they are (for these
  // shapes), summing exact products in float32 and rounding once; otherwise the front end
  // hands it float32 copies (Note [Half precision]). Where it takes them, conv2d_backward gets
  // the same half tensors and half gradients, and rounds each gradient once.
  virtual bool conv2d_takes_half(Dtype /*dtype*/, const Shape& /*x*/, const Shape& /*weight*/,
                                 const Window2d& /*w*/) const {
    return false;
  }
  // Its gradients from grad_out [N, O, OH, OW], each written only when defined: grad_x like
  // x, grad_weight like weight, grad_bias [O]. All contiguous, one floating dtype.
  virtual void conv2d_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_out,
                               const Tensor& grad_x, const Tensor& grad_weight,
                               const Tensor& grad_bias, const Window2d& w) = 0;
  // Max or average pooling of contiguous x [N, C, H, W] into out [N, C, OH, OW]. Max pooling
  // treats padding as -inf and writes each window's argmax (the flat index into its H x W
  // plane, int64) to indices; average pooling divides by kernel_h * kernel_w, padding
  // included (PyTorch's count_include_pad), and gets an undefined indices.
  virtual void pool2d(PoolKind kind, const Tensor& x, const Tensor& out, const Tensor& indices,
                      const Window2d& w) = 0;
  // grad_x (overwritten, contiguous like x) from grad_out; indices as pool2d wrote them.
  virtual void pool2d_backward(PoolKind kind, const Tensor& grad_out, const Tensor& indices,
                               const Tensor& grad_x, const Window2d& w) = 0;

  // Optimizer steps of several parameters, updating each in place as one fused kernel per
  // parameter would, in order; queued as one task (CPU) or a few kernels (GPU) for all of
  // them, as PyTorch's multi-tensor ("foreach") steps are, so that a recorded training step
  // holds one optimizer node, not one per parameter. Every tensor is contiguous, on one
  // device of this backend, and of one floating dtype, the same for all the steps; each
  // step's state has its parameter's shape.
  virtual void sgd_steps(std::span<const SgdStep> steps, const SgdParams& p) = 0;
  virtual void adam_steps(std::span<const AdamStep> steps) = 0;
  // grad *= inv_scale (a float32 0-dim tensor) in place, and found_inf (float32 0-dim) = 1
  // when any element of grad was infinite or NaN (else found_inf is left as it is): one
  // pass, no host wait. grad is contiguous float32 or float64; all on one device.
  virtual void unscale_grad(const Tensor& grad, const Tensor& inv_scale,
                            const Tensor& found_inf) = 0;

  // Collectives across devices of this backend (see CollectiveCall), queued on each device's
  // current stream or queue in group order; never a host wait. Every device's later work
  // sees the results. The default says the backend has none (a user error: DeviceError).
  virtual void collective(const CollectiveCall& call);
  // A collective across processes (see ProcessCollectiveCall), queued on the device's
  // current stream or queue like a kernel; never a host wait for the device (the transport
  // may wait for the other ranks there). The default says the backend has none (DeviceError).
  virtual void process_collective(const ProcessCollectiveCall& call);
};

// The registered backend of a kind, or nullptr when tessera was built without it.
Backend* backend_for(DeviceKind kind);
// Backend of a device that the caller has checked exists.
Backend& backend_of(Device device);

// Defined by the CPU backend and by the CUDA backend (or its no_cuda stub).
Backend& cpu_backend();
Backend* cuda_backend();

}  // namespace tessera::detail
