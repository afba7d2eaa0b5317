// CPU convolution by im2col + GEMM per image, images split across the OpenMP pool (each
// GEMM then runs single-threaded inside the parallel region). See Note [CPU convolution].
#include "backend/cpu/conv/im2col_conv.h"

#include <cblas.h>
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <optional>
#include <type_traits>
#include <vector>

#include "backend/cpu/bf16_product.h"
#include "backend/cpu/conv/backward_driver.h"
#include "backend/cpu/conv/conv_threads.h"
#include "backend/cpu/half_convert.h"
#include "core/check.h"

// Note [CPU convolution]
// Stride-1 convolutions with few channels (LeNet's 1->6 and 6->16) take the direct path
// (Note [Direct convolution]; with it and a faster sigmoid, a LeNet epoch went from 3.4 to
// 1.2 s). Of the rest, float32 and bfloat16 ones but 1x1 run on oneDNN's convolution
// primitives from the AVX2 level up (Note [oneDNN convolutions] in onednn_conv.cpp); float64,
// 1x1, the x86-64 level and TESSERA_CPU_ONEDNN_CONV=0 run here. For image n, col_n [C*kH*kW, OH*OW]
// holds the input patch under each output position, so out_n [O, OH*OW] = W [O, C*kH*kW] @ col_n,
// and the gradients are two more GEMMs: dW += g_n @ col_n^T and dcol = W^T @ g_n, which col2im adds
// back into dx_n. Parallelism comes from the batch rather than from inside one GEMM. The
// weight gradient is summed per thread and then across threads in thread order by the
// backward driver (Note [Convolution backward driver]). The backward pass recomputes each image's
// columns rather than keeping the batch's from the forward pass: keeping them (35 MiB per
// LeNet step) measured no faster (docs/benchmarks.md).

namespace tessera::detail::TESSERA_CPU_ISA {  // built once per level: cpu_backend.h
namespace {

using i64 = std::int64_t;

using Geometry = ConvGeometry;

// The output columns [lo, hi) whose input column ox * stride - pad + j lies inside [0, w).
struct ColumnRange {
  i64 lo, hi;
};
inline ColumnRange valid_columns(const Geometry& g, i64 j) {
  const i64 s = g.win.stride_w, off = g.win.pad_w - j;  // input column = ox * s - off
  const i64 lo = off > 0 ? (off + s - 1) / s : 0;
  const i64 hi = g.w + off > 0 ? std::min<i64>((g.w - 1 + off) / s + 1, g.ow) : 0;
  return {std::min(lo, g.ow), std::max(std::min(lo, g.ow), hi)};
}

// Note [Columns as one run]
// With stride 1 and output rows as wide as the input's (a "same" convolution: 3x3 with
// padding 1, ...), the rows of one (c, i, j) block of col are consecutive input rows shifted
// by j - pad_w: the block is one contiguous run of x, but for the columns that fall in the
// padding, which then hold the neighbouring row's elements and are zeroed after. One long
// copy (or add) instead of one short loop per output row: im2col of a bfloat16 [64, 32, 32]
// image was 40% of its convolution's products, at 25 cycles an output row.
inline bool rows_run_on(const Geometry& g) {
  return g.win.stride_h == 1 && g.win.stride_w == 1 && g.ow == g.w;
}

// The block (c, i, j) in that case: output rows [oy0, oy1) read input rows (the rest are
// padding), output columns [lo, hi) input columns; element d of the block (d = oy * ow + ox)
// is x[d + shift] within the plane of channel c.
struct RowRun {
  i64 oy0, oy1, lo, hi, shift;
  bool empty() const { return oy0 >= oy1 || lo >= hi; }
  i64 begin(i64 ow) const { return oy0 * ow + lo; }
  i64 end(i64 ow) const { return (oy1 - 1) * ow + hi; }
};
inline RowRun row_run(const Geometry& g, i64 i, i64 j) {
  const ColumnRange r = valid_columns(g, j);
  return {std::max<i64>(0, g.win.pad_h - i), std::min<i64>(g.oh, g.h + g.win.pad_h - i), r.lo, r.hi,
          (i - g.win.pad_h) * g.w + (j - g.win.pad_w)};
}

template <typename T>
void im2col(const Geometry& g, const T* x, T* col) {
  const i64 p = g.positions(), s = g.win.stride_w;
  const bool runs = rows_run_on(g);
  for (i64 c = 0; c < g.c; ++c) {
    for (i64 i = 0; i < g.kh; ++i) {
      for (i64 j = 0; j < g.kw; ++j) {
        T* row = col + ((c * g.kh + i) * g.kw + j) * p;
        if (runs) {  // Note [Columns as one run]
          const RowRun run = row_run(g, i, j);
          if (run.empty()) {
            std::fill(row, row + p, T{0});
            continue;
          }
          const i64 begin = run.begin(g.ow), end = run.end(g.ow);
          std::fill(row, row + begin, T{0});
          std::copy(x + c * g.h * g.w + run.shift + begin, x + c * g.h * g.w + run.shift + end,
                    row + begin);
          std::fill(row + end, row + p, T{0});
          for (i64 oy = run.oy0; oy < run.oy1; ++oy) {  // the padding's columns
            std::fill(row + oy * g.ow, row + oy * g.ow + run.lo, T{0});
            std::fill(row + oy * g.ow + run.hi, row + (oy + 1) * g.ow, T{0});
          }
          continue;
        }
        const ColumnRange r = valid_columns(g, j);
        for (i64 oy = 0; oy < g.oh; ++oy) {
          const i64 y = oy * g.win.stride_h - g.win.pad_h + i;
          T* dst = row + oy * g.ow;
          if (y < 0 || y >= g.h) {
            std::fill(dst, dst + g.ow, T{0});
            continue;
          }
          const i64 base = (c * g.h + y) * g.w - g.win.pad_w + j;  // x[base + ox * s]: column ox
          std::fill(dst, dst + r.lo, T{0});
          // Runs are short (an output row), so a plain loop beats a memmove call.
          if (s == 1) {
            for (i64 ox = r.lo; ox < r.hi; ++ox) dst[ox] = x[base + ox];
          } else if (s == 2) {  // a constant stride vectorizes (a variable one did not: the
                                // copy took 30% of a stride-2 3x3 convolution of 64 channels)
            for (i64 ox = r.lo; ox < r.hi; ++ox) dst[ox] = x[base + 2 * ox];
          } else {
            for (i64 ox = r.lo; ox < r.hi; ++ox) dst[ox] = x[base + ox * s];
          }
          std::fill(dst + r.hi, dst + g.ow, T{0});
        }
      }
    }
  }
}

// dx += col2im(col): the inverse scatter of im2col, adding where windows overlap. col is
// scratch: the one-run path zeroes its padding columns, then adds each block in one run.
template <typename T>
void col2im_add(const Geometry& g, T* col, T* dx) {
  const i64 p = g.positions(), s = g.win.stride_w;
  const bool runs = rows_run_on(g);
  for (i64 c = 0; c < g.c; ++c) {
    for (i64 i = 0; i < g.kh; ++i) {
      for (i64 j = 0; j < g.kw; ++j) {
        T* row = col + ((c * g.kh + i) * g.kw + j) * p;
        if (runs) {  // Note [Columns as one run]
          const RowRun run = row_run(g, i, j);
          if (run.empty()) continue;
          for (i64 oy = run.oy0; oy < run.oy1; ++oy) {  // they would add to the next row's
            std::fill(row + oy * g.ow, row + oy * g.ow + run.lo, T{0});
            std::fill(row + oy * g.ow + run.hi, row + (oy + 1) * g.ow, T{0});
          }
          T* plane = dx + c * g.h * g.w + run.shift;
          for (i64 d = run.begin(g.ow), end = run.end(g.ow); d < end; ++d) plane[d] += row[d];
          continue;
        }
        const ColumnRange r = valid_columns(g, j);
        for (i64 oy = 0; oy < g.oh; ++oy) {
          const i64 y = oy * g.win.stride_h - g.win.pad_h + i;
          if (y < 0 || y >= g.h) continue;
          const i64 base = (c * g.h + y) * g.w - g.win.pad_w + j;
          const T* src = row + oy * g.ow;
          if (s == 1) {  // contiguous: vectorizes (a strided loop did not, and cost as much as
                         // the product dcol = W^T g)
            for (i64 ox = r.lo; ox < r.hi; ++ox) dx[base + ox] += src[ox];
          } else {
            for (i64 ox = r.lo; ox < r.hi; ++ox) dx[base + ox * s] += src[ox];
          }
        }
      }
    }
  }
}

// Row-major C [m, n] = op(A) op(B) + beta C, single-threaded inside a parallel region.
// float32 products of some size go to oneDNN, as matmul's do (Note [CPU GEMM choice] in
// cpu_matmul.cpp): Debian's OpenBLAS 0.3.21 runs its Haswell kernel on AVX-512 CPUs, and a
// 3x3 convolution of 64 channels took twice PyTorch's time, most of it in that kernel.
template <typename T>
void gemm(bool ta, bool tb, i64 m, i64 n, i64 k, const T* a, i64 lda, const T* b, i64 ldb, T beta,
          T* c, i64 ldc) {
  const auto opa = ta ? CblasTrans : CblasNoTrans, opb = tb ? CblasTrans : CblasNoTrans;
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  if constexpr (std::is_same_v<T, float>) {
    constexpr i64 kDnnlMinWork = 32768;  // as matmul's: below it a call's cost dominates
    // Inside a parallel region nothing may throw: a failed call (out of memory for oneDNN's
    // packing) falls back to OpenBLAS, which needs no memory of its own here.
    if (m * n * k >= kDnnlMinWork && dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, a,
                                                lda, b, ldb, beta, c, ldc) == dnnl_success) {
      return;
    }
    cblas_sgemm(CblasRowMajor, opa, opb, mi, ni, ki, 1.0f, a, static_cast<int>(lda), b,
                static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, opa, opb, mi, ni, ki, 1.0, a, static_cast<int>(lda), b,
                static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
  }
}

// The im2col algorithm of the backward driver (Note [Convolution backward driver]): one image
// per unit; dW += g_n @ col_n^T, and dcol = W^T @ g_n added back into dx_n by col2im.
template <typename T>
class Im2colBackward {
 public:
  static constexpr std::size_t kBuffers = 1;
  static constexpr bool kFlipsWeights = false;
  using Unit = BackwardUnit<T, kBuffers>;

  explicit Im2colBackward(const BackwardArgs<T>& a) : a_(a), g_(a.g) {}

  static T bias_sum(const T* plane, i64 n) {
    T s{0};
    for (i64 q = 0; q < n; ++q) s += plane[q];
    return s;
  }
  i64 images_per_unit() const { return 1; }
  std::array<i64, kBuffers> buffer_sizes() const { return {g_.ck() * g_.positions()}; }
  void start(const Unit&) const {}

  void weight_grad(const Unit& u) const {
    const i64 ck = g_.ck(), p = g_.positions();
    if (ck == 0 || p == 0) return;
    const T* xn = a_.x + u.n0 * g_.c * g_.h * g_.w;
    const T* cn = xn;
    if (!g_.is_pointwise()) {
      im2col(g_, xn, u.buffer[0]);
      cn = u.buffer[0];
    }
    gemm<T>(false, true, g_.o, ck, p, a_.gy + u.n0 * g_.o * p, p, cn, p, T{1}, u.dw, ck);
  }

  void input_grad(const Unit& u) const {
    const i64 ck = g_.ck(), p = g_.positions();
    if (ck == 0 || p == 0) return;
    const T* gn = a_.gy + u.n0 * g_.o * p;
    T* dxn = a_.dx + u.n0 * g_.c * g_.h * g_.w;
    if (g_.is_pointwise()) {
      gemm<T>(true, false, ck, p, g_.o, a_.w, ck, gn, p, T{1}, dxn, p);
    } else {
      T* col = u.buffer[0];
      gemm<T>(true, false, ck, p, g_.o, a_.w, ck, gn, p, T{0}, col, p);
      col2im_add(g_, col, dxn);
    }
  }

 private:
  BackwardArgs<T> a_;
  const ConvGeometry& g_;
};

}  // namespace

template <typename T>
void im2col_conv_forward(const ConvGeometry& g, const T* x, const T* w, const T* b, T* y) {
  const i64 ck = g.ck(), p = g.positions();
  const bool parallel = splits_images(g);
  const int threads = parallel ? omp_get_max_threads() : 1;
  ThreadBuffers<T, 1> buffers(threads, {g.is_pointwise() ? 0 : ck * p}, BufferStart::kUnset);
#pragma omp parallel num_threads(threads) if (parallel)
  {
    T* col = buffers.get(omp_get_thread_num(), 0);
#pragma omp for schedule(static)
    for (i64 n = 0; n < g.n; ++n) {
      const T* xn = x + n * g.c * g.h * g.w;
      T* yn = y + n * g.o * p;
      const T* cn = xn;
      if (!g.is_pointwise()) {
        im2col(g, xn, col);
        cn = col;
      }
      if (b != nullptr) {
        for (i64 o = 0; o < g.o; ++o) std::fill(yn + o * p, yn + (o + 1) * p, b[o]);
      }
      if (ck == 0) {
        if (b == nullptr) std::fill(yn, yn + g.o * p, T{0});
        continue;
      }
      gemm<T>(false, false, g.o, p, ck, w, ck, cn, p, b != nullptr ? T{1} : T{0}, yn, p);
    }
  }
}

// Note [bfloat16 convolution]
// Where the CPU multiplies bfloat16 natively (AVX512-BF16: Note [CPU bfloat16 GEMM]), a
// bfloat16 convolution of the im2col path builds each image's columns in bfloat16 (half the
// bytes) and multiplies them by the bfloat16 weights in oneDNN's bfloat16 product: exact
// products summed in float32, the bias added to the float32 sums, rounded once into the
// output, as the float32 copies' convolution computes (up to the order of the sums). It ran
// at 2.3x PyTorch's time through the copies. The backward pass takes the bfloat16 input and
// weight that the forward saved (Note [bfloat16 convolution backward]), so writing them in
// place before backward is refused, as for float32 (the copies' path kept copies).
// vdpbf16ps treats subnormal inputs and products as zero, as the bfloat16 matmul does and
// PyTorch's bfloat16 convolution on the same CPU: a product below float32's normal range
// (1e-20 x 1e-20) is 0 here and 3.6e-38 through the copies.
void im2col_conv_forward_bf16(const ConvGeometry& g, const BFloat16* x, const BFloat16* w,
                              const BFloat16* b, BFloat16* y) {
  const i64 ck = g.ck(), p = g.positions();
  if (ck == 0) {
    for (i64 n = 0; n < g.n; ++n) {
      for (i64 o = 0; o < g.o; ++o) {
        std::fill(y + (n * g.o + o) * p, y + (n * g.o + o + 1) * p, b ? b[o] : BFloat16(0.0f));
      }
    }
    return;
  }
  const bool parallel = splits_images(g);
  const int threads = parallel ? omp_get_max_threads() : 1;
  // Made before the parallel region (a failure there throws; inside one it would end the
  // process), with each thread's columns and float32 sums.
  const Bf16Product product(g.o, p, ck, ck, p);
  ThreadBuffers<BFloat16, 1> columns(threads, {g.is_pointwise() ? 0 : ck * p}, BufferStart::kUnset);
  ThreadBuffers<float, 1> sums(threads, {g.o * p}, BufferStart::kUnset);
  bool failed = false;
#pragma omp parallel num_threads(threads) if (parallel)
  {
    BFloat16* col = columns.get(omp_get_thread_num(), 0);
    float* acc = sums.get(omp_get_thread_num(), 0);
#pragma omp for schedule(static)
    for (i64 n = 0; n < g.n; ++n) {
      const BFloat16* xn = x + n * g.c * g.h * g.w;
      const BFloat16* cn = xn;
      if (!g.is_pointwise()) {
        // As the bits they are (zero bits are 0.0): the loops over the struct did not
        // vectorize, and took as long as the product.
        im2col(g, reinterpret_cast<const std::uint16_t*>(xn),
               reinterpret_cast<std::uint16_t*>(col));
        cn = col;
      }
      if (!product.run(w, cn, acc)) {
#pragma omp atomic write
        failed = true;
        continue;
      }
      BFloat16* yn = y + n * g.o * p;
      for (i64 o = 0; o < g.o; ++o) {
        float* row = acc + o * p;
        if (b != nullptr) {
          const float bias = static_cast<float>(b[o]);
          for (i64 q = 0; q < p; ++q) row[q] += bias;
        }
        float_to_half(row, yn + o * p, p);
      }
    }
  }
  TESSERA_CHECK(!failed, Error,
                "[conv2d] oneDNN's bfloat16 product failed for a convolution of {} images of "
                "[{}, {}, {}] by {} filters of {}x{} (out of memory?); "
                "TESSERA_CPU_BF16_MATMUL=0 convolves bfloat16 in float32 copies instead",
                g.n, g.c, g.h, g.w, g.o, g.kh, g.kw);
}

template <typename T>
void im2col_conv_backward(const ConvGeometry& g, const T* x, const T* w, const T* gy, T* dx, T* dw,
                          T* db) {
  if (dx != nullptr) std::fill(dx, dx + g.n * g.c * g.h * g.w, T{0});  // col2im adds into it
  const BackwardArgs<T> args{g, x, w, gy, dx, dw, db};
  run_conv_backward(args, Im2colBackward<T>(args));
}

// Note [bfloat16 convolution backward]
// The gradients of a bfloat16 convolution of the im2col path (Note [bfloat16 convolution]),
// from the bfloat16 input, weight and output gradient as they are, in oneDNN's bfloat16
// product: per image, dW_n = g_n col_n^T and dcol_n = W^T g_n, exact products summed in
// float32; the weight and bias gradients summed over the images in float32 (per thread, then
// in thread order, as the backward driver does: Note [Convolution backward driver]) and each
// image's input gradient added up by col2im in float32, every gradient rounded once. The
// float32 copies' pass computes the same sums in another order: the gradients agree with it
// within a unit in the last place (two where a sum cancels to far below its terms: both are
// then within float32's error of the exact value), the bias gradient bit for bit. Products
// below float32's normal range are zero, as in the forward pass and PyTorch's bfloat16
// convolution gradients on the same CPU. Not the driver itself: its sums, buffers and outputs
// share one type, and here they are float32 beside bfloat16. Through the copies, a
// [8, 64, 32, 32] 3x3 convolution's forward and backward took 2.2x PyTorch's time (1.13x now:
// docs/benchmarks.md).
void im2col_conv_backward_bf16(const ConvGeometry& g, const BFloat16* x, const BFloat16* w,
                               const BFloat16* gy, BFloat16* dx, BFloat16* dw, BFloat16* db) {
  const i64 ck = g.ck(), p = g.positions(), plane = g.c * g.h * g.w, wsize = g.o * ck;
  // No output channels: the gradients are zeros (oneDNN refuses products with a zero size).
  const bool products = ck > 0 && p > 0 && g.o > 0;
  const bool parallel = splits_images(g);
  const int threads = parallel ? omp_get_max_threads() : 1;
  // Made before the parallel region (a failure there throws; inside one it would end the
  // process), as are every thread's buffers.
  std::optional<Bf16Product> weight_product, input_product;
  if (products && dw != nullptr) weight_product.emplace(g.o, ck, p, p, p, false, true);
  if (products && dx != nullptr) input_product.emplace(ck, p, g.o, ck, p, true, false);
  ThreadBuffers<BFloat16, 1> columns(threads, {weight_product && !g.is_pointwise() ? ck * p : 0},
                                     BufferStart::kUnset);
  // The product's float32 sums (dW_n or dcol_n), and the image's input gradient.
  ThreadBuffers<float, 2> scratch(threads,
                                  {std::max(weight_product ? wsize : 0, input_product ? ck * p : 0),
                                   input_product && !g.is_pointwise() ? plane : 0},
                                  BufferStart::kUnset);
  // Laid out [threads][wsize + O], as sum_partials reads them.
  ThreadBuffers<float, 2> partials(threads, {wsize, g.o});
  bool failed = false;
#pragma omp parallel num_threads(threads) if (parallel)
  {
    const int t = omp_get_thread_num();
    BFloat16* col = columns.get(t, 0);
    float* sums = scratch.get(t, 0);
    float* dx_sums = scratch.get(t, 1);
    float* dw_part = partials.get(t, 0);
    float* db_part = partials.get(t, 1);
#pragma omp for schedule(static)
    for (i64 n = 0; n < g.n; ++n) {
      const BFloat16* gn = gy + n * g.o * p;
      if (db != nullptr) {
        for (i64 o = 0; o < g.o; ++o) {
          float s = 0.0f;  // in order, as the driver's bias_sum
          for (i64 q = 0; q < p; ++q) s += static_cast<float>(gn[o * p + q]);
          db_part[o] += s;
        }
      }
      BFloat16* dxn = dx == nullptr ? nullptr : dx + n * plane;
      if (!products) {
        if (dxn != nullptr) std::fill(dxn, dxn + plane, BFloat16(0.0f));
        continue;
      }
      if (weight_product) {
        const BFloat16* cn = x + n * plane;
        if (!g.is_pointwise()) {  // as the bits they are (Note [bfloat16 convolution])
          im2col(g, reinterpret_cast<const std::uint16_t*>(cn),
                 reinterpret_cast<std::uint16_t*>(col));
          cn = col;
        }
        if (!weight_product->run(gn, cn, sums)) {
#pragma omp atomic write
          failed = true;
          continue;
        }
        for (i64 k = 0; k < wsize; ++k) dw_part[k] += sums[k];
      }
      if (input_product) {
        if (!input_product->run(w, gn, sums)) {
#pragma omp atomic write
          failed = true;
          continue;
        }
        if (g.is_pointwise()) {  // dcol_n is dx_n
          float_to_half(sums, dxn, plane);
        } else {
          std::fill(dx_sums, dx_sums + plane, 0.0f);
          col2im_add(g, sums, dx_sums);
          float_to_half(dx_sums, dxn, plane);
        }
      }
    }
  }
  TESSERA_CHECK(!failed, Error,
                "[conv2d_backward] oneDNN's bfloat16 product failed for a convolution of {} images "
                "of [{}, {}, {}] by {} filters of {}x{} (out of memory?); "
                "TESSERA_CPU_BF16_MATMUL=0 convolves bfloat16 in float32 copies instead",
                g.n, g.c, g.h, g.w, g.o, g.kh, g.kw);
  if (dw == nullptr && db == nullptr) return;
  std::vector<float> dw_sum(static_cast<std::size_t>(dw != nullptr ? wsize : 0));
  std::vector<float> db_sum(static_cast<std::size_t>(db != nullptr ? g.o : 0));
  sum_partials(partials.get(0, 0), threads, wsize, g.o, dw != nullptr ? dw_sum.data() : nullptr,
               db != nullptr ? db_sum.data() : nullptr);
  if (dw != nullptr) float_to_half(dw_sum.data(), dw, wsize);
  if (db != nullptr) float_to_half(db_sum.data(), db, g.o);
}

template void im2col_conv_forward<float>(const ConvGeometry&, const float*, const float*,
                                         const float*, float*);
template void im2col_conv_forward<double>(const ConvGeometry&, const double*, const double*,
                                          const double*, double*);
template void im2col_conv_backward<float>(const ConvGeometry&, const float*, const float*,
                                          const float*, float*, float*, float*);
template void im2col_conv_backward<double>(const ConvGeometry&, const double*, const double*,
                                           const double*, double*, double*, double*);

}  // namespace tessera::detail::TESSERA_CPU_ISA
