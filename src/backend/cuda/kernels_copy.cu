// CUDA strided copy with dtype conversion (bool means non-zero, as convert_value on the CPU).
#include "backend/cuda/map_kernel.cuh"
#include "core/dispatch.h"

namespace tessera::detail::cuda {
namespace {

template <typename To>
struct ConvertFn {
  template <typename From>
  __device__ To operator()(From v) const {
    return convert_to<To>(v);
  }
};

template <std::size_t kBytes>
using Bits = std::conditional_t<kBytes == 1, std::uint8_t,
                                std::conditional_t<kBytes == 4, std::uint32_t, std::uint64_t>>;

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
    dispatch_dtype(dst.dtype, [&](auto tag) {
      using S = Bits<sizeof(typename decltype(tag)::type)>;
      launch_map<S, S, S, 1>(stream, "copy", ConvertFn<S>{}, dst, Operand<S>{&src});
    });
    return;
  }
  dispatch_dtype(dst.dtype, [&](auto to_tag) {
    using To = typename decltype(to_tag)::type;
    dispatch_dtype(src.dtype, [&](auto from_tag) {
      using From = typename decltype(from_tag)::type;
      if constexpr (!std::is_same_v<To, From>) {
        launch_map<To, From, From, 1>(stream, "copy", ConvertFn<To>{}, dst, Operand<From>{&src});
      }
    });
  });
}

}  // namespace tessera::detail::cuda
