// CPU index_select and index_add. Every index is checked before anything is read or written
// (Note [Indices checked by the kernel] in backend/indexing.h), then the rows split across the
// OpenMP pool when the work is large.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernel_data.h"
#include "backend/cpu/strided_loop.h"
#include "backend/indexing.h"
#include "core/dispatch.h"
#include "core/tensor_impl.h"

namespace tessera::detail::TESSERA_CPU_ISA {  // built once per level: cpu_backend.h
namespace {

using i64 = std::int64_t;

// Throws for the first index outside [0, size), serially: never inside a parallel region.
void check_indices(IndexOp op, const i64* index, i64 k, int dim, i64 size) {
  for (i64 i = 0; i < k; ++i) {
    if (index[i] < 0 || index[i] >= size) [[unlikely]] {
      throw_index_out_of_range(op, index[i], i, dim, size);
    }
  }
}

void select_rows(const Tensor& x, int dim, const Tensor& index, const Tensor& out) {
  const IndexGeometry g = index_geometry(x, dim);
  const i64 k = index.numel();
  const i64* idx = data_of<const i64>(index);
  check_indices(IndexOp::kIndexSelect, idx, k, dim, g.n);
  const auto row = static_cast<std::size_t>(g.inner) * x.itemsize();
  if (row == 0) return;
  const char* src = data_of<const char>(x);
  char* dst = data_of<char>(out);
  const i64 rows = g.outer * k;
  const bool serial = rows * g.inner < kParallelGrain || omp_in_parallel();
#pragma omp parallel for schedule(static) if (!serial)
  for (i64 r = 0; r < rows; ++r) {
    const i64 o = r / k, i = r % k;
    std::memcpy(dst + static_cast<std::size_t>(r) * row,
                src + static_cast<std::size_t>(o * g.n + idx[i]) * row, row);
  }
}

// Columns of one task: each element's sum runs over i in order, so every run (and every
// thread count) adds in one order.
constexpr i64 kColumnBlock = 512;

template <typename T>
void add_rows(const Tensor& target, int dim, const Tensor& index, const Tensor& source) {
  const IndexGeometry g = index_geometry(target, dim);
  const i64 k = index.numel();
  const i64* idx = data_of<const i64>(index);
  check_indices(IndexOp::kIndexAdd, idx, k, dim, g.n);
  if (g.inner == 0 || g.outer == 0) return;
  T* dst = data_of<T>(target);
  const T* src = data_of<const T>(source);
  const i64 blocks = (g.inner + kColumnBlock - 1) / kColumnBlock;
  const i64 tasks = g.outer * blocks;
  const bool serial = g.outer * k * g.inner < kParallelGrain || omp_in_parallel();
#pragma omp parallel for schedule(static) if (!serial)
  for (i64 t = 0; t < tasks; ++t) {
    const i64 o = t / blocks, lo = (t % blocks) * kColumnBlock;
    const i64 hi = std::min(g.inner, lo + kColumnBlock);
    for (i64 i = 0; i < k; ++i) {
      T* d = dst + (o * g.n + idx[i]) * g.inner;
      const T* s = src + (o * k + i) * g.inner;
      for (i64 j = lo; j < hi; ++j) {
        if constexpr (std::is_same_v<T, bool>) {
          d[j] = d[j] || s[j];
        } else {
          d[j] = static_cast<T>(d[j] + s[j]);
        }
      }
    }
  }
}

}  // namespace

void CpuBackend::index_select(const Tensor& x, int dim, const Tensor& index, const Tensor& out) {
  launch_with(
      out.device().index(),
      [dim](const Tensor& x, const Tensor& index, const Tensor& out) {
        select_rows(x, dim, index, out);
      },
      x, index, out);
}

void CpuBackend::index_add(const Tensor& target, int dim, const Tensor& index,
                           const Tensor& source) {
  launch_with(
      target.device().index(),
      [dim](const Tensor& target, const Tensor& index, const Tensor& source) {
        dispatch_dtype(target.dtype(), [&](auto tag) {
          add_rows<typename decltype(tag)::type>(target, dim, index, source);
        });
      },
      target, index, source);
}

}  // namespace tessera::detail::TESSERA_CPU_ISA
