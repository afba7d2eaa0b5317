#pragma once
// Iterates over N same-shaped strided operands row by row: the innermost dimension is
// handed to a callback as (pointers, length, byte strides) so it can run a tight loop, and
// rows are split across the OpenMP pool when the work is large. Dimensions that are
// contiguous in every operand are merged first, so a contiguous tensor is a single row.
#include <omp.h>

#include <array>
#include <cstdint>

#include "tessera/shape.h"

namespace tessera::detail {

// Elements below which a kernel stays on the calling thread: forking the pool costs more.
inline constexpr std::int64_t kParallelGrain = 32768;

template <int N>
struct StridedLayout {
  int ndim = 0;                       // after merging; >= 1
  std::int64_t sizes[kMaxDims];       // outermost first
  std::int64_t strides[N][kMaxDims];  // in bytes
};

template <int N>
StridedLayout<N> make_layout(const Shape& shape, const std::array<const Strides*, N>& strides,
                             const std::array<std::int64_t, N>& itemsizes) {
  StridedLayout<N> l;
  for (int d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;  // size-1 dims never move a pointer
    const int last = l.ndim - 1;
    bool mergeable = last >= 0;
    for (int k = 0; k < N && mergeable; ++k) {
      mergeable = l.strides[k][last] == (*strides[k])[d] * itemsizes[k] * shape[d];
    }
    if (mergeable) {
      l.sizes[last] *= shape[d];
      for (int k = 0; k < N; ++k) l.strides[k][last] = (*strides[k])[d] * itemsizes[k];
    } else {
      l.sizes[l.ndim] = shape[d];
      for (int k = 0; k < N; ++k) l.strides[k][l.ndim] = (*strides[k])[d] * itemsizes[k];
      ++l.ndim;
    }
  }
  if (l.ndim == 0) {  // a scalar or all-ones shape: one row of one element
    l.ndim = 1;
    l.sizes[0] = 1;
    for (int k = 0; k < N; ++k) l.strides[k][0] = itemsizes[k];
  }
  return l;
}

// f(std::array<char*, N> row_pointers, int64 length, const std::array<int64, N>& strides)
template <int N, typename F>
void for_each_row(const StridedLayout<N>& l, std::array<char*, N> base, std::int64_t numel, F&& f) {
  if (numel == 0) return;
  const int inner = l.ndim - 1;
  const std::int64_t row_len = l.sizes[inner];
  const std::int64_t rows = numel / row_len;
  std::array<std::int64_t, N> inner_strides;
  for (int k = 0; k < N; ++k) inner_strides[k] = l.strides[k][inner];

  auto run_rows = [&](std::int64_t first, std::int64_t last) {
    // Decompose `first` into an index over the outer dims, then step it like an odometer.
    std::int64_t index[kMaxDims] = {};
    std::int64_t rem = first;
    for (int d = inner - 1; d >= 0; --d) {
      index[d] = rem % l.sizes[d];
      rem /= l.sizes[d];
    }
    std::array<char*, N> p;
    for (int k = 0; k < N; ++k) {
      p[k] = base[k];
      for (int d = 0; d < inner; ++d) p[k] += index[d] * l.strides[k][d];
    }
    for (std::int64_t r = first; r < last; ++r) {
      f(p, row_len, inner_strides);
      for (int d = inner - 1; d >= 0; --d) {
        for (int k = 0; k < N; ++k) p[k] += l.strides[k][d];
        if (++index[d] < l.sizes[d]) break;
        for (int k = 0; k < N; ++k) p[k] -= l.strides[k][d] * l.sizes[d];
        index[d] = 0;
      }
    }
  };

  if (numel < kParallelGrain || omp_get_max_threads() == 1 || omp_in_parallel()) {
    run_rows(0, rows);
    return;
  }
  if (rows == 1) {
    // One long row: split it into chunks.
#pragma omp parallel
    {
      const std::int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
      const std::int64_t chunk = (row_len + threads - 1) / threads;
      const std::int64_t begin = t * chunk, end = begin + chunk < row_len ? begin + chunk : row_len;
      if (begin < end) {
        std::array<char*, N> p;
        for (int k = 0; k < N; ++k) p[k] = base[k] + begin * inner_strides[k];
        f(p, end - begin, inner_strides);
      }
    }
    return;
  }
#pragma omp parallel
  {
    const std::int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const std::int64_t chunk = (rows + threads - 1) / threads;
    const std::int64_t begin = t * chunk, end = begin + chunk < rows ? begin + chunk : rows;
    if (begin < end) run_rows(begin, end);
  }
}

}  // namespace tessera::detail
