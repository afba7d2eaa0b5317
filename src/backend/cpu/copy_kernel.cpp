#include "backend/cpu/copy_kernel.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backend/cpu/strided_loop.h"
#include "core/dispatch_half.h"
#include "core/tensor_impl.h"

namespace tessera::detail {
namespace {

// Note [Transposed copies in tiles]
// A contiguous copy of a transposed matrix (x.t().contiguous(), or any op's operand made
// contiguous) walked the output row by row, so each element read came from another cache
// line, and at power-of-two sizes the lines of a column all fell into the same cache sets:
// 2048x2048 float32 took 11x PyTorch's time (22 ms). Tiles of 16x16 touch 16 lines each way,
// few enough for one cache set's ways even when they all map to one set: 3.1 ms (PyTorch
// 2.6 ms); 32x32 tiles took 5.9 ms, and walking a tile down its columns 22 ms again. Same
// dtype only (bytes moved as they are); threads split the tile rows.
constexpr std::int64_t kTile = 16;

template <typename T>
void copy_transposed(const T* src, std::int64_t ld, T* dst, std::int64_t rows, std::int64_t cols) {
  const std::int64_t row_tiles = (rows + kTile - 1) / kTile;
  const auto tile_row = [&](std::int64_t t) {
    const std::int64_t i0 = t * kTile, i1 = std::min(rows, i0 + kTile);
    for (std::int64_t j0 = 0; j0 < cols; j0 += kTile) {
      const std::int64_t j1 = std::min(cols, j0 + kTile);
      for (std::int64_t i = i0; i < i1; ++i) {
        T* out = dst + i * cols;  // dst[i][j] = src[i + j * ld]
        for (std::int64_t j = j0; j < j1; ++j) out[j] = src[i + j * ld];
      }
    }
  };
  if (rows * cols < kParallelGrain || omp_get_max_threads() == 1 || omp_in_parallel()) {
    for (std::int64_t t = 0; t < row_tiles; ++t) tile_row(t);
    return;
  }
#pragma omp parallel for schedule(static)
  for (std::int64_t t = 0; t < row_tiles; ++t) tile_row(t);
}

// Copies src into dst in tiles when dst is a contiguous matrix and src the transpose of one
// (Note [Transposed copies in tiles]); false when that is not the case.
bool copied_transposed(const TensorImpl& s, const TensorImpl& d) {
  if (s.dtype != d.dtype || !d.contiguous || d.shape.size() != 2) return false;
  const std::int64_t rows = d.shape[0], cols = d.shape[1];
  if (rows < kTile || cols < kTile || s.strides[0] != 1 || s.strides[1] < rows) return false;
  const std::int64_t ld = s.strides[1];
  switch (itemsize(d.dtype)) {
    case 1:
      copy_transposed(reinterpret_cast<const std::uint8_t*>(s.data()), ld,
                      reinterpret_cast<std::uint8_t*>(d.data()), rows, cols);
      return true;
    case 2:
      copy_transposed(reinterpret_cast<const std::uint16_t*>(s.data()), ld,
                      reinterpret_cast<std::uint16_t*>(d.data()), rows, cols);
      return true;
    case 4:
      copy_transposed(reinterpret_cast<const std::uint32_t*>(s.data()), ld,
                      reinterpret_cast<std::uint32_t*>(d.data()), rows, cols);
      return true;
    case 8:
      copy_transposed(reinterpret_cast<const std::uint64_t*>(s.data()), ld,
                      reinterpret_cast<std::uint64_t*>(d.data()), rows, cols);
      return true;
    default:
      return false;
  }
}

}  // namespace

void copy_kernel(const Tensor& src, const Tensor& dst) {
  const TensorImpl& s = impl_of(src);
  const TensorImpl& d = impl_of(dst);
  if (dst.numel() == 0) return;
  if (s.dtype == d.dtype && s.contiguous && d.contiguous) {
    std::memcpy(d.data(), s.data(), dst.nbytes());
    return;
  }
  if (copied_transposed(s, d)) return;
  const auto layout = make_layout<2>(
      d.shape, {&d.strides, &s.strides},
      {static_cast<std::int64_t>(itemsize(d.dtype)), static_cast<std::int64_t>(itemsize(s.dtype))});
  dispatch_dtype_with_half(d.dtype, [&](auto to_tag) {
    using To = typename decltype(to_tag)::type;
    dispatch_dtype_with_half(s.dtype, [&](auto from_tag) {
      using From = typename decltype(from_tag)::type;
      for_each_row<2>(
          layout, {d.data(), s.data()}, d.numel(),
          [](std::array<char*, 2> p, std::int64_t n, const std::array<std::int64_t, 2>& st) {
            if (st[0] == sizeof(To) && st[1] == sizeof(From)) {
              // Both rows dense: a plain loop, with no stride arithmetic per element (float32
              // to bfloat16 of 16 Mi elements went from 11 ms to 3 ms on 2 threads).
              To* out = reinterpret_cast<To*>(p[0]);
              const From* in = reinterpret_cast<const From*>(p[1]);
              if constexpr (std::is_same_v<To, Float16> && std::is_same_v<From, float>) {
                half_rows().float_to_float16(in, out, n);
              } else if constexpr (std::is_same_v<To, float> && std::is_same_v<From, Float16>) {
                half_rows().float16_to_float(in, out, n);
              } else if constexpr (std::is_same_v<To, BFloat16> && std::is_same_v<From, float>) {
                half_rows().float_to_bfloat16(in, out, n);
              } else if constexpr (std::is_same_v<To, float> && std::is_same_v<From, BFloat16>) {
                half_rows().bfloat16_to_float(in, out, n);
              } else {
                for (std::int64_t i = 0; i < n; ++i) out[i] = convert_value<To>(in[i]);
              }
              return;
            }
            for (std::int64_t i = 0; i < n; ++i) {
              *reinterpret_cast<To*>(p[0] + i * st[0]) =
                  convert_value<To>(*reinterpret_cast<const From*>(p[1] + i * st[1]));
            }
          });
    });
  });
}

}  // namespace tessera::detail
