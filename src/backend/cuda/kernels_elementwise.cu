// CUDA elementwise launchers: fill, unary, where (binary ops: kernels_binary.cu). They all
// run map_kernel.cuh's kernel pair with the op math of elementwise_functors.h, so values
// match the CPU backend's.
#include <atomic>
#include <cstring>

#include "backend/cuda/map_kernel.cuh"
#pragma nv_diag_suppress 186  // AbsFn's x < 0 on uint8 is pointless, not wrong
#include "backend/elementwise_functors.h"
#include "core/dispatch.h"

namespace tessera::detail::cuda {

int sm_count() {
  constexpr int kCached = 64;
  static std::atomic<int> counts[kCached];
  int device = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&device));
  int n = device < kCached ? counts[device].load(std::memory_order_relaxed) : 0;
  if (n == 0) {
    TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    if (device < kCached) counts[device].store(n, std::memory_order_relaxed);
  }
  return n;
}

namespace {

// The unsigned type of a dtype's width: kernels that only move bits (fill, where) are
// instantiated per width, not per dtype.
template <std::size_t kBytes>
using Bits = std::conditional_t<kBytes == 1, std::uint8_t,
                                std::conditional_t<kBytes == 4, std::uint32_t, std::uint64_t>>;

template <typename S>
struct FillFn {
  S bits;
  __device__ S operator()(std::int64_t) const { return bits; }
};

// The condition is read as its byte (non-zero is true), never as a bool object: a bool
// holding anything but 0 or 1 is undefined behaviour and must not pick an address.
template <typename S>
struct WhereFn {
  __device__ S operator()(std::uint8_t c, S a, S b) const { return c != 0 ? a : b; }
};

// Unary ops the front end sends for each dtype: bool has none, integers only the ops that
// are not float_only in ops/elementwise.cpp (neg, abs, relu). The rest are not instantiated.
template <typename T, typename Fn>
constexpr bool kUnaryReachable =
    std::is_floating_point_v<T> ||
    (!std::is_same_v<T, bool> &&
     (std::is_same_v<Fn, NegFn> || std::is_same_v<Fn, AbsFn> || std::is_same_v<Fn, ReluFn>));

}  // namespace

void launch_fill(StreamHandle s, const KernelArg& out, double value) {
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using S = Bits<sizeof(T)>;
    const T v = convert_to<T>(value);
    S bits;
    std::memcpy(&bits, &v, sizeof(T));
    launch_map<S, S, S, 0>(static_cast<cudaStream_t>(s), "fill", FillFn<S>{bits}, out);
  });
}

void launch_unary(StreamHandle s, UnaryOp op, const KernelArg& in, const KernelArg& out) {
  TESSERA_CUDA_EXPECT(in.dtype == out.dtype, "unary input and output dtypes differ");
  bool launched = false;
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_unary(op, [&](auto fn) {
      if constexpr (kUnaryReachable<T, decltype(fn)>) {
        launch_map<T, T, T, 1>(static_cast<cudaStream_t>(s), "unary", fn, out, Operand<T>{&in});
        launched = true;
      }
    });
  });
  TESSERA_CUDA_EXPECT(launched, "unary op on a dtype the front end never sends");
}

void launch_unary_backward(StreamHandle s, UnaryOp op, const KernelArg& grad,
                           const KernelArg& saved, const KernelArg& grad_in) {
  TESSERA_CUDA_EXPECT(grad.dtype == grad_in.dtype && saved.dtype == grad_in.dtype,
                      "unary_backward operands differ in dtype");
  dispatch_floating(grad_in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_unary_backward(op, [&](auto fn) {
      launch_map<T, T, T, 2>(static_cast<cudaStream_t>(s), "unary_backward", fn, grad_in,
                             Operand<T>{&grad}, Operand<T>{&saved});
    });
  });
}

void launch_where(StreamHandle s, const KernelArg& cond, const KernelArg& a, const KernelArg& b,
                  const KernelArg& out) {
  TESSERA_CUDA_EXPECT(cond.dtype == kBool && a.dtype == out.dtype && b.dtype == out.dtype,
                      "where operands have unexpected dtypes");
  dispatch_dtype(out.dtype, [&](auto tag) {
    using S = Bits<sizeof(typename decltype(tag)::type)>;
    launch_map<S, std::uint8_t, S, 3>(static_cast<cudaStream_t>(s), "where", WhereFn<S>{}, out,
                                      Operand<std::uint8_t>{&cond}, Operand<S>{&a}, Operand<S>{&b});
  });
}

}  // namespace tessera::detail::cuda
