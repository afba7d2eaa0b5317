// index_select and index_add (and index_add_): the checks the host can make (devices, dtypes,
// shapes), then one kernel. Index values are checked by the kernel, since reading them here
// would wait for the device (Note [Indices checked by the kernel] in backend/indexing.h).
#include "autograd/record.h"
#include "backend/backend.h"
#include "core/check.h"
#include "core/device_rules.h"
#include "core/tensor_impl.h"
#include "ops/broadcast.h"
#include "ops/half_compute.h"
#include "tessera/autograd.h"
#include "tessera/factories.h"
#include "tessera/ops.h"

namespace tessera {
namespace {

using detail::wrap_dim;

// The index as the kernels take it: contiguous int64 [k], on the device the caller checked.
Tensor kernel_index(const char* op, const Tensor& index) {
  TESSERA_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32, DtypeError,
                "[{}] index must be int64 or int32, got {}; convert it with .to(kInt64)", op,
                dtype_name(index.dtype()));
  TESSERA_CHECK(index.dim() <= 1, ShapeError,
                "[{}] index must be 1-D (or 0-dim), got shape {}; flatten it with .flatten() and "
                "reshape the result",
                op, index.shape().str());
  NoGradGuard internal;
  const Tensor flat = index.dim() == 0 ? index.reshape({1}) : index;
  return flat.dtype() == kInt64 ? flat.contiguous() : flat.to(kInt64).contiguous();
}

int indexed_dim(const char* op, const Tensor& x, int dim) {
  TESSERA_CHECK(x.dim() > 0, ShapeError,
                "[{}] cannot index a 0-dim tensor along a dim; unsqueeze(0) it first", op);
  return wrap_dim(dim, x.dim(), op);
}

// source fits x for index_add: x's dtype and rank, k slices along dim, x's sizes elsewhere.
void check_source(const char* op, const Tensor& x, int dim, std::int64_t k, const Tensor& source) {
  TESSERA_CHECK(source.dtype() == x.dtype(), DtypeError,
                "[{}] source is {} but self is {}; convert source with .to({})", op,
                dtype_name(source.dtype()), dtype_name(x.dtype()), dtype_name(x.dtype()));
  Shape expected = x.shape();
  expected[dim] = k;
  TESSERA_CHECK(source.shape() == expected, ShapeError,
                "[{}] source has shape {} but must be {}: self's shape {} with the index's {} "
                "elements along dim {}",
                op, source.shape().str(), expected.str(), x.shape().str(), k, dim);
}

// target[index[i]] += source[i] along dim, in place. target is ours to write (checked).
void add_into(Tensor& target, int dim, const Tensor& index, const Tensor& source) {
  const Device device = target.device();
  if (index.numel() == 0) return;
  NoGradGuard internal;
  if (is_half(target.dtype())) {  // Note [Half precision]: float32 sums, one rounding
    Tensor wide = target.to(kFloat32).contiguous();
    detail::backend_of(device).index_add(wide, dim, index, source.to(kFloat32).contiguous());
    detail::store_converted(wide, target);
  } else if (!target.is_contiguous()) {
    Tensor dense = target.contiguous();
    detail::backend_of(device).index_add(dense, dim, index, source.contiguous());
    detail::store_converted(dense, target);
  } else {
    detail::backend_of(device).index_add(target, dim, index, source.contiguous());
  }
}

}  // namespace

Tensor index_select(const Tensor& x, int dim, const Tensor& index) {
  const Device device = detail::common_device("index_select", {{"self", &x}, {"index", &index}});
  dim = indexed_dim("index_select", x, dim);
  const Tensor idx = kernel_index("index_select", index);
  Shape shape = x.shape();
  shape[dim] = idx.numel();
  Tensor out = detail::make_output(shape, x.dtype(), device, "index_select");
  if (idx.numel() > 0) {
    Tensor dense;
    {
      NoGradGuard internal;  // recorded once below, as one op
      dense = x.contiguous();
    }
    detail::backend_of(device).index_select(dense, dim, idx, out);
  }
  if (detail::needs_grad(x)) {
    detail::record(
        "index_select", out, {&x},
        [idx, dim, shape = x.shape()](const Tensor& g) {
          return std::vector<Tensor>{index_add(zeros(shape, {g.dtype(), g.device()}), dim, idx, g)};
        },
        {{"index", &idx}});
  }
  return out;
}

Tensor index_add(const Tensor& x, int dim, const Tensor& index, const Tensor& source) {
  detail::common_device("index_add", {{"self", &x}, {"index", &index}, {"source", &source}});
  dim = indexed_dim("index_add", x, dim);
  const Tensor idx = kernel_index("index_add", index);
  check_source("index_add", x, dim, idx.numel(), source);
  Tensor out;
  {
    NoGradGuard internal;
    out = x.clone();
  }
  add_into(out, dim, idx, source);
  if (detail::needs_grad({&x, &source})) {
    detail::record("index_add", out, {&x, &source},
                   [idx, dim](const Tensor& g) {
                     return std::vector<Tensor>{g, index_select(g, dim, idx)};
                   },
                   {{"index", &idx}});
  }
  return out;
}

Tensor& Tensor::index_add_(int dim, const Tensor& index, const Tensor& source) {
  detail::common_device("index_add_", {{"self", this}, {"index", &index}, {"source", &source}});
  dim = indexed_dim("index_add_", *this, dim);
  Tensor idx = kernel_index("index_add_", index);
  check_source("index_add_", *this, dim, idx.numel(), source);
  detail::check_inplace("index_add_", {this, &source});
  detail::check_writable(*this, "index_add_");
  // A source or index that overlaps self is read from a copy: the kernel could write it
  // before reading it.
  const Tensor src = source.shares_storage(*this) ? source.clone() : source;
  if (idx.shares_storage(*this)) idx = idx.clone();
  add_into(*this, dim, idx, src);
  detail::mark_written(*this);  // once nothing can refuse the write (record.h)
  return *this;
}

}  // namespace tessera
