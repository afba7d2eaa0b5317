#include "ops/broadcast.h"

#include "backend/backend.h"
#include "core/check.h"
#include "core/tensor_impl.h"

namespace tessera::detail {

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  const int n = a.size() > b.size() ? a.size() : b.size();
  Shape out;
  out.resize(n);
  for (int i = 0; i < n; ++i) {
    const int ia = i - (n - a.size()), ib = i - (n - b.size());
    const std::int64_t sa = ia >= 0 ? a[ia] : 1, sb = ib >= 0 ? b[ib] : 1;
    TESSERA_CHECK(sa == sb || sa == 1 || sb == 1, ShapeError,
                  "[{}] shapes {} and {} cannot be broadcast: dim {} has sizes {} and {} (sizes "
                  "must match or be 1)",
                  op, a.str(), b.str(), i - n, sa, sb);
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

Tensor prepare_operand(const Tensor& t, Dtype dtype, const Shape& shape) {
  Tensor out = t.dtype() == dtype ? t : t.to(dtype);
  return out.shape() == shape ? out : out.expand(shape);
}

bool writable(const Tensor& t) {
  const TensorImpl& impl = impl_of(t);
  for (int d = 0; d < impl.shape.size(); ++d) {
    if (impl.strides[d] == 0 && impl.shape[d] > 1) return false;
  }
  return true;
}

void check_writable(const Tensor& t, const char* op) {
  const TensorImpl& impl = impl_of(t);
  TESSERA_CHECK(writable(t), Error,
                "[{}] cannot write in place to an expanded tensor (shape {}, strides {}): "
                "several of its elements share one memory location. Call .clone() first",
                op, impl.shape.str(), impl.strides.str());
}

}  // namespace tessera::detail
