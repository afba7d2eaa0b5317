// Direct CPU convolution (stride 1, few channels) on flattened, padded planes, with register
// tiles of GCC vectors.
#include "backend/cpu/direct_conv.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

// Note [Direct convolution]
// With stride 1, copy each input plane into a zero-padded plane of width row = W + 2 pw,
// flattened. Output (oy, ox) then reads the input at flat index (oy * row + ox) + (i * row + j)
// for tap (i, j): every tap is the same contiguous run shifted by a constant. So the output
// is computed at all flat positions q = oy * row + ox, ox < row, as
//     out[o][q] = sum over c, i, j of w[o][c][i][j] * in[c][q + i * row + j]
// which vectorizes over q with unaligned loads and broadcast weights; the kW - 1 columns per
// row with ox >= OW are wasted work (12% for LeNet's first layer, 29% for its second) and are
// dropped when the result is copied out. A tile of 4 output channels x 4 vectors of q keeps
// 16 accumulators in registers across all C x kH x kW taps.
//
// The gradients reuse the same flat layout:
// - dw[o][c][i][j] = sum over q of gy[o][q] * in[c][q + i * row + j], with gy written at
//   width row and zeros in the dropped columns: dot products over q, vectorized the same
//   way (4 output channels x 4 taps per tile), summed across lanes once per group of images.
// - dx is a convolution of gy, padded with Z = (kH - 1) * row + kW - 1 zeros in front, by
//   the flipped, transposed weights wT[c][o][i][j] = w[o][c][kH-1-i][kW-1-j]: a tap that
//   would wrap into the next row reads a dropped column, which is zero. So it is the forward
//   kernel again, with O input and C output channels, over the padded input plane.
// Images are split across the OpenMP pool; each thread has its own planes and partial
// weight gradient, summed in thread order (deterministic for a given thread count).

namespace tessera::detail {
namespace {

using i64 = std::int64_t;

template <typename T>
struct Simd;
template <>
struct Simd<float> {
  using V = float __attribute__((vector_size(64)));
};
template <>
struct Simd<double> {
  using V = double __attribute__((vector_size(64)));
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

// The sum of p[0, n), in kLanes<T> x 4 partial sums (a plain loop adds one at a time).
template <typename T>
T sum_of(const T* p, i64 n) {
  constexpr i64 L = kLanes<T>;
  Vec<T> acc[4] = {};
  i64 k = 0;
  for (; k + 4 * L <= n; k += 4 * L) {
    for (int v = 0; v < 4; ++v) acc[v] += load(p + k + v * L);
  }
  const Vec<T> all = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  T s{0};
  for (i64 l = 0; l < L; ++l) s += all[l];
  for (; k < n; ++k) s += p[k];
  return s;
}

inline i64 round_up(i64 v, i64 m) { return (v + m - 1) / m * m; }

// Register tiles: up to 6 output channels x 4 vectors of positions (forward: 24 accumulators,
// 4 inputs and a weight in AVX-512's 32 registers), or x up to 5 taps (weight gradient).
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

// The flat-plane sizes of one convolution (Note [Direct convolution]).
struct Planes {
  i64 row;       // padded width
  i64 hp;        // padded height
  i64 nq;        // vectors of output positions (forward, weight gradient)
  i64 in_plane;  // stride between padded input planes, with room for the overreach
  i64 nr;        // vectors of padded input positions (input gradient)
  i64 front;     // zeros before each gradient plane (Z)
  i64 g_plane;   // stride between gradient planes

  template <typename T>
  static Planes of(const ConvGeometry& g) {
    constexpr i64 L = kLanes<T>;
    Planes p{};
    p.row = g.w + 2 * g.win.pad_w;
    p.hp = g.h + 2 * g.win.pad_h;
    p.nq = (g.oh * p.row + L - 1) / L;
    p.in_plane = round_up(p.nq * L - 1 + (g.kh - 1) * p.row + g.kw, L);
    p.nr = (p.hp * p.row + L - 1) / L;
    p.front = (g.kh - 1) * p.row + (g.kw - 1);
    p.g_plane = round_up(p.nr * L + p.front, L);
    return p;
  }
};

// out[o][q] for o in [0, OB), q in [q0, q0 + QB * L): the forward kernel's register tile.
// w points at the tile's first output channel, [.][cin][kh][kw].
template <typename T, int OB, int QB>
void conv_tile(const T* in, i64 in_plane, i64 cin, const T* w, i64 kh, i64 kw, i64 row, T* out,
               i64 out_plane, i64 q0) {
  constexpr i64 L = kLanes<T>;
  const i64 w_stride = cin * kh * kw;
  Vec<T> acc[OB][QB] = {};
  for (i64 c = 0; c < cin; ++c) {
    for (i64 i = 0; i < kh; ++i) {
      const T* src = in + c * in_plane + i * row + q0;
      const T* wr = w + (c * kh + i) * kw;
      for (i64 j = 0; j < kw; ++j) {
        Vec<T> xv[QB];
        for (int v = 0; v < QB; ++v) xv[v] = load(src + j + v * L);
        for (int o = 0; o < OB; ++o) {
          const T wv = wr[o * w_stride + j];
          for (int v = 0; v < QB; ++v) acc[o][v] += wv * xv[v];
        }
      }
    }
  }
  for (int o = 0; o < OB; ++o) {
    for (int v = 0; v < QB; ++v) std::memcpy(out + o * out_plane + q0 + v * L, &acc[o][v], sizeof(Vec<T>));
  }
}

// out [cout][nq * L] = the flat convolution of in [cin][in_plane] by w [cout][cin][kh][kw].
template <typename T>
void conv_planes(const T* in, i64 in_plane, i64 cin, const T* w, i64 cout, i64 kh, i64 kw,
                 i64 row, i64 nq, T* out) {
  constexpr i64 L = kLanes<T>;
  const i64 out_plane = nq * L;
  for_each_block(cout, kMaxChannels, [&](i64 o0, int ob) {
    for_each_block(nq, kMaxVectors, [&](i64 v0, int qb) {
      with_blocks<kMaxChannels, kMaxVectors>(ob, qb, [&]<int OB, int QB>() {
        conv_tile<T, OB, QB>(in, in_plane, cin, w + o0 * cin * kh * kw, kh, kw, row,
                             out + o0 * out_plane, out_plane, v0 * L);
      });
    });
  });
}

// dw[o][c][i][j0 + j] += sum over images and q of gy[o][q] * in[c][q + i * row + j0 + j], for
// OB output channels and JB taps. gy and in point at the first image's planes for (o0, c, i, j0).
template <typename T, int OB, int JB>
void weight_grad_tile(const T* gy, i64 g_plane, i64 g_image, const T* in, i64 in_image, i64 images,
                      i64 nq, T* dw, i64 dw_stride) {
  constexpr i64 L = kLanes<T>;
  Vec<T> acc[OB][JB] = {};
  for (i64 n = 0; n < images; ++n) {
    const T* gn = gy + n * g_image;
    const T* xn = in + n * in_image;
    for (i64 q = 0; q < nq * L; q += L) {
      Vec<T> xv[JB];
      for (int j = 0; j < JB; ++j) xv[j] = load(xn + q + j);
      for (int o = 0; o < OB; ++o) {
        const Vec<T> gv = load(gn + o * g_plane + q);
        for (int j = 0; j < JB; ++j) acc[o][j] += gv * xv[j];
      }
    }
  }
  for (int o = 0; o < OB; ++o) {
    for (int j = 0; j < JB; ++j) {
      T s{0};
      for (i64 l = 0; l < L; ++l) s += acc[o][j][l];
      dw[o * dw_stride + j] += s;
    }
  }
}

// Copies each [h, w] plane of src into the flat buffer at (top, left), planes dst_plane apart.
template <typename T>
void copy_into_planes(const T* src, i64 planes, i64 h, i64 w, T* dst, i64 dst_plane, i64 row,
                      i64 offset) {
  for (i64 p = 0; p < planes; ++p) {
    for (i64 y = 0; y < h; ++y) {
      std::memcpy(dst + p * dst_plane + offset + y * row, src + (p * h + y) * w, w * sizeof(T));
    }
  }
}

// Images per group in the backward pass: enough positions that the weight gradient's
// lane sums are a small part of its dot products.
i64 images_per_group(const Planes& p, i64 lanes) {
  return std::clamp<i64>(512 / (p.nq * lanes), 1, 8);
}

bool split_images(const ConvGeometry& g) {
  return g.n > 1 && !omp_in_parallel() && g.n * g.o * g.ck() * g.positions() >= 32768;
}

}  // namespace

bool direct_conv_applies(const ConvGeometry& g) {
  const i64 row = g.w + 2 * g.win.pad_w;
  return g.win.stride_h == 1 && g.win.stride_w == 1 && !g.is_pointwise() && g.c <= 32 &&
         g.o <= 64 && g.positions() > 0 && g.ck() > 0 && 2 * g.ow >= row;
}

template <typename T>
void direct_conv_forward(const ConvGeometry& g, const T* x, const T* w, const T* b, T* y) {
  constexpr i64 L = kLanes<T>;
  const Planes p = Planes::of<T>(g);
  const i64 offset = g.win.pad_h * p.row + g.win.pad_w;  // where the unpadded plane starts
#pragma omp parallel if (split_images(g))
  {
    std::vector<T> in(static_cast<std::size_t>(g.c * p.in_plane), T{0});
    std::vector<T> out(static_cast<std::size_t>(g.o * p.nq * L));
#pragma omp for schedule(static)
    for (i64 n = 0; n < g.n; ++n) {
      copy_into_planes(x + n * g.c * g.h * g.w, g.c, g.h, g.w, in.data(), p.in_plane, p.row, offset);
      conv_planes(in.data(), p.in_plane, g.c, w, g.o, g.kh, g.kw, p.row, p.nq, out.data());
      T* yn = y + n * g.o * g.positions();
      for (i64 o = 0; o < g.o; ++o) {
        const T bias = b != nullptr ? b[o] : T{0};
        for (i64 oy = 0; oy < g.oh; ++oy) {
          const T* src = out.data() + o * p.nq * L + oy * p.row;
          T* dst = yn + (o * g.oh + oy) * g.ow;
          for (i64 ox = 0; ox < g.ow; ++ox) dst[ox] = src[ox] + bias;
        }
      }
    }
  }
}

template <typename T>
void direct_conv_backward(const ConvGeometry& g, const T* x, const T* w, const T* gy, T* dx,
                          T* dw, T* db) {
  constexpr i64 L = kLanes<T>;
  const Planes p = Planes::of<T>(g);
  const i64 kk = g.kh * g.kw, wsize = g.o * g.c * kk;
  const i64 offset = g.win.pad_h * p.row + g.win.pad_w;
  const i64 group = images_per_group(p, L);
  const i64 groups = (g.n + group - 1) / group;
  // Channels per weight-gradient tile, so that channels x taps accumulators fit.
  const int weight_grad_channels = std::min<int>(
      kMaxChannels, kMaxAccumulators / static_cast<int>(std::min<i64>(g.kw, kMaxTaps)));

  std::vector<T> flipped;  // wT [C][O][kH][kW], the input gradient's weights
  if (dx != nullptr) {
    flipped.resize(static_cast<std::size_t>(wsize));
    for (i64 o = 0; o < g.o; ++o)
      for (i64 c = 0; c < g.c; ++c)
        for (i64 t = 0; t < kk; ++t)
          flipped[(c * g.o + o) * kk + (kk - 1 - t)] = w[(o * g.c + c) * kk + t];
  }
  const bool parallel = split_images(g) && groups > 1;
  const int threads = parallel ? omp_get_max_threads() : 1;
  // Per-thread partial sums of the weight and bias gradients: [threads][O*C*kH*kW + O].
  std::vector<T> partial(static_cast<std::size_t>(threads * (wsize + g.o)), T{0});
#pragma omp parallel num_threads(threads) if (parallel)
  {
    T* pdw = partial.data() + omp_get_thread_num() * (wsize + g.o);
    T* pdb = pdw + wsize;
    const i64 in_image = g.c * p.in_plane, g_image = g.o * p.g_plane;
    std::vector<T> in(dw != nullptr ? static_cast<std::size_t>(group * in_image) : 0, T{0});
    std::vector<T> grad(static_cast<std::size_t>(group * g_image), T{0});
    std::vector<T> dxp(dx != nullptr ? static_cast<std::size_t>(g.c * p.nr * L) : 0);
#pragma omp for schedule(static)
    for (i64 gi = 0; gi < groups; ++gi) {
      const i64 n0 = gi * group, count = std::min(group, g.n - n0);
      for (i64 k = 0; k < count; ++k) {
        const T* gn = gy + (n0 + k) * g.o * g.positions();
        // gy at width row after `front` zeros; its dropped columns stay zero.
        copy_into_planes(gn, g.o, g.oh, g.ow, grad.data() + k * g_image, p.g_plane, p.row, p.front);
        if (db != nullptr) {
          for (i64 o = 0; o < g.o; ++o) pdb[o] += sum_of(gn + o * g.positions(), g.positions());
        }
        if (dw != nullptr) {
          copy_into_planes(x + (n0 + k) * g.c * g.h * g.w, g.c, g.h, g.w, in.data() + k * in_image,
                           p.in_plane, p.row, offset);
        }
      }
      if (dw != nullptr) {
        for_each_block(g.o, weight_grad_channels, [&](i64 o0, int ob) {
          for (i64 c = 0; c < g.c; ++c) {
            for (i64 i = 0; i < g.kh; ++i) {
              for_each_block(g.kw, kMaxTaps, [&](i64 j0, int jb) {
                with_blocks<kMaxChannels, kMaxTaps>(ob, jb, [&]<int OB, int JB>() {
                  if constexpr (OB * JB <= kMaxAccumulators) {
                    weight_grad_tile<T, OB, JB>(
                        grad.data() + o0 * p.g_plane + p.front, p.g_plane, g_image,
                        in.data() + c * p.in_plane + i * p.row + j0, in_image, count, p.nq,
                        pdw + ((o0 * g.c + c) * g.kh + i) * g.kw + j0, g.c * kk);
                  }
                });
              });
            }
          }
        });
      }
      if (dx != nullptr) {
        for (i64 k = 0; k < count; ++k) {
          conv_planes(grad.data() + k * g_image, p.g_plane, g.o, flipped.data(), g.c, g.kh, g.kw,
                      p.row, p.nr, dxp.data());
          T* dxn = dx + (n0 + k) * g.c * g.h * g.w;
          for (i64 c = 0; c < g.c; ++c) {
            for (i64 y = 0; y < g.h; ++y) {
              std::memcpy(dxn + (c * g.h + y) * g.w, dxp.data() + c * p.nr * L + offset + y * p.row,
                          g.w * sizeof(T));
            }
          }
        }
      }
    }
  }
  for (int t = 0; t < threads; ++t) {
    const T* part = partial.data() + t * (wsize + g.o);
    if (dw != nullptr) {
      for (i64 k = 0; k < wsize; ++k) dw[k] = (t == 0 ? T{0} : dw[k]) + part[k];
    }
    if (db != nullptr) {
      for (i64 o = 0; o < g.o; ++o) db[o] = (t == 0 ? T{0} : db[o]) + part[wsize + o];
    }
  }
}

template void direct_conv_forward<float>(const ConvGeometry&, const float*, const float*,
                                         const float*, float*);
template void direct_conv_forward<double>(const ConvGeometry&, const double*, const double*,
                                          const double*, double*);
template void direct_conv_backward<float>(const ConvGeometry&, const float*, const float*,
                                          const float*, float*, float*, float*);
template void direct_conv_backward<double>(const ConvGeometry&, const double*, const double*,
                                           const double*, double*, double*, double*);

}  // namespace tessera::detail
