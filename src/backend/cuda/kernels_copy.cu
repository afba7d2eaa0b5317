// CUDA strided copy with dtype conversion (bool means non-zero, as convert_value on the CPU).
// bfloat16 and float16 convert through float32 with cuda_bf16.h / cuda_fp16.h, rounding to
// nearest even as the CPU's core/half.h does.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/map_kernel.cuh"
#include "core/dispatch.h"

namespace tessera::detail::cuda {
namespace {

// The two bytes of a bfloat16 or float16 element, as the kernels load and store them.
struct Bf16Bits {
  std::uint16_t bits;
};
struct F16Bits {
  std::uint16_t bits;
};

template <typename T>
__device__ __forceinline__ float to_float(T v) {
  if constexpr (std::is_same_v<T, Bf16Bits>) {
    return __uint_as_float(static_cast<unsigned>(v.bits) << 16);
  } else if constexpr (std::is_same_v<T, F16Bits>) {
    return __half2float(__ushort_as_half(v.bits));
  } else {
    return static_cast<float>(v);
  }
}

// One value into or out of a half type, through float; other pairs as convert_to.
template <typename To>
struct ConvertFn {
  template <typename From>
  __device__ To operator()(From v) const {
    if constexpr (std::is_same_v<To, Bf16Bits>) {
      return To{__bfloat16_as_ushort(__float2bfloat16_rn(to_float(v)))};
    } else if constexpr (std::is_same_v<To, F16Bits>) {
      return To{__half_as_ushort(__float2half_rn(to_float(v)))};
    } else if constexpr (std::is_same_v<From, Bf16Bits> || std::is_same_v<From, F16Bits>) {
      return convert_to<To>(to_float(v));
    } else {
      return convert_to<To>(v);
    }
  }
};

template <std::size_t kBytes>
using Bits = std::conditional_t<
    kBytes == 1, std::uint8_t,
    std::conditional_t<kBytes == 2, std::uint16_t,
                       std::conditional_t<kBytes == 4, std::uint32_t, std::uint64_t>>>;

// dispatch_dtype with the half types as their bit structs.
template <typename F>
void dispatch_copy_dtype(Dtype dtype, F&& f) {
  if (dtype == Dtype::kBFloat16) return f(TypeTag<Bf16Bits>{});
  if (dtype == Dtype::kFloat16) return f(TypeTag<F16Bits>{});
  dispatch_dtype(dtype, f);
}

}  // namespace

void launch_copy(StreamHandle s, const KernelArg& src, const KernelArg& dst) {
  TESSERA_CUDA_EXPECT(src.numel == dst.numel, "copy between different shapes");
  if (dst.numel == 0) return;
  const auto stream = static_cast<cudaStream_t>(s);
  if (src.dtype == dst.dtype && src.contiguous && dst.contiguous) {
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, dst.numel * itemsize(dst.dtype),
                                       cudaMemcpyDefault, stream));
    return;
  }
  if (src.dtype == dst.dtype) {  // a strided move of bits: one kernel per width
    dispatch_copy_dtype(dst.dtype, [&](auto tag) {
      using S = Bits<sizeof(typename decltype(tag)::type)>;
      launch_map<S, S, S, 1>(stream, "copy", ConvertFn<S>{}, dst, Operand<S>{&src});
    });
    return;
  }
  dispatch_copy_dtype(dst.dtype, [&](auto to_tag) {
    using To = typename decltype(to_tag)::type;
    dispatch_copy_dtype(src.dtype, [&](auto from_tag) {
      using From = typename decltype(from_tag)::type;
      if constexpr (!std::is_same_v<To, From>) {
        launch_map<To, From, From, 1>(stream, "copy", ConvertFn<To>{}, dst, Operand<From>{&src});
      }
    });
  });
}

}  // namespace tessera::detail::cuda
