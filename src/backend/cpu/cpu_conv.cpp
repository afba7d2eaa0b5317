// CPU 2-D convolution: the direct kernels (direct_conv.h) for stride 1 and few channels;
// otherwise im2col + GEMM per image, images split across the OpenMP pool (each GEMM then
// runs single-threaded inside the parallel region). See Note [CPU convolution].
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backend/cpu/conv_tiles.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/direct_conv.h"
#include "core/dispatch.h"
#include "core/tensor_impl.h"

// Note [CPU convolution]
// Stride-1 convolutions with few channels (LeNet's 1->6 and 6->16) take the direct path
// (Note [Direct convolution]; with it and a faster sigmoid, a LeNet epoch went from 3.4 to
// 1.2 s). The rest run here. For image n, col_n [C*kH*kW, OH*OW] holds the input patch
// under each output position, so out_n [O, OH*OW] = W [O, C*kH*kW] @ col_n, and the
// gradients are two more GEMMs: dW += g_n @ col_n^T and dcol = W^T @ g_n, which col2im adds
// back into dx_n. Parallelism comes from the batch rather than from inside one GEMM. The
// weight gradient is summed per thread and then across threads in thread order
// (deterministic for a given thread count). The backward pass recomputes each image's
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

template <typename T>
void im2col(const Geometry& g, const T* x, T* col) {
  const i64 p = g.positions(), s = g.win.stride_w;
  for (i64 c = 0; c < g.c; ++c) {
    for (i64 i = 0; i < g.kh; ++i) {
      for (i64 j = 0; j < g.kw; ++j) {
        T* row = col + ((c * g.kh + i) * g.kw + j) * p;
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
          } else {
            for (i64 ox = r.lo; ox < r.hi; ++ox) dst[ox] = x[base + ox * s];
          }
          std::fill(dst + r.hi, dst + g.ow, T{0});
        }
      }
    }
  }
}

// dx += col2im(col): the inverse scatter of im2col, adding where windows overlap.
template <typename T>
void col2im_add(const Geometry& g, const T* col, T* dx) {
  const i64 p = g.positions(), s = g.win.stride_w;
  for (i64 c = 0; c < g.c; ++c) {
    for (i64 i = 0; i < g.kh; ++i) {
      for (i64 j = 0; j < g.kw; ++j) {
        const T* row = col + ((c * g.kh + i) * g.kw + j) * p;
        const ColumnRange r = valid_columns(g, j);
        for (i64 oy = 0; oy < g.oh; ++oy) {
          const i64 y = oy * g.win.stride_h - g.win.pad_h + i;
          if (y < 0 || y >= g.h) continue;
          const i64 base = (c * g.h + y) * g.w - g.win.pad_w + j;
          const T* src = row + oy * g.ow;
          for (i64 ox = r.lo; ox < r.hi; ++ox) dx[base + ox * s] += src[ox];
        }
      }
    }
  }
}

// Row-major C [m, n] = op(A) op(B) + beta C, single-threaded inside a parallel region.
template <typename T>
void gemm(bool ta, bool tb, i64 m, i64 n, i64 k, const T* a, i64 lda, const T* b, i64 ldb, T beta,
          T* c, i64 ldc) {
  const auto opa = ta ? CblasTrans : CblasNoTrans, opb = tb ? CblasTrans : CblasNoTrans;
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, opa, opb, mi, ni, ki, 1.0f, a, static_cast<int>(lda), b,
                static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, opa, opb, mi, ni, ki, 1.0, a, static_cast<int>(lda), b,
                static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
  }
}

template <typename T>
T* data_of(const Tensor& t) {
  return t.defined() ? reinterpret_cast<T*>(impl_of(t).data()) : nullptr;
}

// Whether to split images across threads (enough work, and not nested).
bool parallel_images(const Geometry& g) {
  return g.n > 1 && !omp_in_parallel() && g.n * g.o * g.ck() * g.positions() >= 32768;
}

template <typename T>
void conv_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
                  const Window2d& win) {
  const Geometry g = Geometry::of(x, weight, win);
  const T* px = data_of<T>(x);
  const T* pw = data_of<T>(weight);
  const T* pb = data_of<T>(bias);
  T* py = data_of<T>(out);
  const i64 ck = g.ck(), p = g.positions();
  if (out.numel() == 0) return;
  if (direct_conv_applies(g)) return direct_conv_forward<T>(g, px, pw, pb, py);
  const bool parallel = parallel_images(g);
  const int threads = parallel ? omp_get_max_threads() : 1;
  conv_tiles::ThreadBuffers<T, 1> buffers(threads, {g.is_pointwise() ? 0 : ck * p});
#pragma omp parallel num_threads(threads) if (parallel)
  {
    T* col = buffers.get(omp_get_thread_num(), 0);
#pragma omp for schedule(static)
    for (i64 n = 0; n < g.n; ++n) {
      const T* xn = px + n * g.c * g.h * g.w;
      T* yn = py + n * g.o * p;
      const T* cn = xn;
      if (!g.is_pointwise()) {
        im2col(g, xn, col);
        cn = col;
      }
      if (pb != nullptr) {
        for (i64 o = 0; o < g.o; ++o) std::fill(yn + o * p, yn + (o + 1) * p, pb[o]);
      }
      if (ck == 0) {
        if (pb == nullptr) std::fill(yn, yn + g.o * p, T{0});
        continue;
      }
      gemm<T>(false, false, g.o, p, ck, pw, ck, cn, p, pb != nullptr ? T{1} : T{0}, yn, p);
    }
  }
}

template <typename T>
void conv_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_out,
                   const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias,
                   const Window2d& win) {
  const Geometry g = Geometry::of(x, weight, win);
  const T* px = data_of<T>(x);
  const T* pw = data_of<T>(weight);
  const T* pg = data_of<T>(grad_out);
  T* pdx = data_of<T>(grad_x);
  T* pdw = data_of<T>(grad_weight);
  T* pdb = data_of<T>(grad_bias);
  if (g.n > 0 && direct_conv_applies(g)) {
    return direct_conv_backward<T>(g, px, pw, pg, pdx, pdw, pdb);
  }
  const i64 ck = g.ck(), p = g.positions();
  if (pdx != nullptr) std::fill(pdx, pdx + grad_x.numel(), T{0});
  const bool parallel = parallel_images(g);
  conv_tiles::BackwardSums<T> sums(pw, g.o, g.c, g.kh * g.kw, /*flip=*/false, parallel);
  const int threads = sums.threads();
  conv_tiles::ThreadBuffers<T, 1> buffers(threads, {ck * p});
#pragma omp parallel num_threads(threads) if (parallel)
  {
    const int tid = omp_get_thread_num();
    T* dw = sums.weight_grad(tid);
    T* db = sums.bias_grad(tid);
    T* col = buffers.get(tid, 0);
#pragma omp for schedule(static)
    for (i64 n = 0; n < g.n; ++n) {
      const T* xn = px + n * g.c * g.h * g.w;
      const T* gn = pg + n * g.o * p;
      if (pdw != nullptr && ck > 0 && p > 0) {
        const T* cn = xn;
        if (!g.is_pointwise()) {
          im2col(g, xn, col);
          cn = col;
        }
        gemm<T>(false, true, g.o, ck, p, gn, p, cn, p, T{1}, dw, ck);
      }
      if (pdb != nullptr) {
        for (i64 o = 0; o < g.o; ++o) {
          T s{0};
          for (i64 q = 0; q < p; ++q) s += gn[o * p + q];
          db[o] += s;
        }
      }
      if (pdx != nullptr && ck > 0 && p > 0) {
        T* dxn = pdx + n * g.c * g.h * g.w;
        if (g.is_pointwise()) {
          gemm<T>(true, false, ck, p, g.o, pw, ck, gn, p, T{1}, dxn, p);
        } else {
          gemm<T>(true, false, ck, p, g.o, pw, ck, gn, p, T{0}, col, p);
          col2im_add(g, col, dxn);
        }
      }
    }
  }
  sums.finish(pdw, pdb);
}

}  // namespace

void CpuBackend::conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const Tensor& out, const Window2d& w) {
  launch_with(
      out.device().index(),
      [w](const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out) {
        dispatch_floating(out.dtype(), [&](auto tag) {
          conv_forward<typename decltype(tag)::type>(x, weight, bias, out, w);
        });
      },
      x, weight, bias, out);
}

void CpuBackend::conv2d_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_out,
                                 const Tensor& grad_x, const Tensor& grad_weight,
                                 const Tensor& grad_bias, const Window2d& w) {
  launch_with(
      x.device().index(),
      [w](const Tensor& x, const Tensor& weight, const Tensor& grad_out, const Tensor& grad_x,
          const Tensor& grad_weight, const Tensor& grad_bias) {
        dispatch_floating(x.dtype(), [&](auto tag) {
          conv_backward<typename decltype(tag)::type>(x, weight, grad_out, grad_x, grad_weight,
                                                      grad_bias, w);
        });
      },
      x, weight, grad_out, grad_x, grad_weight, grad_bias);
}

}  // namespace tessera::detail::TESSERA_CPU_ISA
