// eye, diag and trace, composed from ops that exist (arange, comparisons, where, views), so
// they run on every device and differentiate without kernels of their own. Neither diag
// multiplies by an identity matrix: inf * 0 would put NaN where the other values are.
#include <algorithm>

#include <fmt/format.h>

#include "core/check.h"
#include "core/device_registry.h"
#include "core/tensor_impl.h"
#include "tessera/device_scope.h"
#include "tessera/factories.h"
#include "tessera/ops.h"

namespace tessera {

Tensor eye(std::int64_t n, std::int64_t m, TensorOptions options) {
  TESSERA_CHECK(n >= 0, Error, "[eye] the number of rows must not be negative, got {}", n);
  TESSERA_CHECK(m >= -1, Error,
                "[eye] the number of columns must not be negative, got {} (leave it out, or "
                "pass -1, for a square matrix)",
                m);
  if (m == -1) m = n;
  const Device device = options.device.value_or(default_device());
  const Dtype dtype = options.dtype.value_or(kFloat32);
  detail::check_device(device, "eye");
  // Zeros, then ones along the diagonal (every (m + 1)-th value): the n x m bool matrix of a
  // comparison cost as much again, and its errors named the comparison.
  Tensor out = detail::make_tensor(Shape{n, m}, dtype, device, "eye");
  out.fill_(0.0);
  const std::int64_t k = std::min(n, m);
  if (k > 0) out.reshape({n * m}).slice(0, 0, (k - 1) * (m + 1) + 1, m + 1).fill_(1.0);
  return out;
}

Tensor diag(const Tensor& a) {
  detail::check_defined(a, "diag");
  TESSERA_CHECK(a.dim() == 1 || a.dim() == 2, ShapeError,
                "[diag] needs a 1-D tensor (to make a diagonal matrix) or a 2-D tensor (to take "
                "its diagonal), got shape {}",
                a.shape().str());
  if (a.dim() == 1) {
    // Each value followed by n zeros, [n, n + 1] flattened: a_k lands at k (n + 1), which is
    // row k, column k of the first n * n values. One matrix of memory; an n x n bool mask
    // and two index vectors took 1.25 times that, and its errors named the comparison.
    const std::int64_t n = a.size(0);
    try {
      const Tensor first_column = eq(arange(n + 1, {kInt64, a.device()}), 0).unsqueeze(0);
      const Tensor padded = where(first_column, a.unsqueeze(1), zeros({}, {a.dtype(), a.device()}));
      return padded.reshape({n * (n + 1)}).narrow(0, 0, n * n).reshape({n, n});
    } catch (const OutOfMemoryError& e) {
      throw OutOfMemoryError(
          fmt::format("[diag] the {} x {} matrix of a {}-value vector: {}", n, n, n, e.what()));
    }
  }
  // The diagonal of the leading k x k block is every (k + 1)-th of its k * k values.
  const std::int64_t k = std::min(a.size(0), a.size(1));
  const Tensor square = a.narrow(0, 0, k).narrow(1, 0, k);
  return square.reshape({k * k}).slice(0, 0, k * k, k + 1).clone();
}

Tensor trace(const Tensor& a) {
  detail::check_defined(a, "trace");
  TESSERA_CHECK(a.dim() == 2, ShapeError, "[trace] needs a 2-D tensor, got shape {}",
                a.shape().str());
  return sum(diag(a));
}

}  // namespace tessera
