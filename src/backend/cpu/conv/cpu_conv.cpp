// CPU 2-D convolution: CpuBackend's entry points, which pick one of the algorithms of this
// folder: the direct kernels (direct_conv.h: flat planes, or images in lanes) for stride 1
// and few channels, otherwise oneDNN's convolution primitives (onednn_conv.h) or im2col +
// GEMM (im2col_conv.h). The backward passes of the first and the last run in one driver
// (Note [Convolution backward driver] in backward_driver.h).
#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "backend/conv_geometry.h"
#include "backend/cpu/bf16_product.h"
#include "backend/cpu/conv/direct_conv.h"
#include "backend/cpu/conv/im2col_conv.h"
#include "backend/cpu/conv/onednn_conv.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernel_data.h"
#include "backend/cpu/scratch_memory.h"
#include "core/dispatch.h"
#include "core/tensor_impl.h"

namespace tessera::detail::TESSERA_CPU_ISA {  // built once per level: cpu_backend.h
namespace {

// Note [oneDNN convolutions] (onednn_conv.cpp): the convolutions of the im2col path in
// float32, and in bfloat16 where the CPU multiplies it, but 1x1 ones (one GEMM per image
// on the input itself, no columns: 0.7x oneDNN's time), from the AVX2 level up (the
// x86-64 level keeps im2col, which unit.cpu_x86_64 tests); TESSERA_CPU_ONEDNN_CONV=0 turns
// it off. Not for empty sums (no input channels: oneDNN refuses the shape) or outputs, nor
// inside the caller's OpenMP parallel region: a primitive made for the region's team size
// ran there on one thread, which computed only its share of the weight gradient (float32)
// or waited at a barrier for the others forever (bfloat16); im2col runs single-threaded
// there.
bool onednn_conv_applies(const ConvGeometry& g, Dtype dtype) {
#if defined(__AVX2__)
  static const bool on = [] {
    const char* env = std::getenv("TESSERA_CPU_ONEDNN_CONV");
    return !(env != nullptr && std::strcmp(env, "0") == 0);
  }();
  return on && g.n > 0 && g.c > 0 && g.o > 0 && !g.is_pointwise() && !direct_conv_applies(g) &&
         !omp_in_parallel() && (dtype == kFloat32 || (dtype == kBFloat16 && cpu_bf16_matmul_on()));
#else
  (void)g;
  (void)dtype;
  return false;
#endif
}

template <typename T>
void conv_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
                  const Window2d& win) {
  const ConvGeometry g = ConvGeometry::of(x.shape(), weight.shape(), win);
  if (out.numel() == 0) return;
  const T* px = data_of<T>(x);
  const T* pw = data_of<T>(weight);
  const T* pb = data_of<T>(bias);
  T* py = data_of<T>(out);
  if (direct_conv_applies(g)) return direct_conv_forward<T>(g, px, pw, pb, py);
  if constexpr (std::is_same_v<T, float>) {
    if (onednn_conv_applies(g, kFloat32)) {
      return onednn_conv_forward(g, OnednnConvType::kFloat32, px, pw, pb, py);
    }
  }
  im2col_conv_forward<T>(g, px, pw, pb, py);
}

template <typename T>
void conv_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_out,
                   const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias,
                   const Window2d& win) {
  const ConvGeometry g = ConvGeometry::of(x.shape(), weight.shape(), win);
  const T* px = data_of<T>(x);
  const T* pw = data_of<T>(weight);
  const T* pg = data_of<T>(grad_out);
  T* pdx = data_of<T>(grad_x);
  T* pdw = data_of<T>(grad_weight);
  T* pdb = data_of<T>(grad_bias);
  if (g.n > 0 && direct_conv_applies(g)) {
    return direct_conv_backward<T>(g, px, pw, pg, pdx, pdw, pdb);
  }
  if constexpr (std::is_same_v<T, float>) {
    if (onednn_conv_applies(g, kFloat32)) {
      return onednn_conv_backward(g, OnednnConvType::kFloat32, px, pw, pg, pdx, pdw, pdb);
    }
  }
  im2col_conv_backward<T>(g, px, pw, pg, pdx, pdw, pdb);
}

}  // namespace

bool CpuBackend::conv2d_takes_half(Dtype dtype, const Shape& x, const Shape& weight,
                                   const Window2d& w) const {
  return dtype == kBFloat16 && cpu_bf16_matmul_on() &&
         !direct_conv_applies(ConvGeometry::of(x, weight, w));
}

void CpuBackend::conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const Tensor& out, const Window2d& w) {
  launch_with(
      out.device().index(),
      [w](const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out) {
        with_scratch_memory("conv2d", out.device(), [&] {
          if (out.dtype() == kBFloat16) {  // Note [bfloat16 convolution]
            const ConvGeometry g = ConvGeometry::of(x.shape(), weight.shape(), w);
            if (out.numel() == 0) return;
            if (onednn_conv_applies(g, kBFloat16)) {
              return onednn_conv_forward(g, OnednnConvType::kBFloat16, data_of<BFloat16>(x),
                                         data_of<BFloat16>(weight), data_of<BFloat16>(bias),
                                         data_of<BFloat16>(out));
            }
            return im2col_conv_forward_bf16(g, data_of<BFloat16>(x), data_of<BFloat16>(weight),
                                            data_of<BFloat16>(bias), data_of<BFloat16>(out));
          }
          dispatch_floating(out.dtype(), [&](auto tag) {
            conv_forward<typename decltype(tag)::type>(x, weight, bias, out, w);
          });
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
        with_scratch_memory("conv2d_backward", x.device(), [&] {
          if (x.dtype() == kBFloat16) {  // Note [bfloat16 convolution backward]
            const ConvGeometry g = ConvGeometry::of(x.shape(), weight.shape(), w);
            if (onednn_conv_applies(g, kBFloat16)) {
              return onednn_conv_backward(g, OnednnConvType::kBFloat16, data_of<BFloat16>(x),
                                          data_of<BFloat16>(weight), data_of<BFloat16>(grad_out),
                                          data_of<BFloat16>(grad_x), data_of<BFloat16>(grad_weight),
                                          data_of<BFloat16>(grad_bias));
            }
            return im2col_conv_backward_bf16(g, data_of<BFloat16>(x), data_of<BFloat16>(weight),
                                             data_of<BFloat16>(grad_out), data_of<BFloat16>(grad_x),
                                             data_of<BFloat16>(grad_weight),
                                             data_of<BFloat16>(grad_bias));
          }
          dispatch_floating(x.dtype(), [&](auto tag) {
            conv_backward<typename decltype(tag)::type>(x, weight, grad_out, grad_x, grad_weight,
                                                        grad_bias, w);
          });
        });
      },
      x, weight, grad_out, grad_x, grad_weight, grad_bias);
}

}  // namespace tessera::detail::TESSERA_CPU_ISA
