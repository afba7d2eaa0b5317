// Front end of matmul: numpy.matmul shapes lowered to the backend's batched [B, M, K] x
// [B, K, N] form without copying when the operands' layouts allow. See Note [Matmul operands].
#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "autograd/formulas.h"
#include "autograd/record.h"
#include "backend/backend.h"
#include "core/check.h"
#include "core/code_names.h"
#include "core/device_rules.h"
#include "core/tensor_impl.h"
#include "ops/broadcast.h"
#include "ops/half_compute.h"
#include "tessera/autograd.h"
#include "tessera/ops.h"

// Note [Matmul operands]
// BLAS reads a matrix either row-major (column stride 1) or transposed (row stride 1), with
// any leading dimension, so a.t() or a slice of columns costs nothing. Batch dims (after
// broadcasting with expand) must fold into one batch stride, which stride 0 (a broadcast
// operand) satisfies. Anything else is copied to contiguous first. Strides of size-1 dims
// never move a pointer, so they are normalized before the checks.

namespace tessera {
namespace {

using detail::impl_of;

// t viewed as [B, rows, cols] for the backend, or a contiguous copy when no view fits.
Tensor as_batched(const Tensor& t, const Shape& batch, std::int64_t rows, std::int64_t cols) {
  Shape full = batch;
  full.push_back(rows);
  full.push_back(cols);
  const Tensor e = t.shape() == full ? t : t.expand(full);
  const Strides& st = impl_of(e).strides;
  const int r = full.size();
  std::int64_t rs = st[r - 2], cs = st[r - 1];
  if (cols == 1) cs = 1;
  if (rows == 1) rs = cs == 1 ? std::max<std::int64_t>(cols, 1) : 1;
  const bool row_major = cs == 1 && rs >= std::max<std::int64_t>(cols, 1);
  const bool transposed = rs == 1 && cs >= std::max<std::int64_t>(rows, 1);
  // Fold the batch dims into one stride: every non-1 dim must step by the next one's span.
  std::int64_t b = 1, bs = 0;
  bool foldable = true;
  for (int d = r - 3; d >= 0; --d) {
    if (full[d] == 1) continue;
    if (b > 1 && st[d] != bs * b) foldable = false;
    if (b == 1) bs = st[d];
    b *= full[d];
  }
  if (b == 1) bs = rows * cols;
  if (foldable && (row_major || transposed) && e.numel() > 0) {
    return detail::make_view(e, {b, rows, cols}, {bs, rs, cs}, e.storage_offset());
  }
  return e.contiguous().view({batch.numel(), rows, cols});
}

// t in float32 for a product, in t's layout when t is a transposed dense matrix (a.t(), the
// weight of a Linear): the conversion then runs over dense rows, and the GEMM reads the
// transposed view for free (Note [Matmul operands]). Call it under NoGradGuard.
Tensor widen_for_product(const Tensor& t) {
  if (t.dim() >= 2 && !t.is_contiguous()) {
    const int rows = t.dim() - 2, cols = t.dim() - 1;
    const Tensor back = t.transpose(rows, cols);
    if (back.is_contiguous()) return detail::to_float32(back).transpose(rows, cols);
  }
  return detail::to_float32(t);
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  const Device device = detail::common_device("matmul", a, b);
  if (const auto ac = detail::autocast_for(a);
      ac && detail::autocast_for(b) && (a.dtype() != *ac || b.dtype() != *ac)) {
    return matmul(a.to(*ac), b.to(*ac));  // recorded casts (tessera/autocast.h)
  }
  TESSERA_CHECK(is_floating(a.dtype()) && is_floating(b.dtype()), DtypeError,
                "[matmul] needs floating tensors (float32, float64, bfloat16 or float16), got self "
                "{} and other {}; "
                "convert with .to(kFloat32)",
                dtype_name(a.dtype()), dtype_name(b.dtype()));
  if (a.dtype() != b.dtype()) [[unlikely]] {
    // To the dtype both promote to: bfloat16 with float16 needs both converted (the advice
    // to convert one to float32 left the other as it was).
    const Dtype common = promote_types(a.dtype(), b.dtype());
    const std::string which = common != a.dtype() && common != b.dtype() ? "both"
                              : common != a.dtype()                      ? "self"
                                                                         : "other";
    throw DtypeError(fmt::format(
        "[matmul] operands have different dtypes: self {} and other {}; matmul does not "
        "promote, so convert {} with .to({})",
        dtype_name(a.dtype()), dtype_name(b.dtype()), which, detail::dtype_code(common)));
  }
  TESSERA_CHECK(a.dim() >= 1 && b.dim() >= 1, ShapeError,
                "[matmul] both operands need at least 1 dim, got shapes {} and {}; use mul for "
                "scalars",
                a.shape().str(), b.shape().str());
  const bool grad = detail::needs_grad({&a, &b});
  NoGradGuard internal;  // the views below are plumbing; the product is recorded as a whole
  // 1-D operands become a row (self) or a column (other), removed again from the result.
  // Note [Half precision]: half operands are multiplied in float32, rounded once, by the
  // backend itself where it can (Note [CPU bfloat16 GEMM]), else in float32 copies.
  const bool half = is_half(a.dtype()) && !detail::backend_of(device).matmul_takes_half(a.dtype());
  const Tensor a32 = half ? widen_for_product(a) : a, b32 = half ? widen_for_product(b) : b;
  const Tensor a2 = a.dim() == 1 ? a32.unsqueeze(0) : a32;
  const Tensor b2 = b.dim() == 1 ? b32.unsqueeze(1) : b32;
  const std::int64_t m = a2.size(-2), k = a2.size(-1), n = b2.size(-1);
  TESSERA_CHECK(k == b2.size(-2), ShapeError,
                "[matmul] inner sizes differ: self has shape {} and other has shape {} ({} vs "
                "{}); self's last dim must equal other's {} dim",
                a.shape().str(), b.shape().str(), k, b2.size(-2),
                b.dim() == 1 ? "only" : "second-to-last");
  const Shape a_batch(a2.shape().begin(), a2.shape().end() - 2);
  const Shape b_batch(b2.shape().begin(), b2.shape().end() - 2);
  // Named with the operands' whole shapes: broadcast_shapes would show the batch parts only,
  // with dims counted from their end ([2] and [3], "dim -1", for [2, 3, 4] @ [3, 4, 5]).
  for (int i = 1; i <= std::min(a_batch.size(), b_batch.size()); ++i) {
    const std::int64_t x = a_batch[a_batch.size() - i], y = b_batch[b_batch.size() - i];
    TESSERA_CHECK(x == y || x == 1 || y == 1, ShapeError,
                  "[matmul] the batch dims (all but the last two) of self {} and other {} do not "
                  "broadcast: dim {} of self is {} and dim {} of other is {}; they must be equal "
                  "or 1",
                  a.shape().str(), b.shape().str(), a2.dim() - 2 - i, x, b2.dim() - 2 - i, y);
  }
  const Shape batch =
      a_batch == b_batch ? a_batch : detail::broadcast_shapes("matmul", a_batch, b_batch);
  Tensor out = detail::make_output({batch.numel(), m, n}, a2.dtype(), device, "matmul");
  detail::backend_of(device).matmul(as_batched(a2, batch, m, k), as_batched(b2, batch, k, n), out);
  Shape result = batch;
  if (a.dim() > 1) result.push_back(m);
  if (b.dim() > 1) result.push_back(n);
  Tensor product = out.view(result);
  if (half) product = product.to(a.dtype());
  if (grad) detail::record_matmul(a, b, product);
  return product;
}

namespace detail {

Tensor half_product_float32(const Tensor& a, const Tensor& b) {
  const Device device = common_device("matmul", a, b);
  TESSERA_INTERNAL_ASSERT(is_half(a.dtype()) && a.dtype() == b.dtype() && a.dim() == 2 &&
                              b.dim() == 2 && a.size(1) == b.size(0),
                          "half_product_float32 of {} {} and {} {}", dtype_name(a.dtype()),
                          a.shape().str(), dtype_name(b.dtype()), b.shape().str());
  NoGradGuard internal;
  const bool native = backend_of(device).matmul_takes_half(a.dtype());
  const Tensor a2 = native ? a : widen_for_product(a), b2 = native ? b : widen_for_product(b);
  const std::int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  Tensor out = make_output({1, m, n}, kFloat32, device, "matmul");
  backend_of(device).matmul(as_batched(a2, {}, m, k), as_batched(b2, {}, k, n), out);
  return out.view({m, n});
}

}  // namespace detail
}  // namespace tessera
