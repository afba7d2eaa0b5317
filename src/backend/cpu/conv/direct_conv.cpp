// Direct CPU convolution (stride 1, few channels): the choice between its two layouts, and
// the first of them, flat padded planes.
#include "backend/cpu/conv/direct_conv.h"

#include <omp.h>

#include <algorithm>
#include <array>

#include "backend/cpu/conv/backward_driver.h"
#include "backend/cpu/conv/conv_threads.h"
#include "backend/cpu/conv/conv_tiles.h"
#include "backend/cpu/conv/direct_conv_lanes.h"

// Note [Direct convolution]
// With stride 1, there are two layouts in which every tap (i, j) of a convolution reads its
// input as one contiguous run, so the work vectorizes with unaligned loads and broadcast
// weights, with no im2col matrix and no GEMM call (whose packing dominates at LeNet's
// channel counts):
//
// Flat planes (this file). Copy each input plane into a zero-padded plane of width
// row = W + 2 pw, flattened. Output (oy, ox) reads the input at flat index
// (oy * row + ox) + (i * row + j), so the output is computed at every flat position
// q = oy * row + ox, ox < row, as
//     out[o][q] = sum over c, i, j of w[o][c][i][j] * in[c][q + i * row + j]
// vectorized over q. The kW - 1 columns per row with ox >= OW are wasted work (12% for
// LeNet's first layer) and are dropped when the result is copied out. The gradients:
// - dw[o][c][i][j] = sum over q of gy[o][q] * in[c][q + i * row + j], with gy written at
//   width row and zeros in the dropped columns: dot products over q, summed across lanes
//   once per group of images.
// - dx is a convolution of gy, padded with Z = (kH - 1) * row + kW - 1 zeros in front, by
//   the flipped, transposed weights wT[c][o][i][j] = w[o][c][kH-1-i][kW-1-j]: a tap that
//   would wrap into the next row reads a dropped column, which is zero. So it is the forward
//   kernel again, with O input and C output channels, over the padded input plane; the taps
//   that read padding are wasted work (half of it for LeNet's second layer).
//
// Images in lanes (direct_conv_lanes.cpp). Where the flat planes would waste much (small
// planes: LeNet's second layer, 10 of every 14 columns), a vector holds one position of
// kLanes images: the input is transposed to [C][H][W][image], and the same tiles run over
// the valid positions only. The input gradient skips the rows of taps that read padding.
// The transposes cost less than the waste they remove.
//
// In both, register tiles of up to 6 output channels x 4 vectors (conv_tiles.h) accumulate
// over every tap. Images are split across the OpenMP pool; each thread has its own buffers
// and, in the backward pass, partial weight gradient, summed in thread order (deterministic
// for a given thread count) by the backward driver (Note [Convolution backward driver]).

namespace tessera::detail::TESSERA_CPU_ISA {  // built once per level: cpu_backend.h
namespace {

using namespace conv_tiles;  // NOLINT: the tiles are this file's vocabulary

inline i64 round_up(i64 v, i64 m) { return (v + m - 1) / m * m; }

// The flat-plane sizes of one convolution.
struct Planes {
  i64 row;       // padded width
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
    p.nq = (g.oh * p.row + L - 1) / L;
    p.in_plane = round_up(p.nq * L - 1 + (g.kh - 1) * p.row + g.kw, L);
    p.nr = ((g.h + 2 * g.win.pad_h) * p.row + L - 1) / L;
    p.front = (g.kh - 1) * p.row + (g.kw - 1);
    p.g_plane = round_up(p.nr * L + p.front, L);
    return p;
  }
};

// out [cout][nq * L] = the flat convolution of in [cin][in_plane] by w [cout][cin][kh][kw].
template <typename T>
void conv_planes(const T* in, i64 in_plane, i64 cin, const T* w, i64 cout, i64 kh, i64 kw, i64 row,
                 i64 nq, T* out) {
  constexpr i64 L = kLanes<T>;
  const TileStrides s{in_plane, row, 1, nq * L};
  for_each_block(cout, kMaxChannels, [&](i64 o0, int ob) {
    for_each_block(nq, kMaxVectors, [&](i64 v0, int qb) {
      with_blocks<kMaxChannels, kMaxVectors>(ob, qb, [&]<int OB, int QB>() {
        conv_tile<T, OB, QB>(in + v0 * L, w + o0 * cin * kh * kw, cin, kh, kw, 0, kh, s,
                             out + o0 * s.out_plane + v0 * L);
      });
    });
  });
}

// Copies each [h, w] plane of src into the flat buffer at offset, rows `row` apart, planes
// dst_plane apart. Rows are short (an image row), so a loop beats a memcpy call.
template <typename T>
void copy_into_planes(const T* src, i64 planes, i64 h, i64 w, T* dst, i64 dst_plane, i64 row,
                      i64 offset) {
  for (i64 p = 0; p < planes; ++p) {
    for (i64 y = 0; y < h; ++y) {
      T* d = dst + p * dst_plane + offset + y * row;
      const T* s = src + (p * h + y) * w;
      for (i64 x = 0; x < w; ++x) d[x] = s[x];
    }
  }
}

// Images per group in the backward pass: enough positions that the weight gradient's
// lane sums are a small part of its dot products.
i64 images_per_group(const Planes& p, i64 lanes) {
  return std::clamp<i64>(512 / (p.nq * lanes), 1, 8);
}

template <typename T>
void flat_forward(const ConvGeometry& g, const T* x, const T* w, const T* b, T* y) {
  constexpr i64 L = kLanes<T>;
  const Planes p = Planes::of<T>(g);
  const i64 offset = g.win.pad_h * p.row + g.win.pad_w;  // where the unpadded plane starts
  const bool parallel = splits_images(g);
  const int threads = parallel ? omp_get_max_threads() : 1;
  ThreadBuffers<T, 2> buffers(threads, {g.c * p.in_plane, g.o * p.nq * L});
#pragma omp parallel num_threads(threads) if (parallel)
  {
    T* in = buffers.get(omp_get_thread_num(), 0);
    T* out = buffers.get(omp_get_thread_num(), 1);
#pragma omp for schedule(static)
    for (i64 n = 0; n < g.n; ++n) {
      copy_into_planes(x + n * g.c * g.h * g.w, g.c, g.h, g.w, in, p.in_plane, p.row, offset);
      conv_planes(in, p.in_plane, g.c, w, g.o, g.kh, g.kw, p.row, p.nq, out);
      T* yn = y + n * g.o * g.positions();
      for (i64 o = 0; o < g.o; ++o) {
        const T bias = b != nullptr ? b[o] : T{0};
        for (i64 oy = 0; oy < g.oh; ++oy) {
          const T* src = out + o * p.nq * L + oy * p.row;
          T* dst = yn + (o * g.oh + oy) * g.ow;
          for (i64 ox = 0; ox < g.ow; ++ox) dst[ox] = src[ox] + bias;
        }
      }
    }
  }
}

// The flat-plane algorithm of the backward driver (Note [Convolution backward driver]):
// groups of images_per_group images per unit.
template <typename T>
class FlatBackward {
 public:
  static constexpr std::size_t kBuffers = 3;  // input planes, gradient planes, dx planes
  static constexpr bool kFlipsWeights = true;
  using Unit = BackwardUnit<T, kBuffers>;
  static constexpr i64 L = kLanes<T>;

  explicit FlatBackward(const BackwardArgs<T>& a)
      : a_(a),
        g_(a.g),
        p_(Planes::of<T>(a.g)),
        offset_(g_.win.pad_h * p_.row + g_.win.pad_w),
        group_(images_per_group(p_, L)),
        in_image_(g_.c * p_.in_plane),
        g_image_(g_.o * p_.g_plane) {}

  static T bias_sum(const T* plane, i64 n) { return sum_of(plane, n); }
  i64 images_per_unit() const { return group_; }
  std::array<i64, kBuffers> buffer_sizes() const {
    return {a_.dw != nullptr ? group_ * in_image_ : 0, group_ * g_image_,
            a_.dx != nullptr ? g_.c * p_.nr * L : 0};
  }

  // gy at width row after `front` zeros; its dropped columns stay zero.
  void start(const Unit& u) const {
    for (i64 k = 0; k < u.count; ++k) {
      copy_into_planes(a_.gy + (u.n0 + k) * g_.o * g_.positions(), g_.o, g_.oh, g_.ow,
                       u.buffer[1] + k * g_image_, p_.g_plane, p_.row, p_.front);
    }
  }

  void weight_grad(const Unit& u) const {
    T* in = u.buffer[0];
    for (i64 k = 0; k < u.count; ++k) {
      copy_into_planes(a_.x + (u.n0 + k) * g_.c * g_.h * g_.w, g_.c, g_.h, g_.w, in + k * in_image_,
                       p_.in_plane, p_.row, offset_);
    }
    // One run per image of the group.
    const RunStrides s{p_.g_plane, g_image_, in_image_, 1, u.count, p_.nq};
    const T* grad = u.buffer[1];
    for_each_block(g_.o, weight_grad_channels(g_.kw), [&](i64 o0, int ob) {
      weight_grad_tiles(grad + o0 * p_.g_plane + p_.front, in, p_.in_plane, p_.row, o0, ob, g_.c,
                        g_.kh, g_.kw, s, u.dw);
    });
  }

  void input_grad(const Unit& u) const {
    T* dxp = u.buffer[2];
    for (i64 k = 0; k < u.count; ++k) {
      conv_planes(u.buffer[1] + k * g_image_, p_.g_plane, g_.o, u.flipped, g_.c, g_.kh, g_.kw,
                  p_.row, p_.nr, dxp);
      T* dxn = a_.dx + (u.n0 + k) * g_.c * g_.h * g_.w;
      for (i64 c = 0; c < g_.c; ++c) {
        for (i64 yy = 0; yy < g_.h; ++yy) {
          const T* src = dxp + c * p_.nr * L + offset_ + yy * p_.row;
          T* dst = dxn + (c * g_.h + yy) * g_.w;
          for (i64 xx = 0; xx < g_.w; ++xx) dst[xx] = src[xx];
        }
      }
    }
  }

 private:
  BackwardArgs<T> a_;
  const ConvGeometry& g_;
  Planes p_;
  i64 offset_, group_, in_image_, g_image_;
};

// Images in lanes where flat planes would waste more than a quarter of the work (their
// padded width over the output's), with at least two groups of images to split.
template <typename T>
bool prefers_lanes(const ConvGeometry& g) {
  const i64 row = g.w + 2 * g.win.pad_w;
  return g.n >= 2 * kLanes<T> && 4 * row > 5 * g.ow;
}

}  // namespace

bool direct_conv_applies(const ConvGeometry& g) {
  const i64 row = g.w + 2 * g.win.pad_w;
  return g.win.stride_h == 1 && g.win.stride_w == 1 && !g.is_pointwise() && g.c <= 32 &&
         g.o <= 64 && g.positions() > 0 && g.ck() > 0 && 2 * g.ow >= row;
}

template <typename T>
void direct_conv_forward(const ConvGeometry& g, const T* x, const T* w, const T* b, T* y) {
  if (prefers_lanes<T>(g)) return lanes_conv_forward(g, x, w, b, y);
  flat_forward(g, x, w, b, y);
}

template <typename T>
void direct_conv_backward(const ConvGeometry& g, const T* x, const T* w, const T* gy, T* dx, T* dw,
                          T* db) {
  if (prefers_lanes<T>(g)) return lanes_conv_backward(g, x, w, gy, dx, dw, db);
  const BackwardArgs<T> args{g, x, w, gy, dx, dw, db};
  run_conv_backward(args, FlatBackward<T>(args));
}

template void direct_conv_forward<float>(const ConvGeometry&, const float*, const float*,
                                         const float*, float*);
template void direct_conv_forward<double>(const ConvGeometry&, const double*, const double*,
                                          const double*, double*);
template void direct_conv_backward<float>(const ConvGeometry&, const float*, const float*,
                                          const float*, float*, float*, float*);
template void direct_conv_backward<double>(const ConvGeometry&, const double*, const double*,
                                           const double*, double*, double*, double*);

}  // namespace tessera::detail::TESSERA_CPU_ISA
