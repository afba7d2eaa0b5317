// The CUDA backend's kernel entry points: each passes the tensors to its launcher on the
// device's stream (kernels.h). Nothing here waits.
#include "backend/cuda/cuda_backend.h"
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
}

void CudaBackend::index_add(const Tensor& target, int dim, const Tensor& index,
                            const Tensor& source) {
  const int d = target.device().index();
  const IndexGeometry g = index_geometry(target, dim);
  const cudaStream_t stream = activate(d);
  cuda::launch_index_add(stream, kernel_arg(target), kernel_arg(index), kernel_arg(source), g.outer,
                         g.n, g.inner, dim, device(d).index_fault);
}

void CudaBackend::report_index_fault(int index) {
  cuda::IndexFault* fault = devices_[index].index_fault;
  // Read after the wait for the kernels that may have written it (the caller's).
  if (fault == nullptr || __atomic_load_n(&fault->claimed, __ATOMIC_ACQUIRE) == 0) [[likely]] {
    return;
  }
  const cuda::IndexFault seen = *fault;
  __atomic_store_n(&fault->claimed, 0u, __ATOMIC_RELEASE);
  throw_index_out_of_range(static_cast<IndexOp>(seen.op), seen.value, seen.position, seen.dim,
                           seen.size);
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
                                         const Tensor& grad_losses, const Tensor& grad_logits) {
  cuda::launch_cross_entropy_backward(activate(probs.device().index()), kernel_arg(probs),
                                      kernel_arg(targets), kernel_arg(grad_losses),
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
  cuda::launch_layer_norm_backward(
      activate(x.device().index()), kernel_arg(x), data_or_null(weight), kernel_arg(grad_y),
      data_or_null(save_mean), data_or_null(save_invstd), save_mean.numel(), data_or_null(grad_x),
      data_or_null(grad_weight), data_or_null(grad_bias));
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
