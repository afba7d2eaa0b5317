// Conv2d and the pooling layers.
#include "tessera/nn/conv.h"

#include <cmath>

#include "core/check.h"
#include "core/tensor_impl.h"

namespace tessera::nn {
namespace {

std::string pool_repr(const Pool2dOptions& o) {
  return fmt::format("kernel_size=({}, {}), stride=({}, {}), padding=({}, {})", o.kernel[0],
                     o.kernel[1], o.stride[0] == 0 ? o.kernel[0] : o.stride[0],
                     o.stride[1] == 0 ? o.kernel[1] : o.stride[1], o.padding[0], o.padding[1]);
}

// At construction, not at the first call (max_pool2d and avg_pool2d check them there too).
void check_pool(const char* layer, const Pool2dOptions& o) {
  TESSERA_CHECK(o.kernel[0] > 0 && o.kernel[1] > 0 && o.stride[0] >= 0 && o.stride[1] >= 0 &&
                    o.padding[0] >= 0 && o.padding[1] >= 0,
                ShapeError,
                "[{}] kernel sizes must be positive, strides positive (or 0 for the kernel "
                "size) and padding non-negative, got kernel_size=({}, {}), stride=({}, {}), "
                "padding=({}, {})",
                layer, o.kernel[0], o.kernel[1], o.stride[0], o.stride[1], o.padding[0],
                o.padding[1]);
  TESSERA_CHECK(2 * std::int64_t{o.padding[0]} <= o.kernel[0] &&
                    2 * std::int64_t{o.padding[1]} <= o.kernel[1],
                ShapeError, "[{}] padding ({}, {}) must be at most half the kernel ({}x{})", layer,
                o.padding[0], o.padding[1], o.kernel[0], o.kernel[1]);
}

}  // namespace

MaxPool2d::MaxPool2d(Pool2dOptions options) : Module("MaxPool2d"), options(options) {
  check_pool("MaxPool2d", options);
}

AvgPool2d::AvgPool2d(Pool2dOptions options) : Module("AvgPool2d"), options(options) {
  check_pool("AvgPool2d", options);
}

Conv2d::Conv2d(std::int64_t in, std::int64_t out, std::array<int, 2> kernel, Conv2dOptions conv,
               bool with_bias, TensorOptions options)
    : Module("Conv2d"), in_channels(in), out_channels(out), kernel_size(kernel), conv(conv) {
  TESSERA_CHECK(in > 0 && out > 0 && kernel[0] > 0 && kernel[1] > 0, ShapeError,
                "[Conv2d] channels and kernel sizes must be positive, got in_channels={}, "
                "out_channels={}, kernel_size=({}, {})",
                in, out, kernel[0], kernel[1]);
  // At construction, not at the first call (conv2d checks them there too).
  TESSERA_CHECK(
      conv.stride[0] > 0 && conv.stride[1] > 0 && conv.padding[0] >= 0 && conv.padding[1] >= 0,
      ShapeError,
      "[Conv2d] stride must be positive and padding non-negative, got stride=({}, {}) "
      "and padding=({}, {})",
      conv.stride[0], conv.stride[1], conv.padding[0], conv.padding[1]);
  TESSERA_CHECK(!options.dtype || is_floating(*options.dtype), DtypeError,
                "[Conv2d] parameters are floating-point, got dtype {}; make the layer float32 "
                "(the default), float64 or a half type",
                dtype_name(*options.dtype));
  const std::int64_t fan_in = in * kernel[0] * kernel[1];
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  try {
    weight = register_parameter("weight",
                                uniform({out, in, kernel[0], kernel[1]}, -bound, bound, options));
    if (with_bias) bias = register_parameter("bias", uniform({out}, -bound, bound, options));
  } catch (const OutOfMemoryError& e) {  // named the layer, not the uniform() it calls
    throw OutOfMemoryError(fmt::format("[Conv2d] weight [{}, {}, {}, {}]: {}", out, in, kernel[0],
                                       kernel[1], e.what()));
  }
}

Tensor Conv2d::forward(const Tensor& x) {
  detail::check_defined(x, "Conv2d", "input");
  TESSERA_CHECK(x.dim() == 4 && x.size(1) == in_channels, ShapeError,
                "[Conv2d] {} expects inputs [N, {}, H, W], got shape {}; {}", path(), in_channels,
                x.shape().str(),
                x.dim() == 3 ? "for one image, add the batch dim with x.unsqueeze(0)"
                : x.dim() == 4
                    ? fmt::format("the layer was built for {} input channels", in_channels)
                    : std::string("reshape the input to [N, C, H, W]"));
  return conv2d(x, weight, bias, conv);
}

std::string Conv2d::extra_repr() const {
  return fmt::format("{}, {}, kernel_size=({}, {}), stride=({}, {}), padding=({}, {}), bias={}",
                     in_channels, out_channels, kernel_size[0], kernel_size[1], conv.stride[0],
                     conv.stride[1], conv.padding[0], conv.padding[1], bias.defined());
}

std::string MaxPool2d::extra_repr() const { return pool_repr(options); }
std::string AvgPool2d::extra_repr() const { return pool_repr(options); }

}  // namespace tessera::nn
