// CUDA kernels for convolution (im2col, col2im, layout changes, row sums) and pooling. One
// thread per written element, so no kernel needs atomics and results are deterministic.
#include <cuda_runtime.h>

#include <cstdint>
#include <cuda/std/limits>

#include "backend/cuda/kernel_utils.cuh"
#include "core/dispatch.h"

namespace tessera::detail::cuda {
namespace {

using i64 = std::int64_t;

#define TESSERA_GRID_STRIDE(i, n)                                                \
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<i64>(gridDim.x) * blockDim.x)

template <typename T>
__global__ void im2col_kernel(const T* __restrict__ x, T* __restrict__ col, ConvGeometry g, i64 n0,
                              i64 nb) {
  const i64 p = g.oh * g.ow, cols = nb * p, total = g.c * g.kh * g.kw * cols;
  TESSERA_GRID_STRIDE(idx, total) {
    const i64 row = idx / cols, rest = idx % cols;
    const i64 n = rest / p, q = rest % p;
    const i64 oy = q / g.ow, ox = q % g.ow;
    const i64 j = row % g.kw, i = (row / g.kw) % g.kh, c = row / (g.kw * g.kh);
    const i64 y = oy * g.win.stride_h - g.win.pad_h + i, xx = ox * g.win.stride_w - g.win.pad_w + j;
    col[idx] = y >= 0 && y < g.h && xx >= 0 && xx < g.w
                   ? x[(((n0 + n) * g.c + c) * g.h + y) * g.w + xx]
                   : T(0);
  }
}

// One thread per input element sums the col entries that im2col copied it to.
template <typename T>
__global__ void col2im_kernel(const T* __restrict__ col, T* __restrict__ dx, ConvGeometry g, i64 n0,
                              i64 nb) {
  const i64 p = g.oh * g.ow, cols = nb * p, total = nb * g.c * g.h * g.w;
  TESSERA_GRID_STRIDE(idx, total) {
    const i64 xx = idx % g.w, y = (idx / g.w) % g.h, c = (idx / (g.w * g.h)) % g.c;
    const i64 n = idx / (g.w * g.h * g.c);
    T acc(0);
    for (i64 i = 0; i < g.kh; ++i) {
      const i64 ty = y + g.win.pad_h - i;
      if (ty < 0 || ty % g.win.stride_h != 0) continue;
      const i64 oy = ty / g.win.stride_h;
      if (oy >= g.oh) continue;
      for (i64 j = 0; j < g.kw; ++j) {
        const i64 tx = xx + g.win.pad_w - j;
        if (tx < 0 || tx % g.win.stride_w != 0) continue;
        const i64 ox = tx / g.win.stride_w;
        if (ox >= g.ow) continue;
        acc += col[((c * g.kh + i) * g.kw + j) * cols + n * p + oy * g.ow + ox];
      }
    }
    dx[n0 * g.c * g.h * g.w + idx] = acc;
  }
}

template <typename T>
__global__ void channels_to_images_kernel(const T* __restrict__ tmp, const T* __restrict__ bias,
                                          T* __restrict__ out, ConvGeometry g, i64 n0, i64 nb) {
  const i64 p = g.oh * g.ow, total = nb * g.o * p;
  TESSERA_GRID_STRIDE(idx, total) {  // idx runs over out[n0 + n, o, q]
    const i64 q = idx % p, o = (idx / p) % g.o, n = idx / (p * g.o);
    const T v = tmp[o * nb * p + n * p + q];
    out[n0 * g.o * p + idx] = bias != nullptr ? v + bias[o] : v;
  }
}

template <typename T>
__global__ void images_to_channels_kernel(const T* __restrict__ grad, T* __restrict__ tmp,
                                          ConvGeometry g, i64 n0, i64 nb) {
  const i64 p = g.oh * g.ow, total = nb * g.o * p;
  TESSERA_GRID_STRIDE(idx, total) {  // idx runs over tmp[o, n * P + q]
    const i64 o = idx / (nb * p), rest = idx % (nb * p);
    const i64 n = rest / p, q = rest % p;
    tmp[idx] = grad[((n0 + n) * g.o + o) * p + q];
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    row_sums_kernel(const T* __restrict__ in, T* __restrict__ out, i64 cols, bool accumulate) {
  __shared__ double partial[kThreads];
  const i64 row = blockIdx.x;
  double acc = 0;
  for (i64 j = threadIdx.x; j < cols; j += blockDim.x)
    acc += static_cast<double>(in[row * cols + j]);
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    out[row] = static_cast<T>(accumulate ? static_cast<double>(out[row]) + partial[0] : partial[0]);
  }
}

struct PoolShape {
  i64 planes, h, w, oh, ow;
  Window2d win;
};

template <typename T>
__global__ void pool_kernel(PoolKind kind, const T* __restrict__ x, T* __restrict__ out,
                            i64* __restrict__ indices, PoolShape s) {
  const i64 total = s.planes * s.oh * s.ow;
  const T area = static_cast<T>(static_cast<double>(s.win.kernel_h) * s.win.kernel_w);
  TESSERA_GRID_STRIDE(idx, total) {
    const i64 ox = idx % s.ow, oy = (idx / s.ow) % s.oh, pl = idx / (s.ow * s.oh);
    const i64 ys = oy * s.win.stride_h - s.win.pad_h, xs = ox * s.win.stride_w - s.win.pad_w;
    const i64 y0 = ys > 0 ? ys : 0, x0 = xs > 0 ? xs : 0;
    const i64 y1 = ys + s.win.kernel_h < s.h ? ys + s.win.kernel_h : s.h;
    const i64 x1 = xs + s.win.kernel_w < s.w ? xs + s.win.kernel_w : s.w;
    const T* plane = x + pl * s.h * s.w;
    if (kind == PoolKind::kMax) {
      T best = -::cuda::std::numeric_limits<T>::infinity();
      i64 arg = y0 * s.w + x0;
      bool nan = false;  // a NaN wins and stays, as on the CPU
      for (i64 y = y0; y < y1 && !nan; ++y) {
        for (i64 xx = x0; xx < x1 && !nan; ++xx) {
          const T v = plane[y * s.w + xx];
          if (v > best || v != v) {
            best = v;
            arg = y * s.w + xx;
            nan = v != v;
          }
        }
      }
      out[idx] = best;
      indices[idx] = arg;
    } else {
      T sum(0);
      for (i64 y = y0; y < y1; ++y) {
        for (i64 xx = x0; xx < x1; ++xx) sum += plane[y * s.w + xx];
      }
      out[idx] = sum / area;
    }
  }
}

// One thread per input element gathers from the windows that cover it.
template <typename T>
__global__ void pool_backward_kernel(PoolKind kind, const T* __restrict__ grad_out,
                                     const i64* __restrict__ indices, T* __restrict__ grad_x,
                                     PoolShape s) {
  const i64 total = s.planes * s.h * s.w;
  const T area = static_cast<T>(static_cast<double>(s.win.kernel_h) * s.win.kernel_w);
  TESSERA_GRID_STRIDE(idx, total) {
    const i64 xx = idx % s.w, y = (idx / s.w) % s.h, pl = idx / (s.w * s.h);
    const i64 flat = y * s.w + xx;
    // Outputs whose window covers (y, xx): oy * stride - pad <= y < oy * stride - pad + k.
    const i64 ty = y + s.win.pad_h, tx = xx + s.win.pad_w;
    const i64 oy_lo = ty >= s.win.kernel_h ? (ty - s.win.kernel_h) / s.win.stride_h + 1 : 0;
    const i64 ox_lo = tx >= s.win.kernel_w ? (tx - s.win.kernel_w) / s.win.stride_w + 1 : 0;
    const i64 oy_hi = ty / s.win.stride_h < s.oh - 1 ? ty / s.win.stride_h : s.oh - 1;
    const i64 ox_hi = tx / s.win.stride_w < s.ow - 1 ? tx / s.win.stride_w : s.ow - 1;
    T acc(0);
    for (i64 oy = oy_lo; oy <= oy_hi; ++oy) {
      for (i64 ox = ox_lo; ox <= ox_hi; ++ox) {
        const i64 o = (pl * s.oh + oy) * s.ow + ox;
        if (kind == PoolKind::kMax) {
          if (indices[o] == flat) acc += grad_out[o];
        } else {
          acc += grad_out[o] / area;
        }
      }
    }
    grad_x[idx] = acc;
  }
}

template <auto Kernel, typename... Args>
void launch_elements(cudaStream_t stream, i64 total, const char* what, Args... args) {
  if (total == 0) return;
  Kernel<<<grid_for<Kernel>(total), kThreads, 0, stream>>>(args...);
  TESSERA_CUDA_CHECK_LAUNCH(stream, what);
}

}  // namespace

void launch_im2col(StreamHandle s, Dtype dtype, const void* x, void* col, const ConvGeometry& g,
                   i64 n0, i64 nb) {
  dispatch_floating(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_elements<im2col_kernel<T>>(static_cast<cudaStream_t>(s), g.ck() * nb * g.positions(),
                                      "im2col", static_cast<const T*>(x), static_cast<T*>(col), g,
                                      n0, nb);
  });
}

void launch_col2im(StreamHandle s, Dtype dtype, const void* col, void* dx, const ConvGeometry& g,
                   i64 n0, i64 nb) {
  dispatch_floating(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_elements<col2im_kernel<T>>(static_cast<cudaStream_t>(s), nb * g.c * g.h * g.w, "col2im",
                                      static_cast<const T*>(col), static_cast<T*>(dx), g, n0, nb);
  });
}

void launch_channels_to_images(StreamHandle s, Dtype dtype, const void* tmp, const void* bias,
                               void* out, const ConvGeometry& g, i64 n0, i64 nb) {
  dispatch_floating(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_elements<channels_to_images_kernel<T>>(
        static_cast<cudaStream_t>(s), nb * g.o * g.positions(), "conv2d bias and layout",
        static_cast<const T*>(tmp), static_cast<const T*>(bias), static_cast<T*>(out), g, n0, nb);
  });
}

void launch_images_to_channels(StreamHandle s, Dtype dtype, const void* grad, void* tmp,
                               const ConvGeometry& g, i64 n0, i64 nb) {
  dispatch_floating(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_elements<images_to_channels_kernel<T>>(
        static_cast<cudaStream_t>(s), nb * g.o * g.positions(), "conv2d gradient layout",
        static_cast<const T*>(grad), static_cast<T*>(tmp), g, n0, nb);
  });
}

void launch_row_sums(StreamHandle s, Dtype dtype, const void* in, void* out, i64 rows, i64 cols,
                     bool accumulate) {
  if (rows == 0) return;
  const auto stream = static_cast<cudaStream_t>(s);
  dispatch_floating(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    row_sums_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
        static_cast<const T*>(in), static_cast<T*>(out), cols, accumulate);
  });
  TESSERA_CUDA_CHECK_LAUNCH(stream, "row_sums");
}

void launch_pool2d(StreamHandle s, PoolKind kind, const KernelArg& x, const KernelArg& out,
                   void* indices, const Window2d& w) {
  const PoolShape shape{
      x.sizes[0] * x.sizes[1], x.sizes[2], x.sizes[3], out.sizes[2], out.sizes[3], w};
  dispatch_floating(x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_elements<pool_kernel<T>>(static_cast<cudaStream_t>(s), out.numel, "pool2d", kind,
                                    static_cast<const T*>(x.data), static_cast<T*>(out.data),
                                    static_cast<i64*>(indices), shape);
  });
}

void launch_pool2d_backward(StreamHandle s, PoolKind kind, const KernelArg& grad_out,
                            const void* indices, const KernelArg& grad_x, const Window2d& w) {
  const PoolShape shape{grad_x.sizes[0] * grad_x.sizes[1],
                        grad_x.sizes[2],
                        grad_x.sizes[3],
                        grad_out.sizes[2],
                        grad_out.sizes[3],
                        w};
  dispatch_floating(grad_x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_elements<pool_backward_kernel<T>>(
        static_cast<cudaStream_t>(s), grad_x.numel, "pool2d_backward", kind,
        static_cast<const T*>(grad_out.data), static_cast<const i64*>(indices),
        static_cast<T*>(grad_x.data), shape);
  });
}

}  // namespace tessera::detail::cuda
