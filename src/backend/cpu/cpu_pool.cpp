// CPU max and average pooling over NCHW planes, one plane per task.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernel_data.h"
#include "backend/cpu/strided_loop.h"
#include "core/dispatch.h"
#include "core/tensor_impl.h"

namespace tessera::detail::TESSERA_CPU_ISA {  // built once per level: cpu_backend.h
namespace {

using i64 = std::int64_t;

// The window of output (oy, ox), clipped to the plane: rows [y0, y1), columns [x0, x1).
struct Span {
  i64 y0, y1, x0, x1;
};
inline Span window(const Window2d& w, i64 oy, i64 ox, i64 h, i64 wd) {
  const i64 ys = oy * w.stride_h - w.pad_h, xs = ox * w.stride_w - w.pad_w;
  return {std::max<i64>(ys, 0), std::min<i64>(ys + w.kernel_h, h), std::max<i64>(xs, 0),
          std::min<i64>(xs + w.kernel_w, wd)};
}

// Non-overlapping windows without padding (LeNet's 2x2, stride 2): every window lies in
// the plane, and every input belongs to at most one window.
bool is_tiling(const Window2d& w) {
  return w.pad_h == 0 && w.pad_w == 0 && w.stride_h == w.kernel_h && w.stride_w == w.kernel_w;
}

// The 2x2, stride-2 average of LeNet, in loops with fixed trip counts that the compiler
// vectorizes (the general loop below runs over the window's runtime size). Same sums, in the
// same order, as the general loop.
template <typename T>
void avg_pool_2x2(const T* xp, i64 wd, i64 oh, i64 ow, T inv_area, T* yp) {
  for (i64 oy = 0; oy < oh; ++oy) {
    const T* r0 = xp + 2 * oy * wd;
    const T* r1 = r0 + wd;
    T* out = yp + oy * ow;
    for (i64 ox = 0; ox < ow; ++ox) {
      out[ox] = ((r0[2 * ox] + r0[2 * ox + 1]) + (r1[2 * ox] + r1[2 * ox + 1])) * inv_area;
    }
  }
}

// Its gradient: each input gets a quarter of its window's; rows and columns past the last
// window get 0.
template <typename T>
void avg_pool_2x2_backward(const T* gp, i64 h, i64 wd, i64 oh, i64 ow, T inv_area, T* dx) {
  for (i64 oy = 0; oy < oh; ++oy) {
    T* r0 = dx + 2 * oy * wd;
    T* r1 = r0 + wd;
    const T* g = gp + oy * ow;
    for (i64 ox = 0; ox < ow; ++ox) {
      const T share = g[ox] * inv_area;
      r0[2 * ox] = share;
      r0[2 * ox + 1] = share;
      r1[2 * ox] = share;
      r1[2 * ox + 1] = share;
    }
    std::fill(r0 + 2 * ow, r0 + wd, T{0});
    std::fill(r1 + 2 * ow, r1 + wd, T{0});
  }
  std::fill(dx + 2 * oh * wd, dx + h * wd, T{0});
}

bool is_2x2_tiling(const Window2d& w) { return is_tiling(w) && w.kernel_h == 2 && w.kernel_w == 2; }

// The 2x2, stride-2 maximum of LeNet, n windows of two rows, and each one's choice (0 to 3:
// a = r0[2i], b = r0[2i + 1], c = r1[2i], d = r1[2i + 1]), in selects the compiler
// vectorizes. Same values and choices as the general loop below, which scans a window in
// order, takes a value greater than the best or NaN, and stops at the first NaN: a strict
// maximum keeps the first of equal maxima (and a NaN a, since nothing compares greater), and
// the first NaN then replaces it. The general loop's data-dependent branches made max pooling
// a quarter of a LeNet epoch on the CPU.
template <typename T>
void max_of_windows(const T* __restrict r0, const T* __restrict r1, i64 n, T* __restrict out,
                    T* __restrict choice) {
  for (i64 i = 0; i < n; ++i) {
    const T a = r0[2 * i], b = r0[2 * i + 1], c = r1[2 * i], d = r1[2 * i + 1];
    T best = a, pick = T(0);
    pick = b > best ? T(1) : pick;
    best = b > best ? b : best;
    pick = c > best ? T(2) : pick;
    best = c > best ? c : best;
    pick = d > best ? T(3) : pick;
    best = d > best ? d : best;
    pick = d != d ? T(3) : pick;  // the first NaN, set last
    best = d != d ? d : best;
    pick = c != c ? T(2) : pick;
    best = c != c ? c : best;
    pick = b != b ? T(1) : pick;
    best = b != b ? b : best;
    pick = a != a ? T(0) : pick;
    best = a != a ? a : best;
    out[i] = best;
    choice[i] = pick;
  }
}

// max_of_windows over a plane, with each window's choice as an index into the plane.
template <typename T>
void max_pool_2x2(const T* xp, i64 wd, i64 oh, i64 ow, T* yp, i64* ip) {
  constexpr i64 kChunk = 64;
  T choice[kChunk];
  for (i64 oy = 0; oy < oh; ++oy) {
    const T* r0 = xp + 2 * oy * wd;
    const i64 at = 2 * oy * wd;  // the row's first window's first element, in the plane
    for (i64 x0 = 0; x0 < ow; x0 += kChunk) {
      const i64 n = std::min(kChunk, ow - x0);
      max_of_windows(r0 + 2 * x0, r0 + wd + 2 * x0, n, yp + oy * ow + x0, choice);
      i64* arg = ip + oy * ow + x0;
      for (i64 i = 0; i < n; ++i) {
        const auto k = static_cast<i64>(choice[i]);
        arg[i] = at + 2 * (x0 + i) + (k & 1) + (k >> 1) * wd;
      }
    }
  }
}

template <typename T>
void pool_forward(PoolKind kind, const Tensor& x, const Tensor& out, const Tensor& indices,
                  const Window2d& w) {
  const i64 planes = x.size(0) * x.size(1), h = x.size(2), wd = x.size(3);
  const i64 oh = out.size(2), ow = out.size(3);
  const T* px = data_of<T>(x);
  T* py = data_of<T>(out);
  i64* pi = data_of<i64>(indices);
  // A multiply per element, not a division (within 1 ulp of dividing by the window area).
  const T inv_area = T(1) / static_cast<T>(static_cast<double>(w.kernel_h) * w.kernel_w);
  const bool serial = out.numel() * w.kernel_h * w.kernel_w < kParallelGrain || omp_in_parallel();
#pragma omp parallel for schedule(static) if (!serial)
  for (i64 pl = 0; pl < planes; ++pl) {
    const T* xp = px + pl * h * wd;
    if (kind == PoolKind::kAvg && is_2x2_tiling(w)) {
      avg_pool_2x2(xp, wd, oh, ow, inv_area, py + pl * oh * ow);
      continue;
    }
    if (kind == PoolKind::kMax && is_2x2_tiling(w)) {
      max_pool_2x2(xp, wd, oh, ow, py + pl * oh * ow, pi + pl * oh * ow);
      continue;
    }
    if (kind == PoolKind::kAvg && is_tiling(w)) {
      T* yp = py + pl * oh * ow;
      for (i64 oy = 0; oy < oh; ++oy) {
        for (i64 ox = 0; ox < ow; ++ox) yp[oy * ow + ox] = T{0};
        for (i64 i = 0; i < w.kernel_h; ++i) {
          const T* row = xp + (oy * w.kernel_h + i) * wd;
          for (i64 ox = 0; ox < ow; ++ox) {
            T acc{0};
            for (i64 j = 0; j < w.kernel_w; ++j) acc += row[ox * w.kernel_w + j];
            yp[oy * ow + ox] += acc;
          }
        }
        for (i64 ox = 0; ox < ow; ++ox) yp[oy * ow + ox] *= inv_area;
      }
      continue;
    }
    for (i64 oy = 0; oy < oh; ++oy) {
      for (i64 ox = 0; ox < ow; ++ox) {
        const Span s = window(w, oy, ox, h, wd);
        const i64 o = (pl * oh + oy) * ow + ox;
        if (kind == PoolKind::kMax) {
          T best = -std::numeric_limits<T>::infinity();
          i64 arg = s.y0 * wd + s.x0;
          bool nan = false;  // the first NaN wins and stays (PyTorch: the last NaN, so with
                             // two NaNs in a window their gradients land apart)
          for (i64 y = s.y0; y < s.y1 && !nan; ++y) {
            for (i64 xx = s.x0; xx < s.x1 && !nan; ++xx) {
              const T v = xp[y * wd + xx];
              if (v > best || std::isnan(v)) {
                best = v;
                arg = y * wd + xx;
                nan = std::isnan(v);
              }
            }
          }
          py[o] = best;
          pi[o] = arg;
        } else {
          T sum{0};
          for (i64 y = s.y0; y < s.y1; ++y) {
            for (i64 xx = s.x0; xx < s.x1; ++xx) sum += xp[y * wd + xx];
          }
          py[o] = sum * inv_area;
        }
      }
    }
  }
}

template <typename T>
void pool_backward(PoolKind kind, const Tensor& grad_out, const Tensor& indices,
                   const Tensor& grad_x, const Window2d& w) {
  const i64 planes = grad_x.size(0) * grad_x.size(1), h = grad_x.size(2), wd = grad_x.size(3);
  const i64 oh = grad_out.size(2), ow = grad_out.size(3);
  const T* pg = data_of<T>(grad_out);
  const i64* pi = data_of<i64>(indices);
  T* pdx = data_of<T>(grad_x);
  // A multiply per element, not a division (within 1 ulp of dividing by the window area).
  const T inv_area = T(1) / static_cast<T>(static_cast<double>(w.kernel_h) * w.kernel_w);
  const bool serial = grad_x.numel() < kParallelGrain || omp_in_parallel();
#pragma omp parallel for schedule(static) if (!serial)
  for (i64 pl = 0; pl < planes; ++pl) {
    T* dx = pdx + pl * h * wd;
    if (kind == PoolKind::kAvg && is_2x2_tiling(w)) {
      avg_pool_2x2_backward(pg + pl * oh * ow, h, wd, oh, ow, inv_area, dx);
      continue;
    }
    if (kind == PoolKind::kAvg && is_tiling(w)) {
      // Each input gets its window's share; rows and columns past the last window get 0.
      const T* gp = pg + pl * oh * ow;
      std::fill(dx, dx + h * wd, T{0});
      for (i64 oy = 0; oy < oh; ++oy) {
        for (i64 i = 0; i < w.kernel_h; ++i) {
          T* row = dx + (oy * w.kernel_h + i) * wd;
          for (i64 ox = 0; ox < ow; ++ox) {
            const T share = gp[oy * ow + ox] * inv_area;
            for (i64 j = 0; j < w.kernel_w; ++j) row[ox * w.kernel_w + j] = share;
          }
        }
      }
      continue;
    }
    std::fill(dx, dx + h * wd, T{0});
    for (i64 oy = 0; oy < oh; ++oy) {
      for (i64 ox = 0; ox < ow; ++ox) {
        const i64 o = (pl * oh + oy) * ow + ox;
        if (kind == PoolKind::kMax) {
          dx[pi[o]] += pg[o];
          continue;
        }
        const Span s = window(w, oy, ox, h, wd);
        const T share = pg[o] * inv_area;
        for (i64 y = s.y0; y < s.y1; ++y) {
          for (i64 xx = s.x0; xx < s.x1; ++xx) dx[y * wd + xx] += share;
        }
      }
    }
  }
}

}  // namespace

void CpuBackend::pool2d(PoolKind kind, const Tensor& x, const Tensor& out, const Tensor& indices,
                        const Window2d& w) {
  launch_with(
      out.device().index(),
      [kind, w](const Tensor& x, const Tensor& out, const Tensor& indices) {
        dispatch_floating(out.dtype(), [&](auto tag) {
          pool_forward<typename decltype(tag)::type>(kind, x, out, indices, w);
        });
      },
      x, out, indices);
}

void CpuBackend::pool2d_backward(PoolKind kind, const Tensor& grad_out, const Tensor& indices,
                                 const Tensor& grad_x, const Window2d& w) {
  launch_with(
      grad_x.device().index(),
      [kind, w](const Tensor& grad_out, const Tensor& indices, const Tensor& grad_x) {
        dispatch_floating(grad_x.dtype(), [&](auto tag) {
          pool_backward<typename decltype(tag)::type>(kind, grad_out, indices, grad_x, w);
        });
      },
      grad_out, indices, grad_x);
}

}  // namespace tessera::detail::TESSERA_CPU_ISA
