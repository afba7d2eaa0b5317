// Views: new metadata over the same storage, never a copy. They join the autograd graph
// like any op (autograd/view_grad.cpp), which is why they live above core.
#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "autograd/formulas.h"
#include "autograd/record.h"
#include "core/check.h"
#include "core/tensor_impl.h"
#include "tessera/tensor.h"

namespace tessera {
using detail::check_defined;
using detail::impl_of;
using detail::make_view;
using detail::wrap_dim;

namespace {

// Views join the graph like any op (see autograd/view_grad.cpp).
Tensor with_reshape_grad(const char* name, const Tensor& self, Tensor out) {
  if (detail::needs_grad(self)) detail::record_reshape(name, self, out);
  return out;
}
Tensor with_permute_grad(const Tensor& self, const std::vector<int>& dims, Tensor out) {
  if (detail::needs_grad(self)) detail::record_permute(self, dims, out);
  return out;
}
Tensor with_subview_grad(const char* name, const Tensor& self, Tensor out,
                         std::function<Tensor(const Tensor&)> same_view) {
  if (detail::needs_grad(self)) detail::record_subview(name, self, out, std::move(same_view));
  return out;
}
Tensor with_expand_grad(const Tensor& self, Tensor out) {
  if (detail::needs_grad(self)) detail::record_expand(self, out);
  return out;
}
std::vector<int> transpose_dims(int rank, int a, int b) {
  std::vector<int> dims(static_cast<std::size_t>(rank));
  for (int i = 0; i < rank; ++i) dims[i] = i;
  if (rank > 0) std::swap(dims[a], dims[b]);
  return dims;
}

// `new_shape` with its -1 resolved for the element count of a tensor of `shape`; ShapeError
// naming `op` (what the user called) when it cannot be, or holds another count.
Shape resolve_shape(const Shape& shape, const Shape& new_shape, const char* op) {
  Shape target = new_shape;
  int infer = -1;
  std::int64_t known = 1;
  bool empty = false;  // a 0 makes the count 0, whatever the other sizes multiply to
  for (int d = 0; d < target.size(); ++d) {
    if (target[d] == -1) {
      TESSERA_CHECK(infer < 0, ShapeError, "[{}] shape {} has more than one -1", op,
                    new_shape.str());
      infer = d;
    } else {
      TESSERA_CHECK(target[d] >= 0, ShapeError, "[{}] shape {} has a negative size", op,
                    new_shape.str());
      empty = empty || target[d] == 0;
    }
  }
  for (int d = 0; d < target.size() && !empty; ++d) {
    if (d == infer) continue;
    // A product that wraps past 2^63 could equal the element count (9 x 6148914691236517206
    // wraps to 6), and the view read far outside its storage.
    TESSERA_CHECK(!__builtin_mul_overflow(known, target[d], &known), ShapeError,
                  "[{}] shape {} has more elements than a tensor can hold", op, new_shape.str());
  }
  if (empty) known = 0;
  const std::int64_t n = shape.numel();
  if (infer >= 0) {
    TESSERA_CHECK(known != 0 && n % known == 0, ShapeError,
                  "[{}] cannot infer -1 in {} for a tensor of {} elements (shape {})", op,
                  new_shape.str(), n, shape.str());
    target[infer] = n / known;
    known *= target[infer];
  }
  TESSERA_CHECK(known == n, ShapeError,
                "[{}] shape {} has {} elements but the tensor of shape {} has {}", op,
                new_shape.str(), known, shape.str(), n);
  return target;
}

}  // namespace

Tensor Tensor::view(const Shape& new_shape) const {
  check_defined(*this, "view");
  const Shape target = resolve_shape(shape(), new_shape, "view");
  if (impl_->contiguous) {
    return with_reshape_grad(
        "view", *this, make_view(*this, target, detail::contiguous_strides(target), impl_->offset));
  }
  // Non-contiguous: a view exists when every run of old dims that merges into new dims is
  // itself contiguous (the rule of PyTorch's computeStride). Walk the old dims from the end
  // in contiguous chunks and lay the new dims over each chunk.
  const Shape& old = impl_->shape;
  const Strides& os = impl_->strides;
  Strides new_strides;
  new_strides.resize(target.size());
  int view_d = target.size() - 1;
  std::int64_t chunk_base_stride = os.back();
  std::int64_t tensor_numel = 1, view_numel = 1;
  for (int d = old.size() - 1; d >= 0; --d) {
    tensor_numel *= old[d];
    const bool chunk_ends =
        d == 0 || (old[d - 1] != 1 && os[d - 1] != tensor_numel * chunk_base_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || target[view_d] == 1)) {
      new_strides[view_d] = view_numel * chunk_base_stride;
      view_numel *= target[view_d];
      --view_d;
    }
    TESSERA_CHECK(view_numel == tensor_numel, ShapeError,
                  "[view] shape {} is not compatible with the layout of this tensor (shape {}, "
                  "strides {}); use reshape(), which copies when it must",
                  new_shape.str(), shape().str(), os.str());
    if (d > 0) {
      chunk_base_stride = os[d - 1];
      tensor_numel = view_numel = 1;
    }
  }
  TESSERA_CHECK(view_d == -1, ShapeError,
                "[view] shape {} is not compatible with the layout of this tensor (shape {}, "
                "strides {}); use reshape(), which copies when it must",
                new_shape.str(), shape().str(), os.str());
  return with_reshape_grad("view", *this, make_view(*this, target, new_strides, impl_->offset));
}

Tensor Tensor::reshape(const Shape& new_shape) const {
  check_defined(*this, "reshape");
  const Shape target = resolve_shape(shape(), new_shape, "reshape");
  if (impl_->contiguous) return view(target);
  try {
    return view(target);
  } catch (const ShapeError&) {  // the layout allows no view
  }
  return contiguous().view(target);
}

Tensor Tensor::transpose(int dim0, int dim1) const {
  check_defined(*this, "transpose");
  const int r = dim();
  const int a = wrap_dim(dim0, r, "transpose"), b = wrap_dim(dim1, r, "transpose");
  Shape s = impl_->shape;
  Strides st = impl_->strides;
  if (r > 0) {
    std::swap(s[a], s[b]);
    std::swap(st[a], st[b]);
  }
  return with_permute_grad(*this, transpose_dims(dim(), a, b),
                           make_view(*this, s, st, impl_->offset));
}

Tensor Tensor::t() const {
  check_defined(*this, "t");
  TESSERA_CHECK(dim() <= 2, ShapeError,
                "[t] expects a tensor with at most 2 dims, got shape {}; use transpose(d0, d1)",
                shape().str());
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::permute(const Shape& dims) const {
  check_defined(*this, "permute");
  const int r = dim();
  TESSERA_CHECK(dims.size() == r, ShapeError,
                "[permute] got {} dims {} for a tensor with {} dims (shape {})", dims.size(),
                dims.str(), r, shape().str());
  Shape s, st;
  bool seen[kMaxDims] = {};
  for (int i = 0; i < r; ++i) {
    // In int64 first: a dim past int's range was cut to its low bits ((1 << 32) + 1 was 1).
    TESSERA_CHECK(dims[i] >= -r && dims[i] < r, ShapeError,
                  "[permute] dim {} of {} is out of range for a tensor with {} dims (shape {}): "
                  "dims count from 0 to {}, or from -{} back",
                  dims[i], dims.str(), r, shape().str(), r - 1, r);
    const int d = wrap_dim(static_cast<int>(dims[i]), r, "permute");
    TESSERA_CHECK(!seen[d], ShapeError, "[permute] dims {} repeat dim {}", dims.str(), d);
    seen[d] = true;
    s.push_back(impl_->shape[d]);
    st.push_back(impl_->strides[d]);
  }
  return with_permute_grad(*this, std::vector<int>(dims.begin(), dims.end()),
                           make_view(*this, s, st, impl_->offset));
}

Tensor Tensor::narrow(int d, std::int64_t start, std::int64_t length) const {
  check_defined(*this, "narrow");
  TESSERA_CHECK(dim() > 0, ShapeError, "[narrow] cannot narrow a 0-dim tensor");
  d = wrap_dim(d, dim(), "narrow");
  const std::int64_t n = impl_->shape[d];
  TESSERA_CHECK(length >= 0, ShapeError, "[narrow] length must not be negative, got {}", length);
  TESSERA_CHECK(start >= -n && start <= n, ShapeError,
                "[narrow] start {} is out of range for dim {} of size {} (expected {} to {}; "
                "shape {})",
                start, d, n, -n, n, shape().str());
  const std::int64_t from = start < 0 ? start + n : start;
  // length <= n - from, not from + length <= n: a huge length wrapped the sum negative.
  TESSERA_CHECK(length <= n - from, ShapeError,
                "[narrow] start {} + length {} exceeds dim {} of size {} (shape {})", start, length,
                d, n, shape().str());
  start = from;
  Shape s = impl_->shape;
  s[d] = length;
  return with_subview_grad(
      "narrow", *this,
      make_view(*this, s, impl_->strides, impl_->offset + start * impl_->strides[d]),
      [d, start, length](const Tensor& z) { return z.narrow(d, start, length); });
}

Tensor Tensor::slice(int d, std::int64_t start, std::int64_t end, std::int64_t step) const {
  check_defined(*this, "slice");
  TESSERA_CHECK(dim() > 0, ShapeError, "[slice] cannot slice a 0-dim tensor");
  TESSERA_CHECK(step > 0, ShapeError, "[slice] step must be positive, got {}", step);
  d = wrap_dim(d, dim(), "slice");
  const std::int64_t n = impl_->shape[d];
  auto clamp = [n](std::int64_t i) {
    if (i < 0) i += n;
    return i < 0 ? 0 : (i > n ? n : i);
  };
  start = clamp(start);
  end = clamp(end);
  // Not (end - start + step - 1) / step, which wraps for a step near 2^63.
  const std::int64_t length = end > start ? (end - start - 1) / step + 1 : 0;
  Shape s = impl_->shape;
  Strides st = impl_->strides;
  s[d] = length;
  st[d] *= step;
  return with_subview_grad(
      "slice", *this, make_view(*this, s, st, impl_->offset + start * impl_->strides[d]),
      [d, start, end, step](const Tensor& z) { return z.slice(d, start, end, step); });
}

Tensor Tensor::select(int d, std::int64_t index) const {
  check_defined(*this, "select");
  TESSERA_CHECK(dim() > 0, ShapeError, "[select] cannot index a 0-dim tensor; use item()");
  d = wrap_dim(d, dim(), "select");
  const std::int64_t n = impl_->shape[d];
  TESSERA_CHECK(index >= -n && index < n, ShapeError,
                "[select] index {} is out of range for dim {} of size {} (shape {})", index, d, n,
                shape().str());
  if (index < 0) index += n;
  Shape s = impl_->shape;
  Strides st = impl_->strides;
  const std::int64_t offset = impl_->offset + index * st[d];
  s.erase(d);
  st.erase(d);
  return with_subview_grad("select", *this, make_view(*this, s, st, offset),
                           [d, index](const Tensor& z) { return z.select(d, index); });
}

Tensor Tensor::unsqueeze(int d) const {
  check_defined(*this, "unsqueeze");
  const int r = dim();
  TESSERA_CHECK(d >= -(r + 1) && d <= r, ShapeError,
                "[unsqueeze] dim {} is out of range for a tensor with {} dims (expected {} to {})",
                d, r, -(r + 1), r);
  TESSERA_CHECK(r < kMaxDims, ShapeError,
                "[unsqueeze] a tensor has at most {} dims, and shape {} has {} already", kMaxDims,
                shape().str(), r);
  if (d < 0) d += r + 1;
  Shape s = impl_->shape;
  Strides st = impl_->strides;
  const std::int64_t stride = d < r ? st[d] * s[d] : 1;
  s.insert(d, 1);
  st.insert(d, stride);
  return with_reshape_grad("unsqueeze", *this, make_view(*this, s, st, impl_->offset));
}

Tensor Tensor::squeeze() const {
  check_defined(*this, "squeeze");
  Shape s, st;
  for (int d = 0; d < dim(); ++d) {
    if (impl_->shape[d] != 1) {
      s.push_back(impl_->shape[d]);
      st.push_back(impl_->strides[d]);
    }
  }
  return with_reshape_grad("squeeze", *this, make_view(*this, s, st, impl_->offset));
}

Tensor Tensor::squeeze(int d) const {
  check_defined(*this, "squeeze");
  d = wrap_dim(d, dim(), "squeeze");  // a 0-dim tensor takes dim 0 or -1, as in PyTorch
  if (dim() == 0) return *this;
  if (impl_->shape[d] != 1) return *this;
  Shape s = impl_->shape;
  Strides st = impl_->strides;
  s.erase(d);
  st.erase(d);
  return with_reshape_grad("squeeze", *this, make_view(*this, s, st, impl_->offset));
}

Tensor Tensor::expand(const Shape& target) const {
  check_defined(*this, "expand");
  const int r = dim(), n = target.size();
  TESSERA_CHECK(n >= r, ShapeError,
                "[expand] cannot expand shape {} to {}: the target has fewer dims", shape().str(),
                target.str());
  Shape s, st;
  s.resize(n);
  st.resize(n);
  for (int i = n - 1; i >= 0; --i) {
    const int j = i - (n - r);
    const std::int64_t have = j >= 0 ? impl_->shape[j] : 1;
    const std::int64_t want = target[i] == -1 ? have : target[i];
    TESSERA_CHECK(j >= 0 || target[i] != -1, ShapeError,
                  "[expand] -1 is not allowed for the new leading dim {} in {}", i, target.str());
    TESSERA_CHECK(want >= 0, ShapeError,
                  "[expand] cannot expand shape {} to {}: dim {} has the negative size {} (-1 "
                  "keeps a dim's size)",
                  shape().str(), target.str(), i, want);
    TESSERA_CHECK(have == want || have == 1, ShapeError,
                  "[expand] cannot expand shape {} to {}: dim {} has size {}, expected 1 or {}",
                  shape().str(), target.str(), i, have, want);
    s[i] = want;
    st[i] = (j >= 0 && have == want) ? impl_->strides[j] : 0;
  }
  // A view of more than 2^63 elements counted INT64_MAX of them, and reductions over it
  // summed nothing (sum 0, max -inf) as if it were empty.
  // A 0 anywhere makes it empty, whatever the other sizes (checked first: a 0 after two
  // huge sizes was refused).
  const bool empty = std::find(s.begin(), s.end(), 0) != s.end();
  std::int64_t count = 1;
  for (int i = 0; i < n && !empty; ++i) {
    TESSERA_CHECK(!__builtin_mul_overflow(count, s[i], &count), ShapeError,
                  "[expand] cannot expand shape {} to {}: the view would hold more than 2^63 "
                  "elements",
                  shape().str(), target.str());
  }
  return with_expand_grad(*this, make_view(*this, s, st, impl_->offset));
}

Tensor Tensor::flatten(int start_dim, int end_dim) const {
  check_defined(*this, "flatten");
  const int a = wrap_dim(start_dim, dim(), "flatten"), b = wrap_dim(end_dim, dim(), "flatten");
  if (dim() == 0) return reshape({1});
  TESSERA_CHECK(a <= b, ShapeError, "[flatten] start_dim {} comes after end_dim {}", start_dim,
                end_dim);
  Shape s;
  for (int d = 0; d < a; ++d) s.push_back(impl_->shape[d]);
  std::int64_t merged = 1;
  for (int d = a; d <= b; ++d) merged *= impl_->shape[d];
  s.push_back(merged);
  for (int d = b + 1; d < dim(); ++d) s.push_back(impl_->shape[d]);
  return reshape(s);
}

}  // namespace tessera
