// Front end of the reductions: dim checks, result dtypes and shapes, then the backend's
// keepdim-shaped reduction, viewed (never copied) to drop the reduced dims.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "autograd/formulas.h"
#include "autograd/record.h"
#include "backend/backend.h"
#include "core/check.h"
#include "core/tensor_impl.h"
#include "ops/half_compute.h"
#include "tessera/autograd.h"
#include "tessera/ops.h"

namespace tessera {
using detail::ReduceOp;

namespace {

std::string dims_str(const std::vector<int>& dims) {
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

// Normalizes one dim of a tensor of `shape`. A 0-dim tensor accepts 0 and -1, like PyTorch.
int wrap_reduce_dim(const char* op, int dim, const Shape& shape) {
  const int r = shape.size();
  const int lo = r == 0 ? -1 : -r, hi = r == 0 ? 0 : r - 1;
  TESSERA_CHECK(dim >= lo && dim <= hi, ShapeError,
                "[{}] dim {} is out of range for a tensor of shape {} (expected {} to {})", op, dim,
                shape.str(), lo, hi);
  return dim < 0 ? dim + (r == 0 ? 1 : r) : dim;
}

// The bit mask of `dims`; an empty list reduces nothing (as numpy's axis=()).
std::uint32_t dim_mask(const char* op, const Shape& shape, const std::vector<int>& dims) {
  std::uint32_t mask = 0, seen = 0;  // a 0-dim tensor's dim 0 (or -1) is seen, not masked
  for (int dim : dims) {
    const int d = wrap_reduce_dim(op, dim, shape);
    TESSERA_CHECK((seen & (1u << d)) == 0, ShapeError,
                  "[{}] dim {} appears more than once in dims {} (tensor of shape {}); list "
                  "each dim once",
                  op, dim, dims_str(dims), shape.str());
    seen |= 1u << d;
    if (shape.size() > 0) mask |= 1u << d;
  }
  return mask;
}

std::uint32_t all_dims(const Shape& shape) { return (1u << shape.size()) - 1; }

// max/min/argmax/argmin have no value over an empty set.
void check_nonempty(const char* op, const Shape& shape, std::uint32_t mask) {
  for (int d = 0; d < shape.size(); ++d) {
    TESSERA_CHECK(!((mask >> d) & 1u) || shape[d] != 0, ShapeError,
                  "[{}] cannot reduce over dim {} of size 0 (tensor of shape {}): an empty "
                  "reduction has no {}; check the shape or use sum",
                  op, d, shape.str(), op);
  }
}

Tensor reduce(ReduceOp op, const char* name, const Tensor& a, std::uint32_t mask, bool keepdim,
              Dtype out_dtype) {
  Shape keep = a.shape(), squeezed;
  for (int d = 0; d < keep.size(); ++d) {
    if ((mask >> d) & 1u) {
      keep[d] = 1;
    } else {
      squeezed.push_back(keep[d]);
    }
  }
  // Note [Half precision]: a half input is reduced in float32 and the result rounded once.
  const bool half = is_half(a.dtype());
  const Dtype kernel_out = half && is_half(out_dtype) ? kFloat32 : out_dtype;
  Tensor out = detail::make_output(keep, kernel_out, a.device(), name);
  if (half) [[unlikely]] {
    NoGradGuard internal;
    detail::Backend& backend = detail::backend_of(a.device());
    backend.reduce(op, backend.half_reduce() ? a : detail::to_float32(a), mask, out);
    out = out.to(out_dtype);
  } else {
    detail::backend_of(a.device()).reduce(op, a, mask, out);
  }
  Tensor result = keepdim ? out : out.view(squeezed);
  if (detail::needs_grad(a)) {
    std::vector<int> dims;
    for (int d = 0; d < a.dim(); ++d) {
      if ((mask >> d) & 1u) dims.push_back(d);
    }
    detail::record_reduce(op, name, a, dims, keepdim, result);
  }
  return result;
}

Dtype sum_dtype(Dtype d) { return is_floating(d) ? d : kInt64; }

void check_floating(const char* op, const Tensor& a) {
  TESSERA_CHECK(is_floating(a.dtype()), DtypeError,
                "[{}] needs a floating tensor (float32, float64, bfloat16 or float16), got {}; "
                "convert it with "
                ".to(kFloat32) first",
                op, dtype_name(a.dtype()));
}

Tensor value_reduce(ReduceOp op, const char* name, const Tensor& a, const std::vector<int>* dims,
                    bool keepdim) {
  detail::check_defined(a, name);
  if (detail::autocast_keeps_float32(a)) {  // tessera/autocast.h: through a recorded cast
    return value_reduce(op, name, a.to(kFloat32), dims, keepdim);
  }
  const std::uint32_t mask = dims ? dim_mask(name, a.shape(), *dims) : all_dims(a.shape());
  Dtype out_dtype = a.dtype();
  if (op == ReduceOp::kSum) out_dtype = sum_dtype(a.dtype());
  if (op == ReduceOp::kMean) check_floating(name, a);
  if (op == ReduceOp::kMax || op == ReduceOp::kMin) check_nonempty(name, a.shape(), mask);
  return reduce(op, name, a, mask, dims ? keepdim : false, out_dtype);
}

Tensor arg_reduce(ReduceOp op, const char* name, const Tensor& a, const int* dim, bool keepdim) {
  detail::check_defined(a, name);
  if (!dim) {
    // Flattened: the backend reduces one dim, so view (or copy) the tensor as 1-D first.
    TESSERA_CHECK(a.numel() != 0, ShapeError,
                  "[{}] cannot reduce an empty tensor (shape {}): it has no {}", name,
                  a.shape().str(), name);
    const Tensor flat = a.reshape({a.numel()});
    return reduce(op, name, flat, 1u, false, kInt64);
  }
  const int d = wrap_reduce_dim(name, *dim, a.shape());
  const std::uint32_t mask = a.dim() == 0 ? 0u : 1u << d;
  check_nonempty(name, a.shape(), mask);
  return reduce(op, name, a, mask, keepdim, kInt64);
}

}  // namespace

Tensor sum(const Tensor& a) { return value_reduce(ReduceOp::kSum, "sum", a, nullptr, false); }
Tensor sum(const Tensor& a, const std::vector<int>& dims, bool keepdim) {
  return value_reduce(ReduceOp::kSum, "sum", a, &dims, keepdim);
}
Tensor mean(const Tensor& a) { return value_reduce(ReduceOp::kMean, "mean", a, nullptr, false); }
Tensor mean(const Tensor& a, const std::vector<int>& dims, bool keepdim) {
  return value_reduce(ReduceOp::kMean, "mean", a, &dims, keepdim);
}
Tensor max(const Tensor& a) { return value_reduce(ReduceOp::kMax, "max", a, nullptr, false); }
Tensor max(const Tensor& a, const std::vector<int>& dims, bool keepdim) {
  return value_reduce(ReduceOp::kMax, "max", a, &dims, keepdim);
}
Tensor min(const Tensor& a) { return value_reduce(ReduceOp::kMin, "min", a, nullptr, false); }
Tensor min(const Tensor& a, const std::vector<int>& dims, bool keepdim) {
  return value_reduce(ReduceOp::kMin, "min", a, &dims, keepdim);
}

Tensor argmax(const Tensor& a) {
  return arg_reduce(ReduceOp::kArgMax, "argmax", a, nullptr, false);
}
Tensor argmax(const Tensor& a, int dim, bool keepdim) {
  return arg_reduce(ReduceOp::kArgMax, "argmax", a, &dim, keepdim);
}
Tensor argmin(const Tensor& a) {
  return arg_reduce(ReduceOp::kArgMin, "argmin", a, nullptr, false);
}
Tensor argmin(const Tensor& a, int dim, bool keepdim) {
  return arg_reduce(ReduceOp::kArgMin, "argmin", a, &dim, keepdim);
}

Tensor norm(const Tensor& a) {
  detail::check_defined(a, "norm");
  check_floating("norm", a);
  if (detail::autocast_keeps_float32(a)) return norm(a.to(kFloat32));  // as value_reduce
  // One kernel summing squares in double and taking the root; no temporary a * a.
  return reduce(ReduceOp::kNorm, "norm", a, all_dims(a.shape()), false, a.dtype());
}

}  // namespace tessera
