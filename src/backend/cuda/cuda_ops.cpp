// The CUDA backend's kernel entry points: each passes the tensors to its launcher on the
// device's stream (kernels.h). Nothing here waits.
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/indexing.h"
#include "core/tensor_impl.h"

namespace tessera::detail {

void CudaBackend::fill(const Tensor& out, double value) {
  cuda::launch_fill(activate(out.device().index()), kernel_arg(out), value);
}

void CudaBackend::arange(const Tensor& out, double start, double step) {
  cuda::launch_arange(activate(out.device().index()), kernel_arg(out), start, step);
}

void CudaBackend::random(const Tensor& out, RandomKind kind, double a, double b, std::uint64_t seed,
                         std::uint64_t offset) {
  cuda::launch_random(activate(out.device().index()), kernel_arg(out), kind, a, b, seed, offset);
}

void CudaBackend::random_int(const Tensor& out, std::int64_t low, std::uint64_t span,
                             std::uint64_t seed, std::uint64_t offset) {
  cuda::launch_random_int(activate(out.device().index()), kernel_arg(out), low, span, seed, offset);
}

void CudaBackend::index_select(const Tensor& x, int dim, const Tensor& index, const Tensor& out) {
  const int d = out.device().index();
  const IndexGeometry g = index_geometry(x, dim);
  const cudaStream_t stream = activate(d);
  cuda::launch_index_select(stream, kernel_arg(x), kernel_arg(index), kernel_arg(out), g.outer, g.n,
                            g.inner, dim, device(d).index_fault);
  if (cuda::launch_blocking() && !capturing(d)) report_index_fault(d);  // blamed on this op
}

void CudaBackend::index_add(const Tensor& target, int dim, const Tensor& index,
                            const Tensor& source) {
  const int d = target.device().index();
  const IndexGeometry g = index_geometry(target, dim);
  const cudaStream_t stream = activate(d);
  // The sorted path's scratch, freed in stream order once the kernels that use it have run.
  const std::size_t bytes = cuda::index_add_scratch_bytes(index.numel(), g.outer * g.inner);
  const Tensor scratch = bytes == 0 ? Tensor()
                                    : make_tensor({static_cast<std::int64_t>(bytes)}, kUInt8,
                                                  target.device(), "index_add");
  cuda::launch_index_add(stream, kernel_arg(target), kernel_arg(index), kernel_arg(source), g.outer,
                         g.n, g.inner, dim, device(d).index_fault,
                         scratch.defined() ? impl_of(scratch).data() : nullptr);
  if (cuda::launch_blocking() && !capturing(d)) report_index_fault(d);  // blamed on this op
}

// Note [Faults follow the data]
// A GPU's index fault slot is written by its kernels, and the host looks at it after a wait
// (copy_to_host, synchronize, synchronize_stream; Note [Indices checked by the kernel]).
//  - A partial wait (one stream) can come while an index kernel still runs on another
//    stream of the GPU, or another thread's; index_add's threads each meet a bad index, so a
//    slot cleared then would be written again and the one fault reported twice. So a fault
//    is taken only after every stream of its GPU has finished (an error path: the waits cost
//    nothing otherwise), and one host thread takes it (an atomic exchange of `ready`).
//  - A result copied to another GPU, or reduced there by a collective, carries the fault of
//    the GPU it came from: the destination remembers its sources (fault_sources) and its
//    waits look at their slots too, as a logical CPU device's error follows the work (Note
//    [Errors follow the work] in backend/cpu/work_queue.cpp). The bits stay set: looking at
//    a slot is one load.
// While g records a graph its fault waits for the first wait after the capture.
// A kernel queued by another thread between the streams' waits and the clearing finds the
// slot claimed and records nothing (its result holds zeros for the bad index): a fault in a
// race with the report of another is not reported.
void CudaBackend::report_index_fault(int index) {
  std::uint64_t sources = devices_[index].fault_sources.load(std::memory_order_acquire);
  take_index_fault(index);
  for (int g = 0; sources != 0; ++g, sources >>= 1) {
    if ((sources & 1u) != 0 && g != index) take_index_fault(g);
  }
}

void CudaBackend::take_index_fault(int g) {
  cuda::IndexFault* fault = devices_[g].index_fault;
  if (fault == nullptr || __atomic_load_n(&fault->ready, __ATOMIC_ACQUIRE) == 0) [[likely]] {
    return;
  }
  // Not while g records a graph: a wait on a capturing stream would break the recording. The
  // fault stays in the slot for the first wait after the capture.
  if (capturing(g)) return;
  // (A stream is waited for whatever device is current: the caller's stays current.)
  for (const StreamSlot& slot : devices_[g].streams) {
    TESSERA_CUDA_CHECK(cudaStreamSynchronize(slot.stream));
  }
  if (__atomic_exchange_n(&fault->ready, 0u, __ATOMIC_ACQ_REL) == 0) return;  // another took it
  const cuda::IndexFault seen = *fault;
  __atomic_store_n(&fault->claimed, 0u, __ATOMIC_RELEASE);
  throw_index_out_of_range(static_cast<IndexOp>(seen.op), seen.value, seen.position, seen.dim,
                           seen.size);
}

void CudaBackend::note_data_from(int to, int from) {
  PerDevice& d = devices_[to];
  const std::uint64_t bits =
      (std::uint64_t{1} << from) | devices_[from].fault_sources.load(std::memory_order_acquire);
  d.fault_sources.fetch_or(bits & ~(std::uint64_t{1} << to), std::memory_order_release);
}

void CudaBackend::unary(UnaryOp op, const Tensor& in, const Tensor& out) {
  cuda::launch_unary(activate(out.device().index()), op, kernel_arg(in), kernel_arg(out));
}

void CudaBackend::unary_backward(UnaryOp op, const Tensor& grad, const Tensor& saved,
                                 const Tensor& grad_in) {
  cuda::launch_unary_backward(activate(grad_in.device().index()), op, kernel_arg(grad),
                              kernel_arg(saved), kernel_arg(grad_in));
}

void CudaBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  cuda::launch_binary(activate(out.device().index()), op, kernel_arg(a), kernel_arg(b),
                      kernel_arg(out));
}

void CudaBackend::binary_scalar(BinaryOp op, const Tensor& a, double scalar, bool scalar_first,
                                const Tensor& out) {
  cuda::launch_binary_scalar(activate(out.device().index()), op, kernel_arg(a), scalar,
                             scalar_first, kernel_arg(out));
}

void CudaBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  cuda::launch_where(activate(out.device().index()), kernel_arg(cond), kernel_arg(a), kernel_arg(b),
                     kernel_arg(out));
}

void CudaBackend::reduce(ReduceOp op, const Tensor& in, std::uint32_t dim_mask, const Tensor& out) {
  cuda::launch_reduce(activate(out.device().index()), op, kernel_arg(in), dim_mask,
                      kernel_arg(out));
}

void CudaBackend::softmax(const Tensor& in, int dim, bool log, const Tensor& out) {
  cuda::launch_softmax(activate(out.device().index()), kernel_arg(in), dim, log, kernel_arg(out));
}

void CudaBackend::cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& losses,
                                const Tensor& probs) {
  cuda::launch_cross_entropy(activate(logits.device().index()), kernel_arg(logits),
                             kernel_arg(targets), kernel_arg(losses), kernel_arg(probs));
}

void CudaBackend::cross_entropy_backward(const Tensor& probs, const Tensor& targets,
                                         const Tensor& grad_losses, double divisor,
                                         const Tensor& grad_logits) {
  cuda::launch_cross_entropy_backward(activate(probs.device().index()), kernel_arg(probs),
                                      kernel_arg(targets), kernel_arg(grad_losses), divisor,
                                      kernel_arg(grad_logits));
}

namespace {
void* data_or_null(const Tensor& t) { return t.defined() ? impl_of(t).data() : nullptr; }
}  // namespace

void CudaBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                             const Tensor& y, const Tensor& save_mean, const Tensor& save_invstd) {
  cuda::launch_layer_norm(activate(x.device().index()), kernel_arg(x), data_or_null(weight),
                          data_or_null(bias), eps, kernel_arg(y), data_or_null(save_mean),
                          data_or_null(save_invstd), save_mean.numel());
}

void CudaBackend::layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_y,
                                      const Tensor& save_mean, const Tensor& save_invstd,
                                      const Tensor& grad_x, const Tensor& grad_weight,
                                      const Tensor& grad_bias) {
  const std::int64_t rows = save_mean.numel();
  // The per-row-block partial sums of the parameters' gradients, freed in stream order once
  // the kernel that reads them has run.
  Tensor partials;
  if ((grad_weight.defined() || grad_bias.defined()) && rows > 0 && x.numel() > 0) {
    const std::int64_t d = x.numel() / rows;
    partials = make_tensor({2 * cuda::layer_norm_row_blocks(rows, d) * d}, kFloat64, x.device(),
                           "layer_norm_backward");
  }
  cuda::launch_layer_norm_backward(
      activate(x.device().index()), kernel_arg(x), data_or_null(weight), kernel_arg(grad_y),
      data_or_null(save_mean), data_or_null(save_invstd), rows, data_or_null(grad_x),
      data_or_null(grad_weight), data_or_null(grad_bias), data_or_null(partials));
}

void CudaBackend::batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                             const Tensor& running_mean, const Tensor& running_var, const Tensor& y,
                             const Tensor& save_mean, const Tensor& save_invstd,
                             const BatchNormParams& p) {
  cuda::launch_batch_norm(activate(x.device().index()), kernel_arg(x), data_or_null(weight),
                          data_or_null(bias), data_or_null(running_mean), data_or_null(running_var),
                          kernel_arg(y), data_or_null(save_mean), data_or_null(save_invstd), p);
}

void CudaBackend::batch_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_y,
                                      const Tensor& save_mean, const Tensor& save_invstd,
                                      bool training, const Tensor& grad_x,
                                      const Tensor& grad_weight, const Tensor& grad_bias) {
  // The per-channel sums, freed in stream order once the kernels that read them have run.
  const Tensor sums = make_tensor({2 * x.size(1)}, kFloat64, x.device(), "batch_norm_backward");
  cuda::launch_batch_norm_backward(
      activate(x.device().index()), kernel_arg(x), data_or_null(weight), kernel_arg(grad_y),
      data_or_null(save_mean), data_or_null(save_invstd), training, data_or_null(sums),
      data_or_null(grad_x), data_or_null(grad_weight), data_or_null(grad_bias));
}

}  // namespace tessera::detail
