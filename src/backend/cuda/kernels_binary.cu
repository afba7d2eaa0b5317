// CUDA binary launchers: tensor (op) tensor and tensor (op) scalar share one kernel pair per
// (op, dtype); a scalar is a uniform input carried in the kernel's parameters.
#include <limits>

#include "backend/cuda/map_kernel.cuh"
#include "backend/elementwise_functors.h"
#include "core/dispatch.h"

namespace tessera::detail::cuda {
namespace {

template <typename Fn>
constexpr bool kIsComparison =
    std::is_same_v<Fn, EqFn> || std::is_same_v<Fn, NeFn> || std::is_same_v<Fn, LtFn> ||
    std::is_same_v<Fn, LeFn> || std::is_same_v<Fn, GtFn> || std::is_same_v<Fn, GeFn>;

// (op, dtype) pairs the front end sends (ops/elementwise.cpp): bool only adds, multiplies,
// takes maximum/minimum and compares; integer division is computed in float32. The rest
// are not instantiated.
template <typename T, typename Fn>
constexpr bool kBinaryReachable =
    std::is_same_v<T, bool>
        ? (kIsComparison<Fn> || std::is_same_v<Fn, AddFn> || std::is_same_v<Fn, MulFn> ||
           std::is_same_v<Fn, MaximumFn> || std::is_same_v<Fn, MinimumFn>)
        : (std::is_floating_point_v<T> || !std::is_same_v<Fn, DivFn>);

// out = a (op) b, where either operand may be an immediate scalar (Operand::arg nullptr).
bool launch_typed(cudaStream_t stream, BinaryOp op, Dtype dtype, const KernelArg& out,
                  const KernelArg* a, const KernelArg* b, double scalar) {
  bool launched = false;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T s = convert_to<T>(scalar);
    const Operand<T> x{a, s}, y{b, s};
    if constexpr (std::is_floating_point_v<T>) {
      // x^2, x^3, sqrt(x), 1/x, x as the CPU computes them, not powf (Note [pow by a common
      // exponent] in elementwise_functors.h).
      if (op == BinaryOp::kPow && a != nullptr && b == nullptr &&
          pow_by_common_exponent(
              s, [&](auto fn) { launch_map<T, T, T, 2>(stream, "binary", fn, out, x, y); })) {
        launched = true;
        return;
      }
    }
    dispatch_binary(op, [&](auto fn) {
      using Fn = decltype(fn);
      if constexpr (kBinaryReachable<T, Fn>) {
        using Out = std::conditional_t<kIsComparison<Fn>, bool, T>;
        launch_map<Out, T, T, 2>(stream, "binary", fn, out, x, y);
        launched = true;
      }
    });
  });
  return launched;
}

}  // namespace

void launch_binary(StreamHandle s, BinaryOp op, const KernelArg& a, const KernelArg& b,
                   const KernelArg& out) {
  TESSERA_CUDA_EXPECT(a.dtype == b.dtype && out.dtype == (is_comparison(op) ? kBool : a.dtype),
                      "binary operands have unexpected dtypes");
  TESSERA_CUDA_EXPECT(launch_typed(static_cast<cudaStream_t>(s), op, a.dtype, out, &a, &b, 0),
                      "binary op on a dtype the front end never sends");
}

void launch_binary_scalar(StreamHandle s, BinaryOp op, const KernelArg& a, double scalar,
                          bool scalar_first, const KernelArg& out) {
  TESSERA_CUDA_EXPECT(out.dtype == (is_comparison(op) ? kBool : a.dtype),
                      "binary operands have unexpected dtypes");
  const KernelArg* x = scalar_first ? nullptr : &a;
  const KernelArg* y = scalar_first ? &a : nullptr;
  TESSERA_CUDA_EXPECT(launch_typed(static_cast<cudaStream_t>(s), op, a.dtype, out, x, y, scalar),
                      "binary op on a dtype the front end never sends");
}

}  // namespace tessera::detail::cuda
