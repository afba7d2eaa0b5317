// Front end of softmax and log_softmax: dtype and dim checks, then the backend kernel on a
// contiguous input.
#include "autograd/formulas.h"
#include "autograd/record.h"
#include "backend/backend.h"
#include "core/check.h"
#include "core/tensor_impl.h"
#include "ops/half_compute.h"
#include "tessera/autograd.h"
#include "tessera/ops.h"

namespace tessera {
namespace {

Tensor softmax_op(const char* name, const Tensor& a, int dim, bool log) {
  detail::check_defined(a, name);
  TESSERA_CHECK(
      is_floating(a.dtype()), DtypeError,
      "[{}] needs a floating tensor (float32, float64, bfloat16 or float16), got {}; convert "
      "it with "
      ".to(kFloat32) first",
      name, dtype_name(a.dtype()));
  const int r = a.dim();
  const int lo = r == 0 ? -1 : -r, hi = r == 0 ? 0 : r - 1;
  TESSERA_CHECK(dim >= lo && dim <= hi, ShapeError,
                "[{}] dim {} is out of range for a tensor of shape {} (expected {} to {})", name,
                dim, a.shape().str(), lo, hi);
  const int d = r == 0 ? 0 : (dim < 0 ? dim + r : dim);
  const bool direct_half = is_half(a.dtype()) && !detail::autocast_keeps_float32(a) &&
                           !detail::needs_grad(a) && detail::backend_of(a.device()).half_softmax();
  if (is_half(a.dtype()) && !direct_half) [[unlikely]] {
    // In float32 through recorded casts (Note [Half precision] in ops/half_compute.h), so that
    // the backward pass has the float32 result. Under autocast the result stays float32
    // (tessera/autocast.h).
    const Tensor out = softmax_op(name, a.to(kFloat32), d, log);
    return detail::autocast_keeps_float32(a) ? out : out.to(a.dtype());
  }
  Tensor out = detail::make_output(a.shape(), a.dtype(), a.device(), name);
  {
    NoGradGuard internal;  // the reshapes below are plumbing, not part of the graph
    // A 0-dim tensor is softmaxed as one element along a size-1 dim.
    const Tensor in = r == 0 ? a.reshape({1}) : a.contiguous();
    detail::backend_of(a.device()).softmax(in, d, log, r == 0 ? out.view({1}) : out);
  }
  if (detail::needs_grad(a)) detail::record_softmax(a, d, log, out);
  return out;
}

}  // namespace

Tensor softmax(const Tensor& a, int dim) { return softmax_op("softmax", a, dim, false); }
Tensor log_softmax(const Tensor& a, int dim) { return softmax_op("log_softmax", a, dim, true); }

}  // namespace tessera
