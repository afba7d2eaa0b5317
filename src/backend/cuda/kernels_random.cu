// CUDA arange, random and random_int: element i is a function of i alone, so the values are
// the CPU backend's. Note [Same numbers on every device] explains the rounding.
#include <type_traits>

#include "backend/cuda/map_kernel.cuh"
#include "backend/philox.h"
#include "core/dispatch.h"

// Note [Same numbers on every device]
// nvcc contracts a + b * c into one fused multiply-add, which rounds once instead of twice
// and so can differ from the CPU in the last bit. The affine steps below use the explicit
// round-to-nearest intrinsics (__fmul_rn, __fadd_rn, ...), which are never contracted, so
// float32 uniform draws and arange values are bit-identical to the CPU's (given the CPU
// build does not contract either). Normal draws go through the device's double log/cos,
// which may differ from the host libm by an ulp of the double: the same values up to
// float rounding.

namespace tessera::detail::cuda {
namespace {

template <typename T>
struct ArangeFn {
  using Indexed = void;
  double start, step;
  bool whole;  // an integer T and whole start and step: count in int64, as on the CPU
  __device__ T operator()(std::int64_t i) const {
    if constexpr (std::is_integral_v<T>) {
      if (whole) {
        return static_cast<T>(static_cast<std::int64_t>(start) +
                              i * static_cast<std::int64_t>(step));
      }
    }
    return convert_to<T>(__dadd_rn(start, __dmul_rn(static_cast<double>(i), step)));
  }
};

struct UniformFloatFn {
  using Indexed = void;
  std::uint64_t seed, offset;
  float low, span, below;  // float(a) and float(b - a), as on the CPU; the largest < b
  __device__ float operator()(std::int64_t i) const {
    const Philox4 r = philox4x32(offset + static_cast<std::uint64_t>(i), seed);
    return below_bound(__fadd_rn(low, __fmul_rn(span, uniform_float(r))), below);
  }
};

struct UniformDoubleFn {
  using Indexed = void;
  std::uint64_t seed, offset;
  double low, span, below;
  __device__ double operator()(std::int64_t i) const {
    const Philox4 r = philox4x32(offset + static_cast<std::uint64_t>(i), seed);
    return below_bound(__dadd_rn(low, __dmul_rn(span, uniform_double(r))), below);
  }
};

template <typename T>
struct NormalFn {
  using Indexed = void;
  std::uint64_t seed, offset;
  double mean, std;
  __device__ T operator()(std::int64_t i) const {
    const Philox4 r = philox4x32(offset + static_cast<std::uint64_t>(i), seed);
    return static_cast<T>(__dadd_rn(mean, __dmul_rn(std, normal_double(r))));
  }
};

struct IntegerFn {
  using Indexed = void;
  std::uint64_t seed, offset;
  std::int64_t low;
  std::uint64_t span;
  __device__ std::int64_t operator()(std::int64_t i) const {
    return uniform_int(philox4x32(offset + static_cast<std::uint64_t>(i), seed), low, span);
  }
};

}  // namespace

void launch_arange(StreamHandle s, const KernelArg& out, double start, double step) {
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool whole = start == std::floor(start) && step == std::floor(step);
    launch_map<T, T, T, 0>(static_cast<cudaStream_t>(s), "arange", ArangeFn<T>{start, step, whole},
                           out);
  });
}

void launch_random(StreamHandle s, const KernelArg& out, RandomKind kind, double a, double b,
                   std::uint64_t seed, std::uint64_t offset) {
  TESSERA_CUDA_EXPECT(out.dtype == kFloat32 || out.dtype == kFloat64,
                      "random draws into a non-floating dtype");
  const auto stream = static_cast<cudaStream_t>(s);
  if (kind == RandomKind::kNormal) {
    if (out.dtype == kFloat32) {
      launch_map<float, float, float, 0>(stream, "randn", NormalFn<float>{seed, offset, a, b}, out);
    } else {
      launch_map<double, double, double, 0>(stream, "randn", NormalFn<double>{seed, offset, a, b},
                                            out);
    }
  } else if (out.dtype == kFloat32) {
    const UniformFloatFn fn{seed, offset, static_cast<float>(a), static_cast<float>(b - a),
                            largest_below_bound<float>(b)};
    launch_map<float, float, float, 0>(stream, "rand", fn, out);
  } else {
    const UniformDoubleFn fn{seed, offset, a, b - a, largest_below_bound<double>(b)};
    launch_map<double, double, double, 0>(stream, "rand", fn, out);
  }
}

void launch_random_int(StreamHandle s, const KernelArg& out, std::int64_t low, std::uint64_t span,
                       std::uint64_t seed, std::uint64_t offset) {
  TESSERA_CUDA_EXPECT(out.dtype == kInt64, "random_int draws into a dtype other than int64");
  launch_map<std::int64_t, std::int64_t, std::int64_t, 0>(static_cast<cudaStream_t>(s), "randint",
                                                          IntegerFn{seed, offset, low, span}, out);
}

}  // namespace tessera::detail::cuda
