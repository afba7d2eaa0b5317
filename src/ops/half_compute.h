#pragma once
// How the op front ends compute bfloat16 and float16. See Note [Half precision].
#include "backend/backend.h"
#include "tessera/autocast.h"
#include "tessera/tensor.h"

// Note [Half precision]
// bfloat16 and float16 are storage types. An op whose compute dtype is a half type runs its
// float32 kernel on float32 copies of the operands and rounds the result to the half type
// once (round to nearest even), so it computes and accumulates in float32 on every backend,
// and the only kernels that know the half types are the copies (CPU copy_kernel, CUDA
// launch_copy). The widening happens inside the op under NoGradGuard; the op records
// itself with its half inputs and output, so autograd sees one op and its gradients come
// back in the half types. It costs a float32 temporary per operand: on a GPU, a fused half
// kernel would not. On the CPU, elementwise ops (unary, activation backward, binary and
// scalar arithmetic) on dense operands of one half dtype skip the copies: the kernel
// converts blocks of 2048 values on the stack instead, with the same results
// (Backend::dense_half_elementwise; Note [Half elementwise] in cpu_elementwise.cpp).

namespace tessera::detail {

// t in float32 (t itself when it already is). Call it under NoGradGuard.
inline Tensor to_float32(const Tensor& t) { return t.dtype() == kFloat32 ? t : t.to(kFloat32); }

// The dtype autocast runs matmul and conv2d in on t's device kind when it applies to t:
// autocast is on there and t is float32 or a half type (float64 is never cast).
inline std::optional<Dtype> autocast_for(const Tensor& t) {
  const std::optional<Dtype> d = autocast_dtype(t.device().kind());
  if (!d || !(t.dtype() == kFloat32 || is_half(t.dtype()))) return std::nullopt;
  return d;
}

// Whether autocast keeps an op on half t in float32 (softmax, losses, reductions).
inline bool autocast_keeps_float32(const Tensor& t) {
  return is_half(t.dtype()) && autocast_dtype(t.device().kind()).has_value();
}

// Writes `value` into `dst` in place, converting to dst's dtype; both on dst's device.
inline void store_converted(const Tensor& value, const Tensor& dst) {
  backend_of(dst.device()).copy(value, dst);
}

}  // namespace tessera::detail
