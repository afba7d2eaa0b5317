// Front ends of conv2d, max_pool2d and avg_pool2d: checks, output shapes, the backend
// kernels on contiguous operands, and their backward formulas.
#include "tessera/conv.h"

#include <limits>
#include <string_view>

#include "autograd/record.h"
#include "backend/backend.h"
#include "core/check.h"
#include "core/device_rules.h"
#include "core/tensor_impl.h"
#include "ops/half_compute.h"
#include "ops/layer_dtypes.h"
#include "tessera/autograd.h"

namespace tessera {
namespace {

using detail::PoolKind;
using detail::Window2d;

void check_input(const char* op, const Tensor& x) {
  TESSERA_CHECK(x.dim() == 4, ShapeError,
                "[{}] expects a batch of images [N, C, H, W], got shape {}; add a batch dim "
                "with x.unsqueeze(0)",
                op, x.shape().str());
  TESSERA_CHECK(is_floating(x.dtype()), DtypeError,
                "[{}] needs floating tensors (float32, float64, bfloat16 or float16), got {}; "
                "convert with "
                ".to(kFloat32)",
                op, dtype_name(x.dtype()));
}

// Output extent along one dim, with the checks a user needs to see.
std::int64_t out_extent(const char* op, const char* dim, std::int64_t size, int kernel, int stride,
                        int pad) {
  TESSERA_CHECK(stride > 0 && pad >= 0, ShapeError,
                "[{}] stride must be positive and padding non-negative, got stride {} and "
                "padding {} along {}",
                op, stride, pad, dim);
  // In int64: 2 * pad overflowed int for a padding of 2^30, and the message then said the
  // padded input was smaller than the kernel.
  // The kernels index the padded input (and the window) in int: 2^30 of padding made them
  // compute fewer output rows than the output has, leaving the rest unwritten.
  constexpr std::int64_t kMostPadded = std::numeric_limits<int>::max() / 2;
  TESSERA_CHECK(size + 2 * std::int64_t{pad} <= kMostPadded, ShapeError,
                "[{}] the padded input along {} ({} + 2 x {}) is larger than the {} elements "
                "the kernels index; use less padding",
                op, dim, size, pad, kMostPadded);
  TESSERA_CHECK(size > 0 || pad > 0, ShapeError,
                "[{}] the input has no {} (size 0 along {}); a convolution needs at least one "
                "row and one column of input",
                op, std::string_view(dim) == "H" ? "rows" : "columns", dim);
  TESSERA_CHECK(size + 2 * std::int64_t{pad} >= kernel, ShapeError,
                "[{}] the kernel ({} along {}) is larger than the padded input ({} + 2 x {}); "
                "use a smaller kernel or more padding",
                op, kernel, dim, size, pad);
  return (size + 2 * std::int64_t{pad} - kernel) / stride + 1;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Conv2dOptions options) {
  const Device device =
      bias.defined()
          ? detail::common_device("conv2d", {{"input", &x}, {"weight", &weight}, {"bias", &bias}})
          : detail::common_device("conv2d", {{"input", &x}, {"weight", &weight}});
  check_input("conv2d", x);
  if (const auto ac = detail::autocast_for(x);
      ac && detail::autocast_for(weight) && (!bias.defined() || detail::autocast_for(bias)) &&
      (x.dtype() != *ac || weight.dtype() != *ac || (bias.defined() && bias.dtype() != *ac))) {
    // Recorded casts (tessera/autocast.h).
    return conv2d(x.to(*ac), weight.to(*ac), bias.defined() ? bias.to(*ac) : bias, options);
  }
  TESSERA_CHECK(weight.dim() == 4, ShapeError,
                "[conv2d] weight must be [out_channels, in_channels, kH, kW], got shape {}",
                weight.shape().str());
  TESSERA_CHECK(weight.size(1) == x.size(1), ShapeError,
                "[conv2d] input has {} channels but weight {} expects {}", x.size(1),
                weight.shape().str(), weight.size(1));
  detail::check_layer_dtypes("conv2d", x, weight, bias);
  // An empty kernel gave an output of the bias alone, one larger than the input.
  TESSERA_CHECK(weight.size(2) > 0 && weight.size(3) > 0 &&
                    weight.size(2) <= std::numeric_limits<int>::max() &&
                    weight.size(3) <= std::numeric_limits<int>::max(),
                ShapeError, "[conv2d] kernel sizes must be positive, got {}x{} (weight {})",
                weight.size(2), weight.size(3), weight.shape().str());
  TESSERA_CHECK(!bias.defined() || bias.shape() == Shape({weight.size(0)}), ShapeError,
                "[conv2d] bias must be [{}] for weight {}, got shape {}", weight.size(0),
                weight.shape().str(), bias.shape().str());
  const Window2d w{static_cast<int>(weight.size(2)),
                   static_cast<int>(weight.size(3)),
                   options.stride[0],
                   options.stride[1],
                   options.padding[0],
                   options.padding[1]};
  // Checks the window before a backend looks at the shapes (a stride of 0 divided by zero in
  // ConvGeometry::of, from conv2d_takes_half).
  const std::int64_t oh = out_extent("conv2d", "H", x.size(2), w.kernel_h, w.stride_h, w.pad_h);
  const std::int64_t ow = out_extent("conv2d", "W", x.size(3), w.kernel_w, w.stride_w, w.pad_w);
  if (is_half(x.dtype()) && !detail::backend_of(device).conv2d_takes_half(
                                x.dtype(), x.shape(), weight.shape(), w)) [[unlikely]] {
    // In float32 through recorded casts (Note [Half precision] in ops/half_compute.h), where
    // autocast must not cast the operands back.
    const AutocastGuard exact(device.kind(), kBFloat16, /*enabled=*/false);
    return conv2d(x.to(kFloat32), weight.to(kFloat32), bias.defined() ? bias.to(kFloat32) : bias,
                  options)
        .to(x.dtype());
  }
  Tensor out =
      detail::make_output({x.size(0), weight.size(0), oh, ow}, x.dtype(), device, "conv2d");
  Tensor xc, wc, bc;
  {
    NoGradGuard internal;
    xc = x.contiguous();
    wc = weight.contiguous();
    bc = bias.defined() ? bias.contiguous() : bias;
  }
  detail::backend_of(device).conv2d(xc, wc, bc, out, w);
  if (detail::needs_grad({&x, &weight, &bias})) {
    const bool need_x = x.requires_grad(), need_w = weight.requires_grad();
    const bool need_b = bias.defined() && bias.requires_grad();
    detail::record("conv2d", out, {&x, &weight, &bias},
                   [xc = xc.detach(), wc = wc.detach(), w, need_x, need_w, need_b,
                    bias_shape = bias.defined() ? bias.shape() : Shape()](const Tensor& g) {
                     const Device d = xc.device();
                     // A half xc: the backend took the half tensors (conv2d_takes_half), and
                     // computes their gradients from them too (Note [bfloat16 convolution
                     // backward]).
                     NoGradGuard internal;
                     const Tensor gk = g.to(xc.dtype()).contiguous();
                     Tensor dx, dw, db;
                     if (need_x)
                       dx = detail::make_output(xc.shape(), xc.dtype(), d, "conv2d_backward");
                     if (need_w)
                       dw = detail::make_output(wc.shape(), wc.dtype(), d, "conv2d_backward");
                     if (need_b)
                       db = detail::make_output(bias_shape, wc.dtype(), d, "conv2d_backward");
                     detail::backend_of(d).conv2d_backward(xc, wc, gk, dx, dw, db, w);
                     return std::vector<Tensor>{dx, dw, db};
                   },
                   {{"input", need_w ? &xc : nullptr}, {"weight", need_x ? &wc : nullptr}});
  }
  return out;
}

namespace {

Tensor pool2d(PoolKind kind, const char* op, const Tensor& x, const Pool2dOptions& options) {
  detail::check_defined(x, op, "input");
  check_input(op, x);
  if (is_half(x.dtype())) [[unlikely]] {  // as conv2d
    return pool2d(kind, op, x.to(kFloat32), options).to(x.dtype());
  }
  const Window2d w{options.kernel[0],
                   options.kernel[1],
                   options.stride[0] == 0 ? options.kernel[0] : options.stride[0],
                   options.stride[1] == 0 ? options.kernel[1] : options.stride[1],
                   options.padding[0],
                   options.padding[1]};
  TESSERA_CHECK(w.kernel_h > 0 && w.kernel_w > 0, ShapeError,
                "[{}] kernel sizes must be positive, got {}x{}", op, w.kernel_h, w.kernel_w);
  TESSERA_CHECK(2 * std::int64_t{w.pad_h} <= w.kernel_h && 2 * std::int64_t{w.pad_w} <= w.kernel_w,
                ShapeError, "[{}] padding ({}, {}) must be at most half the kernel ({}x{})", op,
                w.pad_h, w.pad_w, w.kernel_h, w.kernel_w);
  // A plane of no rows or columns has no window that holds an input: its windows were all
  // padding, max took -inf with index 0 into the empty plane, and backward wrote there.
  TESSERA_CHECK(x.numel() > 0 || x.size(0) == 0 || x.size(1) == 0, ShapeError,
                "[{}] input of shape {} has an empty plane ({} x {}); pooling needs at least one "
                "row and one column (only the batch or the channels may be 0)",
                op, x.shape().str(), x.size(2), x.size(3));
  const std::int64_t oh = out_extent(op, "H", x.size(2), w.kernel_h, w.stride_h, w.pad_h);
  const std::int64_t ow = out_extent(op, "W", x.size(3), w.kernel_w, w.stride_w, w.pad_w);
  const Device device = x.device();
  const Shape out_shape{x.size(0), x.size(1), oh, ow};
  Tensor out = detail::make_output(out_shape, x.dtype(), device, op);
  Tensor indices;
  if (kind == PoolKind::kMax) indices = detail::make_output(out_shape, kInt64, device, op);
  Tensor xc;
  {
    NoGradGuard internal;
    xc = x.contiguous();
  }
  detail::backend_of(device).pool2d(kind, xc, out, indices, w);
  if (detail::needs_grad(x)) {
    detail::record(
        op, out, {&x},
        [kind, indices, w, x_shape = x.shape(), dtype = x.dtype(), device](const Tensor& g) {
          Tensor dx = detail::make_output(x_shape, dtype, device, "pool2d_backward");
          detail::backend_of(device).pool2d_backward(kind, g.contiguous(), indices, dx, w);
          return std::vector<Tensor>{dx};
        });
  }
  return out;
}

}  // namespace

Tensor max_pool2d(const Tensor& x, Pool2dOptions options) {
  return pool2d(PoolKind::kMax, "max_pool2d", x, options);
}

Tensor avg_pool2d(const Tensor& x, Pool2dOptions options) {
  return pool2d(PoolKind::kAvg, "avg_pool2d", x, options);
}

}  // namespace tessera
