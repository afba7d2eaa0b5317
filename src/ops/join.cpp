// Joining and splitting: cat, stack, split, chunk. Composed of views and copy_ into views of
// one output on the inputs' device, so every backend runs them with no kernel of its own and
// nothing is read on the host (graph capture records the copies).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>

#include "autograd/formulas.h"
#include "autograd/record.h"
#include "core/check.h"
#include "core/device_rules.h"
#include "core/tensor_impl.h"
#include "tessera/autograd.h"
#include "tessera/ops.h"

namespace tessera {
using detail::check_defined;
using detail::wrap_dim;

namespace {

std::string operand_name(std::size_t i) { return fmt::format("tensors[{}]", i); }

// The one device of a non-empty list of defined tensors. A mismatch is reported by
// common_device for tensors[0] and the first tensor elsewhere, in its words.
Device common_device_of(const char* op, const std::vector<Tensor>& tensors) {
  TESSERA_CHECK(!tensors.empty(), Error, "[{}] expects at least one tensor, got an empty list", op);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined()) check_defined(tensors[i], op, operand_name(i).c_str());
  }
  const Device device = tensors[0].device();
  for (std::size_t i = 1; i < tensors.size(); ++i) {
    if (tensors[i].device() == device) continue;
    const std::string name = operand_name(i);
    detail::common_device(op, {{"tensors[0]", &tensors[0]}, {name.c_str(), &tensors[i]}});
  }
  return device;
}

// cat of checked tensors (one device, at least one): `op` names the call in shape errors.
Tensor cat_checked(const char* op, const std::vector<Tensor>& tensors, int dim, Device device) {
  const Tensor& first = tensors[0];
  const int rank = first.dim();
  TESSERA_CHECK(rank > 0, ShapeError,
                "[{}] tensors[0] is a 0-dim tensor, which has no dim to join along; use stack(), "
                "or unsqueeze(0) each tensor first",
                op);
  dim = wrap_dim(dim, rank, op);
  Shape shape = first.shape();
  Dtype dtype = first.dtype();
  for (std::size_t i = 1; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    TESSERA_CHECK(t.dim() == rank, ShapeError,
                  "[{}] tensors[{}] has shape {} but tensors[0] has shape {}: every tensor needs "
                  "the same number of dims ({} here)",
                  op, i, t.shape().str(), first.shape().str(), rank);
    for (int d = 0; d < rank; ++d) {
      TESSERA_CHECK(d == dim || t.size(d) == first.size(d), ShapeError,
                    "[{}] tensors[{}] has shape {} but tensors[0] has shape {}: sizes must match "
                    "in every dim but the joined dim {} (dim {} differs)",
                    op, i, t.shape().str(), first.shape().str(), dim, d);
    }
    // Expanded views can be that large without memory; a wrapped sum came out negative.
    TESSERA_CHECK(!__builtin_add_overflow(shape[dim], t.size(dim), &shape[dim]), ShapeError,
                  "[{}] the joined dim {} would hold more than 2^63 elements", op, dim);
    dtype = promote_types(dtype, t.dtype());
  }
  Tensor out = detail::make_output(shape, dtype, device, op);
  bool grad = false;
  for (const Tensor& t : tensors) grad = grad || detail::needs_grad(t);
  {
    NoGradGuard internal;  // the copies are this op's formula, recorded once below
    std::int64_t start = 0;
    for (const Tensor& t : tensors) {
      const std::int64_t length = t.size(dim);
      if (length > 0) out.narrow(dim, start, length).copy_(t);
      start += length;
    }
  }
  if (grad) detail::record_cat(tensors, dim, out);
  return out;
}

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int dim) {
  const Device device = common_device_of("cat", tensors);
  return cat_checked("cat", tensors, dim, device);
}

Tensor stack(const std::vector<Tensor>& tensors, int dim) {
  const Device device = common_device_of("stack", tensors);
  const Tensor& first = tensors[0];
  for (std::size_t i = 1; i < tensors.size(); ++i) {
    TESSERA_CHECK(tensors[i].shape() == first.shape(), ShapeError,
                  "[stack] tensors[{}] has shape {} but tensors[0] has shape {}: stack needs "
                  "tensors of one shape",
                  i, tensors[i].shape().str(), first.shape().str());
  }
  const int rank = first.dim();  // the new dim has rank + 1 places
  TESSERA_CHECK(dim >= -(rank + 1) && dim <= rank, ShapeError,
                "[stack] dim {} is out of range for stacking tensors of {} dims (expected {} to "
                "{})",
                dim, rank, -(rank + 1), rank);
  if (dim < 0) dim += rank + 1;
  std::vector<Tensor> unsqueezed;
  unsqueezed.reserve(tensors.size());
  for (const Tensor& t : tensors) unsqueezed.push_back(t.unsqueeze(dim));
  return cat_checked("stack", unsqueezed, dim, device);
}

std::vector<Tensor> split(const Tensor& a, std::int64_t split_size, int dim) {
  check_defined(a, "split");
  TESSERA_CHECK(a.dim() > 0, ShapeError, "[split] cannot split a 0-dim tensor");
  dim = wrap_dim(dim, a.dim(), "split");
  TESSERA_CHECK(split_size > 0, ShapeError,
                "[split] split_size must be positive, got {}; pass a list of sizes to give each "
                "piece its own",
                split_size);
  const std::int64_t n = a.size(dim);
  // As PyTorch: an empty dim gives one empty piece. (n - 1) / s + 1, not (n + s - 1) / s,
  // which wraps for a split_size near 2^63.
  const std::int64_t pieces = n == 0 ? 1 : (n - 1) / split_size + 1;
  std::vector<Tensor> out;
  out.reserve(static_cast<std::size_t>(pieces));
  for (std::int64_t i = 0; i < pieces; ++i) {
    const std::int64_t start = i * split_size;
    out.push_back(a.narrow(dim, start, std::min(split_size, n - start)));
  }
  return out;
}

std::vector<Tensor> split(const Tensor& a, const std::vector<std::int64_t>& sizes, int dim) {
  check_defined(a, "split");
  TESSERA_CHECK(a.dim() > 0, ShapeError, "[split] cannot split a 0-dim tensor");
  dim = wrap_dim(dim, a.dim(), "split");
  const std::int64_t n = a.size(dim);
  std::int64_t total = 0;
  bool fits = true;  // the running sum stays within n (so it never overflows)
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    TESSERA_CHECK(sizes[i] >= 0, ShapeError, "[split] sizes[{}] is {}; sizes must not be negative",
                  i, sizes[i]);
    fits = fits && sizes[i] <= n - total;
    if (fits) total += sizes[i];
  }
  TESSERA_CHECK(fits && total == n, ShapeError,
                "[split] sizes [{}] must sum to the size of dim {}, which is {} (shape {})",
                fmt::join(sizes, ", "), dim, n, a.shape().str());
  std::vector<Tensor> out;
  out.reserve(sizes.size());
  std::int64_t start = 0;
  for (std::int64_t size : sizes) {
    out.push_back(a.narrow(dim, start, size));
    start += size;
  }
  return out;
}

std::vector<Tensor> chunk(const Tensor& a, std::int64_t chunks, int dim) {
  check_defined(a, "chunk");
  TESSERA_CHECK(a.dim() > 0, ShapeError, "[chunk] cannot chunk a 0-dim tensor");
  dim = wrap_dim(dim, a.dim(), "chunk");
  TESSERA_CHECK(chunks > 0, ShapeError, "[chunk] chunks must be positive, got {}", chunks);
  const std::int64_t n = a.size(dim);
  // As PyTorch: an empty dim gives `chunks` empty pieces.
  if (n == 0) return split(a, std::vector<std::int64_t>(static_cast<std::size_t>(chunks), 0), dim);
  return split(a, (n - 1) / chunks + 1, dim);
}

}  // namespace tessera
