// eye, diag and trace, composed from ops that exist (arange, comparisons, products, sums),
// so they run on every device and differentiate without kernels of their own. diag reads
// min(n, m)^2 elements rather than min(n, m): a convenience, not a hot path.
#include <algorithm>

#include "core/check.h"
#include "core/tensor_impl.h"
#include "tessera/device_scope.h"
#include "tessera/factories.h"
#include "tessera/ops.h"

namespace tessera {

Tensor eye(std::int64_t n, std::int64_t m, TensorOptions options) {
  if (m < 0) m = n;
  TESSERA_CHECK(n >= 0, Error, "[eye] the number of rows must not be negative, got {}", n);
  const Device device = options.device.value_or(default_device());
  const Dtype dtype = options.dtype.value_or(kFloat32);
  const Tensor rows = arange(static_cast<double>(n), {kInt64, device}).unsqueeze(1);
  const Tensor cols = arange(static_cast<double>(m), {kInt64, device}).unsqueeze(0);
  return eq(rows, cols).to(dtype);
}

Tensor diag(const Tensor& a) {
  detail::check_defined(a, "diag");
  TESSERA_CHECK(a.dim() == 1 || a.dim() == 2, ShapeError,
                "[diag] needs a 1-D tensor (to make a diagonal matrix) or a 2-D tensor (to take "
                "its diagonal), got shape {}",
                a.shape().str());
  if (a.dim() == 1) {
    // Row i of eye(n) * a is a's i-th value at column i, zeros elsewhere.
    return mul(eye(a.size(0), -1, {a.dtype(), a.device()}), a.unsqueeze(0));
  }
  const std::int64_t k = std::min(a.size(0), a.size(1));
  const Tensor square = a.narrow(0, 0, k).narrow(1, 0, k);
  return sum(mul(square, eye(k, -1, {a.dtype(), a.device()})), {1});
}

Tensor trace(const Tensor& a) {
  detail::check_defined(a, "trace");
  TESSERA_CHECK(a.dim() == 2, ShapeError, "[trace] needs a 2-D tensor, got shape {}",
                a.shape().str());
  return sum(diag(a));
}

}  // namespace tessera
