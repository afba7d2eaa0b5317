#pragma once
// The register tiles of the direct CPU convolutions (direct_conv.cpp, direct_conv_lanes.cpp):
// GCC vectors of the level's width, a forward tile and a weight-gradient tile, both addressed
// by strides so that one tile serves flat planes (vectors of positions) and images in lanes
// (vectors of images). What every path shares is in conv_threads.h and backward_driver.h.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

namespace tessera::detail::TESSERA_CPU_ISA::conv_tiles {  // kernels only: cpu_backend.h

using i64 = std::int64_t;

// The vector of the level this file is built for (Note [CPU kernel variants]): one wider
// than the level's registers is split into pieces the compiler spills; 64 bytes on every
// level made a LeNet epoch 7.8x slower with AVX2 than with AVX-512 (now about as fast), and
// 5.5x with SSE2 (now 1.3x).
#if defined(__AVX512F__)
inline constexpr int kVectorBytes = 64;
#elif defined(__AVX__)
inline constexpr int kVectorBytes = 32;
#else
inline constexpr int kVectorBytes = 16;
#endif

template <typename T>
struct Simd;
template <>
struct Simd<float> {
  using V = float __attribute__((vector_size(kVectorBytes)));
};
template <>
struct Simd<double> {
  using V = double __attribute__((vector_size(kVectorBytes)));
};
template <typename T>
using Vec = typename Simd<T>::V;
template <typename T>
constexpr i64 kLanes = static_cast<i64>(sizeof(Vec<T>) / sizeof(T));

template <typename T>
inline Vec<T> load(const T* p) {
  Vec<T> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename T>
inline void store(T* p, const Vec<T>& v) {
  std::memcpy(p, &v, sizeof v);
}
template <typename T>
inline T lane_sum(const Vec<T>& v) {
  T s{0};
  for (i64 l = 0; l < kLanes<T>; ++l) s += v[l];
  return s;
}

// The sum of p[0, n), in kLanes<T> x 4 partial sums (a plain loop adds one at a time).
template <typename T>
T sum_of(const T* p, i64 n) {
  constexpr i64 L = kLanes<T>;
  Vec<T> acc[4] = {};
  i64 k = 0;
  for (; k + 4 * L <= n; k += 4 * L) {
    for (int v = 0; v < 4; ++v) acc[v] += load(p + k + v * L);
  }
  T s = lane_sum<T>((acc[0] + acc[1]) + (acc[2] + acc[3]));
  for (; k < n; ++k) s += p[k];
  return s;
}

// Register tiles: up to 6 output channels x 4 vectors (forward: 24 accumulators, 4 inputs
// and a weight in AVX-512's 32 registers), or x up to 5 taps (weight gradient).
constexpr int kMaxChannels = 6, kMaxVectors = 4, kMaxTaps = 5, kMaxAccumulators = 24;

// Calls f.template operator()<A, B>() for runtime a in [1, MaxA] and b in [1, MaxB]. (Two
// functions: GCC 12 drops the calls when the inner fold is a lambda inside the outer one.)
template <int A, int MaxB, typename F>
bool call_with_b(int b, F& f) {
  return [&]<int... Bs>(std::integer_sequence<int, Bs...>) {
    return ((b == Bs + 1 && (f.template operator()<A, Bs + 1>(), true)) || ...);
  }(std::make_integer_sequence<int, MaxB>{});
}
template <int MaxA, int MaxB, typename F>
void with_blocks(int a, int b, F&& f) {
  [&]<int... As>(std::integer_sequence<int, As...>) {
    (void)((a == As + 1 && call_with_b<As + 1, MaxB>(b, f)) || ...);
  }(std::make_integer_sequence<int, MaxA>{});
}

// Splits [0, n) into the fewest blocks of at most max, of sizes that differ by at most one
// (13 vectors as 4+3+3+3 rather than 4+4+4+1: a thin tile wastes its loads), and calls
// f(start, size) for each.
template <typename F>
void for_each_block(i64 n, int max, F&& f) {
  const i64 blocks = (n + max - 1) / max;
  for (i64 k = 0, start = 0; k < blocks; ++k) {
    const i64 size = n / blocks + (k < n % blocks ? 1 : 0);
    f(start, static_cast<int>(size));
    start += size;
  }
}

// Strides, in elements, of a forward tile's input and output.
struct TileStrides {
  i64 in_plane;   // between input channels
  i64 row;        // between input rows (tap i)
  i64 tap;        // between input columns (tap j): 1 on flat planes, kLanes with images in lanes
  i64 out_plane;  // between output channels
};

// out[o * out_plane + v * L] = sum over c < cin, i in [i_lo, i_hi), j < kw of
//     w[((o * cin + c) * kh + i) * kw + j] * in[c * in_plane + i * row + j * tap + v * L]
// for o < OB, v < QB: OB x QB accumulators over every tap. Taps outside [i_lo, i_hi) read
// only zeros, so skipping them saves their work.
template <typename T, int OB, int QB>
void conv_tile(const T* in, const T* w, i64 cin, i64 kh, i64 kw, i64 i_lo, i64 i_hi,
               const TileStrides& s, T* out) {
  constexpr i64 L = kLanes<T>;
  const i64 w_stride = cin * kh * kw;
  Vec<T> acc[OB][QB] = {};
  for (i64 c = 0; c < cin; ++c) {
    for (i64 i = i_lo; i < i_hi; ++i) {
      const T* src = in + c * s.in_plane + i * s.row;
      const T* wr = w + (c * kh + i) * kw;
      for (i64 j = 0; j < kw; ++j) {
        Vec<T> xv[QB];
        for (int v = 0; v < QB; ++v) xv[v] = load(src + j * s.tap + v * L);
        for (int o = 0; o < OB; ++o) {
          const T wv = wr[o * w_stride + j];
          for (int v = 0; v < QB; ++v) acc[o][v] += wv * xv[v];
        }
      }
    }
  }
  for (int o = 0; o < OB; ++o) {
    for (int v = 0; v < QB; ++v) store(out + o * s.out_plane + v * L, acc[o][v]);
  }
}

// Where a weight-gradient tile reads: runs of vectors, each run of g facing one of in.
struct RunStrides {
  i64 g_plane;  // between gradient channels
  i64 g_run;    // between runs of the gradient
  i64 in_run;   // between runs of the input
  i64 tap;      // between taps j of the input
  i64 runs, run_length;
};

// dw[o * dw_stride + j] += sum over runs r and vectors v (and lanes) of
//     g[o * g_plane + r * g_run + v * L] * in[r * in_run + j * tap + v * L]
// for o < OB, j < JB: OB x JB dot products, summed across lanes once at the end.
template <typename T, int OB, int JB>
void weight_grad_tile(const T* g, const T* in, const RunStrides& s, T* dw, i64 dw_stride) {
  constexpr i64 L = kLanes<T>;
  Vec<T> acc[OB][JB] = {};
  for (i64 r = 0; r < s.runs; ++r) {
    const T* gr = g + r * s.g_run;
    const T* xr = in + r * s.in_run;
    for (i64 v = 0; v < s.run_length * L; v += L) {
      Vec<T> xv[JB];
      for (int j = 0; j < JB; ++j) xv[j] = load(xr + v + j * s.tap);
      for (int o = 0; o < OB; ++o) {
        const Vec<T> gv = load(gr + o * s.g_plane + v);
        for (int j = 0; j < JB; ++j) acc[o][j] += gv * xv[j];
      }
    }
  }
  for (int o = 0; o < OB; ++o) {
    for (int j = 0; j < JB; ++j) dw[o * dw_stride + j] += lane_sum<T>(acc[o][j]);
  }
}

// The weight gradient of output channels [o0, o0 + ob) for every (c, i, j), by tiles of ob
// channels x up to 5 taps: g points at channel o0's first run, in at channel 0's (tap 0, 0).
template <typename T>
void weight_grad_tiles(const T* g, const T* in, i64 in_plane, i64 row, i64 o0, int ob, i64 cin,
                       i64 kh, i64 kw, const RunStrides& s, T* dw) {
  for (i64 c = 0; c < cin; ++c) {
    for (i64 i = 0; i < kh; ++i) {
      for_each_block(kw, kMaxTaps, [&](i64 j0, int jb) {
        with_blocks<kMaxChannels, kMaxTaps>(ob, jb, [&]<int OB, int JB>() {
          if constexpr (OB * JB <= kMaxAccumulators) {
            weight_grad_tile<T, OB, JB>(g, in + c * in_plane + i * row + j0 * s.tap, s,
                                        dw + ((o0 * cin + c) * kh + i) * kw + j0, cin * kh * kw);
          }
        });
      });
    }
  }
}

// Output channels per weight-gradient tile, so that channels x taps accumulators fit.
inline int weight_grad_channels(i64 kw) {
  return std::min<int>(kMaxChannels,
                       kMaxAccumulators / static_cast<int>(kw < kMaxTaps ? kw : kMaxTaps));
}

}  // namespace tessera::detail::TESSERA_CPU_ISA::conv_tiles
