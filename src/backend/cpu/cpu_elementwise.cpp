// CPU elementwise kernels: fill, arange, random, random_int, unary, binary (tensor or scalar),
// where.
#include <cmath>
#include <limits>
#include <type_traits>

#include "backend/cpu/copy_kernel.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/normal_draws.h"
#include "backend/cpu/strided_loop.h"
#include "backend/cpu/vector_math.h"
#include "backend/elementwise_functors.h"
#include "core/check.h"
#include "core/dispatch.h"
#include "core/half_rows.h"
#include "core/tensor_impl.h"

namespace tessera::detail::TESSERA_CPU_ISA {  // built once per level: cpu_backend.h
namespace {

using Row = std::array<std::int64_t, 3>;

template <int N>
StridedLayout<N> layout_of(const std::array<const Tensor*, N>& ts) {
  std::array<const Strides*, N> strides;
  std::array<std::int64_t, N> sizes;
  for (int k = 0; k < N; ++k) {
    strides[k] = &impl_of(*ts[k]).strides;
    sizes[k] = static_cast<std::int64_t>(ts[k]->itemsize());
  }
  return make_layout<N>(ts[0]->shape(), strides, sizes);
}

// Runs a flat loop over a fresh contiguous output, split across the pool when large.
template <typename F>
void parallel_index_loop(std::int64_t n, F&& f) {
  for_range(n >= kParallelGrain && !omp_in_parallel(), n, f);
}

// Runs body(lo, hi) over [0, n) in chunks of kChunk, split across the pool when large: the
// body's own loop over a chunk can vectorize, where body(i) per element may not.
template <typename F>
void parallel_chunks(std::int64_t n, F&& body) {
  constexpr std::int64_t kChunk = 4096;
  for_range(n >= kParallelGrain && !omp_in_parallel(), (n + kChunk - 1) / kChunk,
            [&](std::int64_t c) { body(c * kChunk, std::min(n, (c + 1) * kChunk)); });
}

}  // namespace

void CpuBackend::fill(const Tensor& out, double value) {
  launch_with(
      out.device().index(),
      [value](const Tensor& out) {
        dispatch_dtype(out.dtype(), [&](auto tag) {
          using T = typename decltype(tag)::type;
          const T v = convert_value<T>(value);
          for_each_row<1>(
              layout_of<1>({&out}), {impl_of(out).data()}, out.numel(),
              [v](std::array<char*, 1> p, std::int64_t n, const std::array<std::int64_t, 1>& st) {
                if (st[0] == sizeof(T)) {
                  T* o = reinterpret_cast<T*>(p[0]);
                  for (std::int64_t i = 0; i < n; ++i) o[i] = v;
                } else {
                  for (std::int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * st[0]) = v;
                }
              });
        });
      },
      out);
}

void CpuBackend::arange(const Tensor& out, double start, double step) {
  launch_with(
      out.device().index(),
      [start, step](const Tensor& out) {
        dispatch_dtype(out.dtype(), [&](auto tag) {
          using T = typename decltype(tag)::type;
          T* o = reinterpret_cast<T*>(impl_of(out).data());
          // Whole numbers into an integer dtype count in int64: in double, values past 2^53
          // repeated and skipped (the front end checked that they fit T).
          if (std::is_integral_v<T> && start == std::floor(start) && step == std::floor(step)) {
            const auto first = static_cast<std::int64_t>(start);
            const auto by = static_cast<std::int64_t>(step);
            parallel_index_loop(out.numel(),
                                [&](std::int64_t i) { o[i] = static_cast<T>(first + i * by); });
            return;
          }
          parallel_index_loop(out.numel(), [&](std::int64_t i) {
            o[i] = convert_value<T>(start + static_cast<double>(i) * step);
          });
        });
      },
      out);
}

void CpuBackend::random(const Tensor& out, RandomKind kind, double a, double b, std::uint64_t seed,
                        std::uint64_t offset) {
  launch_with(
      out.device().index(),
      [kind, a, b, seed, offset](const Tensor& out) {
        dispatch_floating(out.dtype(), [&](auto tag) {
          using T = typename decltype(tag)::type;
          T* o = reinterpret_cast<T*>(impl_of(out).data());
          const T below = largest_below_bound<T>(b);  // uniform draws stay below b
          // A loop per kind over each chunk, the kind's test out of it: Philox and a uniform
          // draw vectorize there (rand of 1M floats 6.3 -> 2.1 ms on a Zen 5), where one loop
          // testing the kind per element did not. The values are the same integer
          // arithmetic and roundings.
          parallel_chunks(out.numel(), [&](std::int64_t lo, std::int64_t hi) {
            const auto draw = [&](std::int64_t i) {
              return philox4x32(offset + static_cast<std::uint64_t>(i), seed);
            };
            if (kind == RandomKind::kNormal) {
              // Note [Vectorized normal draws] (normal_draws.h).
              for (std::int64_t i = lo; i < hi; ++i) {
                const Philox4 r = draw(i);
                o[i] = static_cast<T>(a + b * normal_of_draw(r.x[2], r.x[3]));
              }
            } else if constexpr (std::is_same_v<T, float>) {
              const float low = static_cast<float>(a), span = static_cast<float>(b - a);
              for (std::int64_t i = lo; i < hi; ++i) {
                o[i] = below_bound(low + span * uniform_float(draw(i)), below);
              }
            } else {
              for (std::int64_t i = lo; i < hi; ++i) {
                o[i] = below_bound(a + (b - a) * uniform_double(draw(i)), below);
              }
            }
          });
        });
      },
      out);
}

void CpuBackend::random_int(const Tensor& out, std::int64_t low, std::uint64_t span,
                            std::uint64_t seed, std::uint64_t offset) {
  launch_with(
      out.device().index(),
      [low, span, seed, offset](const Tensor& out) {
        auto* o = reinterpret_cast<std::int64_t*>(impl_of(out).data());
        parallel_index_loop(out.numel(), [&](std::int64_t i) {
          o[i] = uniform_int(philox4x32(offset + static_cast<std::uint64_t>(i), seed), low, span);
        });
      },
      out);
}

namespace {

bool has_vectorized_unary(UnaryOp op) {
  return op == UnaryOp::kSigmoid || op == UnaryOp::kExp || op == UnaryOp::kLog ||
         op == UnaryOp::kTanh || op == UnaryOp::kGelu || op == UnaryOp::kGeluTanh ||
         op == UnaryOp::kSilu;
}

// y = op(x) over n floats with vector_math.h's vectorized sigmoid, exp, log, tanh, gelu or
// silu.
void vectorized_unary(UnaryOp op, const float* x, std::int64_t n, float* y) {
  switch (op) {
    case UnaryOp::kSigmoid:
      return sigmoid_vectorizable(x, n, y);
    case UnaryOp::kExp:
      return exp_vectorizable(x, n, y);
    case UnaryOp::kLog:
      return log_vectorizable(x, n, y);
    case UnaryOp::kGelu:
      return gelu_vectorizable(x, n, y);
    case UnaryOp::kGeluTanh:
      return gelu_tanh_vectorizable(x, n, y);
    case UnaryOp::kSilu:
      return silu_vectorizable(x, n, y);
    default:
      return tanh_vectorizable(x, n, y);
  }
}

// out[i] = the gradient of GELU, its tanh form or SiLU from g[i] and their input x[i], over
// n floats: vectorized, as the forward is (libm's erf and exp per element do not vectorize).
void vectorized_unary_backward(UnaryOp op, const float* g, const float* x, float* out,
                               std::int64_t n) {
  // The loops are spelled out twice: through a lambda (for_range) they no longer vectorized
  // (GELU's backward took 7.6x as long). A small n enters no OpenMP region (for_range).
  if (n < kParallelGrain || omp_in_parallel()) {
    if (op == UnaryOp::kGelu) {
#pragma omp simd simdlen(16)
      for (std::int64_t i = 0; i < n; ++i) out[i] = gelu_grad_vectorizable(g[i], x[i]);
    } else if (op == UnaryOp::kGeluTanh) {
#pragma omp simd simdlen(16)
      for (std::int64_t i = 0; i < n; ++i) out[i] = gelu_tanh_grad_vectorizable(g[i], x[i]);
    } else {
#pragma omp simd simdlen(16)
      for (std::int64_t i = 0; i < n; ++i) out[i] = silu_grad_vectorizable(g[i], x[i]);
    }
    return;
  }
  if (op == UnaryOp::kGelu) {
#pragma omp parallel for simd simdlen(16) schedule(static)
    for (std::int64_t i = 0; i < n; ++i) out[i] = gelu_grad_vectorizable(g[i], x[i]);
  } else if (op == UnaryOp::kGeluTanh) {
#pragma omp parallel for simd simdlen(16) schedule(static)
    for (std::int64_t i = 0; i < n; ++i) out[i] = gelu_tanh_grad_vectorizable(g[i], x[i]);
  } else {
#pragma omp parallel for simd simdlen(16) schedule(static)
    for (std::int64_t i = 0; i < n; ++i) out[i] = silu_grad_vectorizable(g[i], x[i]);
  }
}

// y = op(x) over n contiguous floats, in chunks split across the pool when large; y may be x.
void vectorized_unary_dense(UnaryOp op, const float* x, float* y, std::int64_t n) {
  constexpr std::int64_t kChunk = 2048;
  for_range(n >= kParallelGrain && !omp_in_parallel(), (n + kChunk - 1) / kChunk,
            [=](std::int64_t c) {
              const std::int64_t lo = c * kChunk, len = std::min(kChunk, n - lo);
              vectorized_unary(op, x + lo, len, y + lo);
            });
}

// Dense half operands, in float32 blocks (Note [Half elementwise], below).
void unary_half(UnaryOp op, const Tensor& in, const Tensor& out);
void unary_backward_half(UnaryOp op, const Tensor& grad, const Tensor& saved,
                         const Tensor& grad_in);
void binary_half(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
void binary_scalar_half(BinaryOp op, const Tensor& a, double scalar, bool scalar_first,
                        const Tensor& out);

}  // namespace

void CpuBackend::unary(UnaryOp op, const Tensor& in, const Tensor& out) {
  if (is_half(out.dtype())) {
    launch_with(
        out.device().index(),
        [op](const Tensor& in, const Tensor& out) { unary_half(op, in, out); }, in, out);
    return;
  }
  if (has_vectorized_unary(op) && out.dtype() == kFloat32 && out.is_contiguous()) {
    // Activation layers run these over whole activations: a vectorized exp is ~10x libm's
    // (vector_math.h has each one's accuracy).
    launch_with(
        out.device().index(),
        [op](const Tensor& in, const Tensor& out) {
          float* y = reinterpret_cast<float*>(impl_of(out).data());
          const float* x = reinterpret_cast<const float*>(impl_of(in).data());
          if (!in.is_contiguous()) {
            // A strided input is copied into the output first (in tiles when it is a
            // transpose: Note [Tiled walks]) and the op runs there in place: libm per
            // element made a transposed 1024x1024 sigmoid 17x PyTorch's time, and the
            // vectorized op on a tiled walk's rows of 16 paid the call each time (2.7 ms;
            // this way 0.9 ms).
            copy_kernel(in, out);
            x = y;
          }
          vectorized_unary_dense(op, x, y, out.numel());
        },
        in, out);
    return;
  }
  launch_with(
      out.device().index(),
      [op](const Tensor& in, const Tensor& out) {
        const auto layout = layout_of<2>({&out, &in});
        dispatch_dtype(out.dtype(), [&](auto tag) {
          using T = typename decltype(tag)::type;
          dispatch_unary(op, [&](auto fn) {
            for_each_row<2>(layout, {impl_of(out).data(), impl_of(in).data()}, out.numel(),
                            [fn](std::array<char*, 2> p, std::int64_t n,
                                 const std::array<std::int64_t, 2>& st) {
                              if (st[0] == sizeof(T) && st[1] == sizeof(T)) {
                                T* o = reinterpret_cast<T*>(p[0]);
                                const T* x = reinterpret_cast<const T*>(p[1]);
                                for (std::int64_t i = 0; i < n; ++i) o[i] = fn(x[i]);
                              } else {
                                for (std::int64_t i = 0; i < n; ++i) {
                                  *reinterpret_cast<T*>(p[0] + i * st[0]) =
                                      fn(*reinterpret_cast<const T*>(p[1] + i * st[1]));
                                }
                              }
                            });
          });
        });
      },
      in, out);
}

void CpuBackend::unary_backward(UnaryOp op, const Tensor& grad, const Tensor& saved,
                                const Tensor& grad_in) {
  if (is_half(grad_in.dtype())) {
    launch_with(
        grad_in.device().index(),
        [op](const Tensor& grad, const Tensor& saved, const Tensor& grad_in) {
          unary_backward_half(op, grad, saved, grad_in);
        },
        grad, saved, grad_in);
    return;
  }
  launch_with(
      grad_in.device().index(),
      [op](const Tensor& grad, const Tensor& saved, const Tensor& grad_in) {
        dispatch_floating(grad_in.dtype(), [&](auto tag) {
          using T = typename decltype(tag)::type;
          const T* g = reinterpret_cast<const T*>(impl_of(grad).data());
          const T* s = reinterpret_cast<const T*>(impl_of(saved).data());
          T* out = reinterpret_cast<T*>(impl_of(grad_in).data());
          const std::int64_t n = grad_in.numel();
          if constexpr (std::is_same_v<T, float>) {
            if (op == UnaryOp::kGelu || op == UnaryOp::kGeluTanh || op == UnaryOp::kSilu) {
              vectorized_unary_backward(op, g, s, out, n);
              return;
            }
          }
          dispatch_unary_backward(op, [&](auto fn) {
            for_range(n >= kParallelGrain && !omp_in_parallel(), n,
                      [=](std::int64_t i) { out[i] = fn(g[i], s[i]); });
          });
        });
      },
      grad, saved, grad_in);
}

namespace {

// out[i] = fn(a[i], b[i]) over one row; strides in bytes. Contiguous and broadcast-scalar
// rows get loops the compiler vectorizes.
template <typename T, typename O, typename Fn>
inline void binary_row(Fn fn, std::array<char*, 3> p, std::int64_t n, const Row& st) {
  O* o = reinterpret_cast<O*>(p[0]);
  const T* a = reinterpret_cast<const T*>(p[1]);
  const T* b = reinterpret_cast<const T*>(p[2]);
  if (st[0] == sizeof(O) && st[1] == sizeof(T) && st[2] == sizeof(T)) {
    for (std::int64_t i = 0; i < n; ++i) o[i] = static_cast<O>(fn(a[i], b[i]));
  } else if (st[0] == sizeof(O) && st[1] == sizeof(T) && st[2] == 0) {
    const T bv = *b;
    for (std::int64_t i = 0; i < n; ++i) o[i] = static_cast<O>(fn(a[i], bv));
  } else if (st[0] == sizeof(O) && st[1] == 0 && st[2] == sizeof(T)) {
    const T av = *a;
    for (std::int64_t i = 0; i < n; ++i) o[i] = static_cast<O>(fn(av, b[i]));
  } else {
    for (std::int64_t i = 0; i < n; ++i) {
      *reinterpret_cast<O*>(p[0] + i * st[0]) =
          static_cast<O>(fn(*reinterpret_cast<const T*>(p[1] + i * st[1]),
                            *reinterpret_cast<const T*>(p[2] + i * st[2])));
    }
  }
}

template <typename T, typename Fn>
void binary_typed(Fn fn, bool comparison, const StridedLayout<3>& layout, std::array<char*, 3> ptrs,
                  std::int64_t numel) {
  if (comparison) {
    if constexpr (std::is_same_v<decltype(fn(T{}, T{})), bool>) {
      for_each_row<3>(layout, ptrs, numel,
                      [fn](std::array<char*, 3> p, std::int64_t n, const Row& st) {
                        binary_row<T, bool>(fn, p, n, st);
                      });
    }
  } else {
    for_each_row<3>(layout, ptrs, numel,
                    [fn](std::array<char*, 3> p, std::int64_t n, const Row& st) {
                      binary_row<T, T>(fn, p, n, st);
                    });
  }
}

// Note [Half elementwise]
// A bfloat16 or float16 op went through float32 copies of its operands and of its result
// (Note [Half precision]): `a + b` on 1M bfloat16 values moved 22 MB where 6 MB do, and took
// 1.8x PyTorch's time. Dense operands of one half dtype (Backend::dense_half_elementwise)
// instead run in blocks of 2048 values: a block is converted to float32 on the stack with
// the level's rows (core/half_rows.h), the float32 kernel's own per-element code runs there
// (the vectorized exp, sigmoid, tanh, GELU and SiLU on the same 2048-value pieces as
// vectorized_unary_dense; pow's common exponents), and the block is rounded back once. Each
// value is thus bit for bit what the copies gave (tests/core/half_test.cpp checks it; a
// review compared every bit pattern of both types), up to which NaN's sign and payload an
// operation on two NaNs keeps: the float32 kernel's threaded loop does not keep one either.
constexpr std::int64_t kHalfBlock = 2048;

// body(lo, len) over the blocks of [0, n), split across the pool when large (for_range: a
// small n enters no OpenMP region).
template <typename Body>
void over_half_blocks(std::int64_t n, Body body) {
  for_range(n >= kParallelGrain && !omp_in_parallel(), (n + kHalfBlock - 1) / kHalfBlock,
            [&](std::int64_t c) {
              const std::int64_t lo = c * kHalfBlock;
              body(lo, std::min(kHalfBlock, n - lo));
            });
}

template <typename F>
void dispatch_half_type(Dtype dtype, F&& f) {
  TESSERA_INTERNAL_ASSERT(is_half(dtype), "{} in a half kernel", dtype_name(dtype));
  if (dtype == kBFloat16) {
    f(TypeTag<BFloat16>{});
  } else {
    f(TypeTag<Float16>{});
  }
}

template <typename H>
const H* half_data(const Tensor& t) {
  return reinterpret_cast<const H*>(impl_of(t).data());
}

void unary_half(UnaryOp op, const Tensor& in, const Tensor& out) {
  dispatch_half_type(out.dtype(), [&](auto tag) {
    using H = typename decltype(tag)::type;
    const H* x = half_data<H>(in);
    H* y = const_cast<H*>(half_data<H>(out));
    const bool vectorized = has_vectorized_unary(op);
    dispatch_unary(op, [&](auto fn) {
      over_half_blocks(out.numel(), [&](std::int64_t lo, std::int64_t len) {
        float v[kHalfBlock];
        rows_to_float(x + lo, v, len);
        if (vectorized) {
          vectorized_unary(op, v, len, v);
        } else {
          for (std::int64_t i = 0; i < len; ++i) v[i] = fn(v[i]);
        }
        rows_from_float(v, y + lo, len);
      });
    });
  });
}

void unary_backward_half(UnaryOp op, const Tensor& grad, const Tensor& saved,
                         const Tensor& grad_in) {
  dispatch_half_type(grad_in.dtype(), [&](auto tag) {
    using H = typename decltype(tag)::type;
    const H* pg = half_data<H>(grad);
    const H* ps = half_data<H>(saved);
    H* po = const_cast<H*>(half_data<H>(grad_in));
    const bool vectorized =
        op == UnaryOp::kGelu || op == UnaryOp::kGeluTanh || op == UnaryOp::kSilu;
    dispatch_unary_backward(op, [&](auto fn) {
      over_half_blocks(grad_in.numel(), [&](std::int64_t lo, std::int64_t len) {
        float g[kHalfBlock], x[kHalfBlock];
        rows_to_float(pg + lo, g, len);
        rows_to_float(ps + lo, x, len);
        if (vectorized) {
          vectorized_unary_backward(op, g, x, g, len);  // g[i] is read before it is written
        } else {
          for (std::int64_t i = 0; i < len; ++i) g[i] = fn(g[i], x[i]);
        }
        rows_from_float(g, po + lo, len);
      });
    });
  });
}

// n half values at byte stride `stride` from p, as float32: a dense run, one value repeated
// (a broadcast operand's stride 0), or a gather.
template <typename H>
void strided_to_float(const char* p, std::int64_t stride, float* out, std::int64_t n) {
  if (stride == sizeof(H)) {
    rows_to_float(reinterpret_cast<const H*>(p), out, n);
  } else if (stride == 0) {
    std::fill(out, out + n, static_cast<float>(*reinterpret_cast<const H*>(p)));
  } else {
    for (std::int64_t i = 0; i < n; ++i) out[i] = *reinterpret_cast<const H*>(p + i * stride);
  }
}

// Operands of one half dtype with any strides (broadcast ones expanded): dense ones in blocks
// of kHalfBlock, others row by row of the float32 kernel's walk, each row in such blocks
// (Note [Half elementwise]).
void binary_half(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  TESSERA_INTERNAL_ASSERT(
      !is_comparison(op) && a.dtype() == out.dtype() && b.dtype() == out.dtype(),
      "operands the half kernel does not take");
  dispatch_half_type(out.dtype(), [&](auto tag) {
    using H = typename decltype(tag)::type;
    if (a.is_contiguous() && b.is_contiguous() && out.is_contiguous()) {
      const H* pa = half_data<H>(a);
      const H* pb = half_data<H>(b);
      H* po = const_cast<H*>(half_data<H>(out));
      dispatch_binary(op, [&](auto fn) {
        over_half_blocks(out.numel(), [&](std::int64_t lo, std::int64_t len) {
          float x[kHalfBlock], y[kHalfBlock];
          rows_to_float(pa + lo, x, len);
          rows_to_float(pb + lo, y, len);
          for (std::int64_t i = 0; i < len; ++i) x[i] = static_cast<float>(fn(x[i], y[i]));
          rows_from_float(x, po + lo, len);
        });
      });
      return;
    }
    const auto layout = layout_of<3>({&out, &a, &b});
    const std::array<char*, 3> ptrs{impl_of(out).data(), impl_of(a).data(), impl_of(b).data()};
    dispatch_binary(op, [&](auto fn) {
      for_each_row<3>(layout, ptrs, out.numel(),
                      [fn](std::array<char*, 3> p, std::int64_t n, const Row& st) {
                        for (std::int64_t lo = 0; lo < n; lo += kHalfBlock) {
                          const std::int64_t len = std::min(kHalfBlock, n - lo);
                          float x[kHalfBlock], y[kHalfBlock];
                          strided_to_float<H>(p[1] + lo * st[1], st[1], x, len);
                          strided_to_float<H>(p[2] + lo * st[2], st[2], y, len);
                          for (std::int64_t i = 0; i < len; ++i) {
                            x[i] = static_cast<float>(fn(x[i], y[i]));
                          }
                          char* o = p[0] + lo * st[0];
                          if (st[0] == sizeof(H)) {
                            rows_from_float(x, reinterpret_cast<H*>(o), len);
                          } else {
                            for (std::int64_t i = 0; i < len; ++i) {
                              *reinterpret_cast<H*>(o + i * st[0]) = H(x[i]);
                            }
                          }
                        }
                      });
    });
  });
}

void binary_scalar_half(BinaryOp op, const Tensor& a, double scalar, bool scalar_first,
                        const Tensor& out) {
  TESSERA_INTERNAL_ASSERT(!is_comparison(op), "a comparison in the half kernel");
  const float s = convert_value<float>(scalar);  // as the float32 kernel takes it
  dispatch_half_type(out.dtype(), [&](auto tag) {
    using H = typename decltype(tag)::type;
    const H* pa = half_data<H>(a);
    H* po = const_cast<H*>(half_data<H>(out));
    const auto run = [&](auto fn) {
      over_half_blocks(out.numel(), [&](std::int64_t lo, std::int64_t len) {
        float x[kHalfBlock];
        rows_to_float(pa + lo, x, len);
        if (scalar_first) {
          for (std::int64_t i = 0; i < len; ++i) x[i] = static_cast<float>(fn(s, x[i]));
        } else {
          for (std::int64_t i = 0; i < len; ++i) x[i] = static_cast<float>(fn(x[i], s));
        }
        rows_from_float(x, po + lo, len);
      });
    };
    if (op == BinaryOp::kPow && !scalar_first && pow_by_common_exponent(s, run)) return;
    dispatch_binary(op, run);
  });
}

}  // namespace

void CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  if (is_half(out.dtype())) {
    launch_with(
        out.device().index(),
        [op](const Tensor& a, const Tensor& b, const Tensor& out) { binary_half(op, a, b, out); },
        a, b, out);
    return;
  }
  launch_with(
      out.device().index(),
      [op](const Tensor& a, const Tensor& b, const Tensor& out) {
        const auto layout = layout_of<3>({&out, &a, &b});
        const std::array<char*, 3> ptrs{impl_of(out).data(), impl_of(a).data(), impl_of(b).data()};
        dispatch_dtype(a.dtype(), [&](auto tag) {
          using T = typename decltype(tag)::type;
          dispatch_binary(op, [&](auto fn) {
            binary_typed<T>(fn, is_comparison(op), layout, ptrs, out.numel());
          });
        });
      },
      a, b, out);
}

void CpuBackend::binary_scalar(BinaryOp op, const Tensor& a, double scalar, bool scalar_first,
                               const Tensor& out) {
  if (is_half(out.dtype())) {
    launch_with(
        out.device().index(),
        [op, scalar, scalar_first](const Tensor& a, const Tensor& out) {
          binary_scalar_half(op, a, scalar, scalar_first, out);
        },
        a, out);
    return;
  }
  launch_with(
      out.device().index(),
      [op, scalar, scalar_first](const Tensor& a, const Tensor& out) {
        // The scalar becomes a one-element stride-0 operand, so one loop serves both forms.
        const auto layout = layout_of<2>({&out, &a});
        dispatch_dtype(a.dtype(), [&](auto tag) {
          using T = typename decltype(tag)::type;
          T s = convert_value<T>(scalar);
          StridedLayout<3> l3;
          l3.ndim = layout.ndim;
          for (int d = 0; d < layout.ndim; ++d) {
            l3.sizes[d] = layout.sizes[d];
            l3.strides[0][d] = layout.strides[0][d];
            l3.strides[scalar_first ? 2 : 1][d] = layout.strides[1][d];
            l3.strides[scalar_first ? 1 : 2][d] = 0;
          }
          char* sp = reinterpret_cast<char*>(&s);
          const std::array<char*, 3> ptrs{impl_of(out).data(),
                                          scalar_first ? sp : impl_of(a).data(),
                                          scalar_first ? impl_of(a).data() : sp};
          auto run = [&](auto fn) {
            binary_typed<T>(fn, is_comparison(op), l3, ptrs, out.numel());
          };
          if constexpr (std::is_floating_point_v<T>) {
            if (op == BinaryOp::kPow && !scalar_first && pow_by_common_exponent(s, run)) return;
          }
          dispatch_binary(op, run);
        });
      },
      a, out);
}

void CpuBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  launch_with(
      out.device().index(),
      [](const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
        const auto layout = layout_of<4>({&out, &cond, &a, &b});
        dispatch_dtype(out.dtype(), [&](auto tag) {
          using T = typename decltype(tag)::type;
          for_each_row<4>(
              layout,
              {impl_of(out).data(), impl_of(cond).data(), impl_of(a).data(), impl_of(b).data()},
              out.numel(),
              [](std::array<char*, 4> p, std::int64_t n, const std::array<std::int64_t, 4>& st) {
                for (std::int64_t i = 0; i < n; ++i) {
                  // The byte, not a bool: a bool object holding 2 is undefined behaviour, and
                  // a select on it once indexed out of bounds.
                  const bool c = *reinterpret_cast<const std::uint8_t*>(p[1] + i * st[1]) != 0;
                  *reinterpret_cast<T*>(p[0] + i * st[0]) =
                      *reinterpret_cast<const T*>(p[c ? 2 : 3] + i * st[c ? 2 : 3]);
                }
              });
        });
      },
      cond, a, b, out);
}

}  // namespace tessera::detail::TESSERA_CPU_ISA
