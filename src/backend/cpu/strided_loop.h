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

// Runs body(i) for i in [0, n): split across the pool when `parallel`, else on this thread
// without entering an OpenMP region. `#pragma omp parallel for if (false)` still cost about
// 0.4 us a call: a 2x3 float32 exp took 0.52 us where an add, which skipped the pragma, took
// 0.13 us.
template <typename Body>
inline void for_range(bool parallel, std::int64_t n, Body&& body) {
  if (!parallel) {
    for (std::int64_t i = 0; i < n; ++i) body(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) body(i);
}

template <int N>
struct StridedLayout {
  int ndim = 0;                       // after merging; >= 1
  std::int64_t sizes[kMaxDims];       // outermost first
  std::int64_t strides[N][kMaxDims];  // in bytes
};

template <int N>
StridedLayout<N> make_layout(const Shape& shape, const std::array<const Strides*, N>& strides,
                             const std::array<std::int64_t, N>& itemsizes) {
  StridedLayout<N> l{};
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

// Note [Tiled walks]
// A walk along the innermost dimension reads an operand that is the transpose of the others
// (relu(a.t()), a.t() + b.t() into a fresh contiguous output) one cache line per element,
// and at power-of-two sizes those lines fall into the same cache sets: relu of a 1024x1024
// transpose took 3.4 ms, 46x PyTorch's (which gives the output the input's layout, so its
// walk is contiguous). When some operand steps by a cache line or more along the innermost
// dimension but by less than one along another, that other dimension is moved next to the
// innermost and the two are walked in tiles of kTileRows x kTileRun: f gets rows of 8, and
// each tile reads 4 lines of every column of a transposed operand. On a Zen 5 core, 1024x1024
// float32, medians of 5 runs: 16x16 tiles (the transposed copy's, copy_kernel.cpp) 1.6 ms
// for a.t() + b.t() and 0.69 ms for relu(a.t()); 16x8 1.1 / 0.50; 64x8 0.85 / 0.45; 128x8
// the same; 64x16 1.5 / 0.66. The order of elements differs; each is still written once,
// from the same operands (the front end clones an operand that overlaps the output in
// another layout). Units of work for the pool are (outer index, band of rows, block of
// columns), so a tile walk of few rows still splits.
inline constexpr std::int64_t kTileMin = 16;  // both dims at least this, or no tiles
inline constexpr std::int64_t kTileRows = 64, kTileRun = 8;
inline constexpr std::int64_t kTileBlock = 64 * kTileRun;  // columns per unit of work

// Whether `l` is walked in tiles (Note [Tiled walks]); if so, reorders its dimensions so that
// the one along which the line-striding operand is dense comes just before the innermost (a
// permuted 3-D tensor has it anywhere). Elementwise walks may take dimensions in any order.
template <int N>
bool arrange_for_tiles(StridedLayout<N>& l) {
  if (l.ndim < 2) return false;
  const int inner = l.ndim - 1;
  if (l.sizes[inner] < kTileMin) return false;
  constexpr std::int64_t kLine = 64;
  const auto magnitude = [](std::int64_t s) { return s < 0 ? -s : s; };
  for (int k = 0; k < N; ++k) {
    if (magnitude(l.strides[k][inner]) < kLine) continue;
    for (int d = inner - 1; d >= 0; --d) {
      const std::int64_t across = magnitude(l.strides[k][d]);
      if (across == 0 || across >= kLine || l.sizes[d] < kTileMin) continue;
      // Rotate d to inner - 1, keeping the others in order.
      const std::int64_t size = l.sizes[d];
      std::int64_t strides[N];
      for (int j = 0; j < N; ++j) strides[j] = l.strides[j][d];
      for (int e = d; e < inner - 1; ++e) {
        l.sizes[e] = l.sizes[e + 1];
        for (int j = 0; j < N; ++j) l.strides[j][e] = l.strides[j][e + 1];
      }
      l.sizes[inner - 1] = size;
      for (int j = 0; j < N; ++j) l.strides[j][inner - 1] = strides[j];
      return true;
    }
  }
  return false;
}

// The tiled walk of Note [Tiled walks].
template <int N, typename F>
void for_each_tile_row(const StridedLayout<N>& l, std::array<char*, N> base, std::int64_t numel,
                       F&& f) {
  const int inner = l.ndim - 1, across = inner - 1;
  const std::int64_t cols = l.sizes[inner], rows = l.sizes[across];
  const std::int64_t bands = (rows + kTileRows - 1) / kTileRows;
  const std::int64_t blocks = (cols + kTileBlock - 1) / kTileBlock;
  const std::int64_t units = numel / (rows * cols) * bands * blocks;
  std::array<std::int64_t, N> inner_strides;
  for (int k = 0; k < N; ++k) inner_strides[k] = l.strides[k][inner];

  auto run_units = [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t u = first; u < last; ++u) {
      const std::int64_t c_begin = u % blocks * kTileBlock;
      const std::int64_t c_end = c_begin + kTileBlock < cols ? c_begin + kTileBlock : cols;
      const std::int64_t r0 = u / blocks % bands * kTileRows;
      const std::int64_t r1 = r0 + kTileRows < rows ? r0 + kTileRows : rows;
      std::int64_t rem = u / blocks / bands;
      std::array<char*, N> outer = base;
      for (int d = across - 1; d >= 0; --d) {
        const std::int64_t i = rem % l.sizes[d];
        rem /= l.sizes[d];
        for (int k = 0; k < N; ++k) outer[k] += i * l.strides[k][d];
      }
      for (std::int64_t c0 = c_begin; c0 < c_end; c0 += kTileRun) {
        const std::int64_t n = c0 + kTileRun < c_end ? kTileRun : c_end - c0;
        for (std::int64_t r = r0; r < r1; ++r) {
          std::array<char*, N> p;
          for (int k = 0; k < N; ++k) {
            p[k] = outer[k] + r * l.strides[k][across] + c0 * inner_strides[k];
          }
          f(p, n, inner_strides);
        }
      }
    }
  };

  if (numel < kParallelGrain || omp_get_max_threads() == 1 || omp_in_parallel()) {
    run_units(0, units);
    return;
  }
#pragma omp parallel
  {
    const std::int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const std::int64_t chunk = (units + threads - 1) / threads;
    const std::int64_t begin = t * chunk, end = begin + chunk < units ? begin + chunk : units;
    if (begin < end) run_units(begin, end);
  }
}

// f(std::array<char*, N> row_pointers, int64 length, const std::array<int64, N>& strides)
template <int N, typename F>
void for_each_row(const StridedLayout<N>& l, std::array<char*, N> base, std::int64_t numel, F&& f) {
  if (numel == 0) return;
  if (StridedLayout<N> tiled = l; arrange_for_tiles(tiled)) {
    for_each_tile_row<N>(tiled, base, numel, f);
    return;
  }
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
