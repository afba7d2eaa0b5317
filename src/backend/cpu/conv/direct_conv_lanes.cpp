// The images-in-lanes layout of the direct CPU convolution: a vector holds one position of
// kLanes images, so small planes waste no lanes. See Note [Direct convolution] in
// direct_conv.cpp.
#include "backend/cpu/conv/direct_conv_lanes.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "backend/cpu/conv/backward_driver.h"
#include "backend/cpu/conv/conv_threads.h"
#include "backend/cpu/conv/conv_tiles.h"

namespace tessera::detail::TESSERA_CPU_ISA {  // built once per level: cpu_backend.h
namespace {

using namespace conv_tiles;  // NOLINT: the tiles are this file's vocabulary

// Rows i and i + B of a kLanes x kLanes block exchange their B-wide blocks: after the stages
// B = kLanes / 2, ..., 2, 1 the block is transposed.
template <typename T, int B, int... Is>
inline void exchange_blocks(Vec<T>& lo, Vec<T>& hi, std::integer_sequence<int, Is...>) {
  constexpr int L = static_cast<int>(kLanes<T>);
  const Vec<T> a = lo, c = hi;
  lo = __builtin_shufflevector(a, c, ((Is & B) == 0 ? Is : L + Is - B)...);
  hi = __builtin_shufflevector(a, c, ((Is & B) == 0 ? Is + B : L + Is)...);
}
template <typename T, int B = static_cast<int>(kLanes<T>) / 2>
inline void transpose_block(Vec<T>* r) {
  if constexpr (B >= 1) {
    for (int i = 0; i < kLanes<T>; ++i) {
      if ((i & B) == 0) {
        exchange_blocks<T, B>(r[i], r[i + B], std::make_integer_sequence<int, kLanes<T>>{});
      }
    }
    transpose_block<T, B / 2>(r);
  }
}

// dst[e * L + k] = src[k * image + e] for e < n: images k < count into lanes; other lanes get 0.
template <typename T>
void transpose_in(const T* src, i64 image, i64 count, i64 n, T* dst) {
  constexpr i64 L = kLanes<T>;
  i64 e0 = 0;
  if (count == L) {
    for (; e0 + L <= n; e0 += L) {
      Vec<T> r[L];
      for (i64 k = 0; k < L; ++k) r[k] = load(src + k * image + e0);
      transpose_block<T>(r);
      for (i64 t = 0; t < L; ++t) store(dst + (e0 + t) * L, r[t]);
    }
  }
  for (i64 e = e0; e < n; ++e) {
    for (i64 k = 0; k < L; ++k) dst[e * L + k] = k < count ? src[k * image + e] : T{0};
  }
}

// dst[k * image + e] = src[e * L + k] for e < n and images k < count.
template <typename T>
void transpose_out(const T* src, i64 count, i64 n, T* dst, i64 image) {
  constexpr i64 L = kLanes<T>;
  i64 e0 = 0;
  if (count == L) {
    for (; e0 + L <= n; e0 += L) {
      Vec<T> r[L];
      for (i64 t = 0; t < L; ++t) r[t] = load(src + (e0 + t) * L);
      transpose_block<T>(r);
      for (i64 k = 0; k < L; ++k) store(dst + k * image + e0, r[k]);
    }
  }
  for (i64 k = 0; k < count; ++k) {
    for (i64 e = e0; e < n; ++e) dst[k * image + e] = src[e * L + k];
  }
}

// Writes images k < count of src (image elements apart, each [planes][h][w]) into lane k of
// dst [planes][rows][cols][L] at (top, left); unused lanes get 0 and dst's border is left as
// it is (zero). scratch holds planes * h * w * L elements when dst has a border.
template <typename T>
void to_lanes(const T* src, i64 image, i64 count, i64 planes, i64 h, i64 w, T* dst, i64 rows,
              i64 cols, i64 top, i64 left, T* scratch) {
  constexpr i64 L = kLanes<T>;
  if (rows == h && cols == w) return transpose_in(src, image, count, planes * h * w, dst);
  transpose_in(src, image, count, planes * h * w, scratch);
  for (i64 p = 0; p < planes; ++p) {
    for (i64 y = 0; y < h; ++y) {
      std::memcpy(dst + ((p * rows + y + top) * cols + left) * L, scratch + ((p * h + y) * w) * L,
                  static_cast<std::size_t>(w * L) * sizeof(T));
    }
  }
}

// The inverse for src [planes][h][w][L], after adding add[p] to plane p when add is not null:
// lane k goes to dst + k * image.
template <typename T>
void from_lanes(T* src, i64 count, i64 planes, i64 h, i64 w, const T* add, T* dst, i64 image) {
  constexpr i64 L = kLanes<T>;
  const i64 plane = h * w;
  if (add != nullptr) {
    for (i64 p = 0; p < planes; ++p) {
      for (i64 e = p * plane * L; e < (p + 1) * plane * L; ++e) src[e] += add[p];
    }
  }
  transpose_out(src, count, planes * plane, dst, image);
}

// out [cout][rows][cols][L] (rows [y0, y0 + rows) of the output, in full) from in, by tiles
// of channels x up to 4 positions along a row. Row y of the output reads input row
// y + in_top + i for tap i, column x + in_left + j, restricted to taps [i_lo(y), i_hi(y)).
template <typename T, typename Rows>
void conv_lane_rows(const T* in, const TileStrides& s, i64 in_cols, i64 cin, const T* w, i64 cout,
                    i64 kh, i64 kw, i64 rows, i64 cols, i64 in_top, i64 in_left, Rows tap_rows,
                    T* out) {
  constexpr i64 L = kLanes<T>;
  for_each_block(cout, kMaxChannels, [&](i64 o0, int ob) {
    for (i64 y = 0; y < rows; ++y) {
      // Not a structured binding: clang cannot capture one in an OpenMP region.
      const std::pair<i64, i64> taps = tap_rows(y);
      const i64 i_lo = taps.first, i_hi = taps.second;
      for_each_block(cols, kMaxVectors, [&](i64 x0, int qb) {
        with_blocks<kMaxChannels, kMaxVectors>(ob, qb, [&]<int OB, int QB>() {
          conv_tile<T, OB, QB>(in + ((y + in_top) * in_cols + x0 + in_left) * L,
                               w + o0 * cin * kh * kw, cin, kh, kw, i_lo, i_hi, s,
                               out + o0 * s.out_plane + (y * cols + x0) * L);
        });
      });
    }
  });
}

// The images-in-lanes algorithm of the backward driver (Note [Convolution backward driver]):
// kLanes images per unit.
template <typename T>
class LanesBackward {
 public:
  static constexpr std::size_t kBuffers = 4;  // input, output gradient, dx, transpose scratch
  static constexpr bool kFlipsWeights = true;
  using Unit = BackwardUnit<T, kBuffers>;
  static constexpr i64 L = kLanes<T>;

  explicit LanesBackward(const BackwardArgs<T>& a)
      : a_(a),
        g_(a.g),
        hp_(g_.h + 2 * g_.win.pad_h),
        wp_(g_.w + 2 * g_.win.pad_w),
        gh_(g_.oh + 2 * (g_.kh - 1)),
        gw_(g_.ow + 2 * (g_.kw - 1)) {}

  static T bias_sum(const T* plane, i64 n) { return sum_of(plane, n); }
  i64 images_per_unit() const { return L; }
  std::array<i64, kBuffers> buffer_sizes() const {
    return {a_.dw != nullptr ? g_.c * hp_ * wp_ * L : 0, g_.o * gh_ * gw_ * L,
            a_.dx != nullptr ? g_.c * g_.h * g_.w * L : 0,
            std::max(g_.c * g_.h * g_.w, g_.o * g_.positions()) * L};
  }

  // The output gradient in lanes, with kH - 1 rows and kW - 1 columns of zeros on each side.
  void start(const Unit& u) const {
    const i64 image = g_.o * g_.positions();
    to_lanes(a_.gy + u.n0 * image, image, u.count, g_.o, g_.oh, g_.ow, u.buffer[1], gh_, gw_,
             g_.kh - 1, g_.kw - 1, u.buffer[3]);
  }

  void weight_grad(const Unit& u) const {
    T* in = u.buffer[0];
    to_lanes(a_.x + u.n0 * g_.c * g_.h * g_.w, g_.c * g_.h * g_.w, u.count, g_.c, g_.h, g_.w, in,
             hp_, wp_, g_.win.pad_h, g_.win.pad_w, u.buffer[3]);
    // One run per output row: dw[o][c][i][j] = sum over (y, x) of
    // gy[o][y][x] * in[c][y + i][x + j].
    const RunStrides s{gh_ * gw_ * L, gw_ * L, wp_ * L, L, g_.oh, g_.ow};
    const T* grad = u.buffer[1];
    for_each_block(g_.o, weight_grad_channels(g_.kw), [&](i64 o0, int ob) {
      weight_grad_tiles(grad + (o0 * gh_ * gw_ + (g_.kh - 1) * gw_ + g_.kw - 1) * L, in,
                        hp_ * wp_ * L, wp_ * L, o0, ob, g_.c, g_.kh, g_.kw, s, u.dw);
    });
  }

  void input_grad(const Unit& u) const {
    // Input-gradient row y (padded row y + pad_h) takes taps i whose gradient row
    // y + pad_h + i lies in [kH - 1, kH - 1 + OH); the others read zeros.
    const auto gradient_taps = [&](i64 yy) {
      const i64 yp = yy + g_.win.pad_h;
      return std::pair<i64, i64>{std::max<i64>(0, g_.kh - 1 - yp),
                                 std::min<i64>(g_.kh, g_.kh - 1 + g_.oh - yp)};
    };
    T* dxl = u.buffer[2];
    const TileStrides s{gh_ * gw_ * L, gw_ * L, L, g_.h * g_.w * L};
    conv_lane_rows(u.buffer[1], s, gw_, g_.o, u.flipped, g_.c, g_.kh, g_.kw, g_.h, g_.w,
                   g_.win.pad_h, g_.win.pad_w, gradient_taps, dxl);
    from_lanes(dxl, u.count, g_.c, g_.h, g_.w, static_cast<const T*>(nullptr),
               a_.dx + u.n0 * g_.c * g_.h * g_.w, g_.c * g_.h * g_.w);
  }

 private:
  BackwardArgs<T> a_;
  const ConvGeometry& g_;
  i64 hp_, wp_, gh_, gw_;
};

}  // namespace

template <typename T>
void lanes_conv_forward(const ConvGeometry& g, const T* x, const T* w, const T* b, T* y) {
  constexpr i64 L = kLanes<T>;
  const i64 hp = g.h + 2 * g.win.pad_h, wp = g.w + 2 * g.win.pad_w;
  const i64 groups = (g.n + L - 1) / L;
  const TileStrides s{hp * wp * L, wp * L, L, g.oh * g.ow * L};
  const auto all_taps = [&](i64) { return std::pair<i64, i64>{0, g.kh}; };
  const bool parallel = splits_images(g) && groups > 1;
  const int threads = parallel ? omp_get_max_threads() : 1;
  ThreadBuffers<T, 3> buffers(threads,
                              {g.c * hp * wp * L, g.c * g.h * g.w * L, g.o * g.oh * g.ow * L});
#pragma omp parallel num_threads(threads) if (parallel)
  {
    T* in = buffers.get(omp_get_thread_num(), 0);
    T* scratch = buffers.get(omp_get_thread_num(), 1);
    T* out = buffers.get(omp_get_thread_num(), 2);
#pragma omp for schedule(static)
    for (i64 gi = 0; gi < groups; ++gi) {
      const i64 n0 = gi * L, count = std::min(L, g.n - n0);
      to_lanes(x + n0 * g.c * g.h * g.w, g.c * g.h * g.w, count, g.c, g.h, g.w, in, hp, wp,
               g.win.pad_h, g.win.pad_w, scratch);
      conv_lane_rows(in, s, wp, g.c, w, g.o, g.kh, g.kw, g.oh, g.ow, 0, 0, all_taps, out);
      from_lanes(out, count, g.o, g.oh, g.ow, b, y + n0 * g.o * g.positions(), g.o * g.positions());
    }
  }
}

template <typename T>
void lanes_conv_backward(const ConvGeometry& g, const T* x, const T* w, const T* gy, T* dx, T* dw,
                         T* db) {
  const BackwardArgs<T> args{g, x, w, gy, dx, dw, db};
  run_conv_backward(args, LanesBackward<T>(args));
}

template void lanes_conv_forward<float>(const ConvGeometry&, const float*, const float*,
                                        const float*, float*);
template void lanes_conv_forward<double>(const ConvGeometry&, const double*, const double*,
                                         const double*, double*);
template void lanes_conv_backward<float>(const ConvGeometry&, const float*, const float*,
                                         const float*, float*, float*, float*);
template void lanes_conv_backward<double>(const ConvGeometry&, const double*, const double*,
                                          const double*, double*, double*, double*);

}  // namespace tessera::detail::TESSERA_CPU_ISA
