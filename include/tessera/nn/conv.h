#pragma once
/// Conv2d: a 2-D convolution layer over NCHW inputs (see tessera/conv.h for the op).
#include <array>
#include <cstdint>

#include "tessera/conv.h"
#include "tessera/export.h"
#include "tessera/factories.h"
#include "tessera/nn/module.h"

namespace tessera::nn {

/// Conv2d(in_channels, out_channels, kernel_size, {.stride, .padding}): weight [O, C, kH, kW]
/// and bias [O], initialized like PyTorch (uniform in +-1/sqrt(C kH kW)) on
/// `options.device` directly.
class TESSERA_API Conv2d : public Module {
 public:
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::array<int, 2> kernel_size,
         Conv2dOptions conv = {}, bool bias = true, TensorOptions options = {});
  // Parameters named apart from the members, for users' -Wshadow: the body is in the header.
  Conv2d(std::int64_t in, std::int64_t out, int kernel, Conv2dOptions options_of_conv = {},
         bool with_bias = true, TensorOptions options = {})
      : Conv2d(in, out, {kernel, kernel}, options_of_conv, with_bias, options) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  std::int64_t in_channels, out_channels;
  std::array<int, 2> kernel_size;
  Conv2dOptions conv;
  Parameter weight;  ///< [out_channels, in_channels, kH, kW]
  Parameter bias;    ///< [out_channels]; undefined without bias
};

/// MaxPool2d(kernel) and AvgPool2d(kernel): stride defaults to the kernel size.
class TESSERA_API MaxPool2d : public Module {
 public:
  explicit MaxPool2d(int kernel_size, int stride = 0, int padding = 0)
      : MaxPool2d(Pool2dOptions{{kernel_size, kernel_size}, {stride, stride}, {padding, padding}}) {
  }
  /// ShapeError for a kernel that is not positive, a negative stride (0 = the kernel) or
  /// padding, or padding over half the kernel.
  explicit MaxPool2d(Pool2dOptions options);
  Tensor forward(const Tensor& x) override { return max_pool2d(x, options); }
  std::string extra_repr() const override;

  Pool2dOptions options;
};

class TESSERA_API AvgPool2d : public Module {
 public:
  explicit AvgPool2d(int kernel_size, int stride = 0, int padding = 0)
      : AvgPool2d(Pool2dOptions{{kernel_size, kernel_size}, {stride, stride}, {padding, padding}}) {
  }
  explicit AvgPool2d(Pool2dOptions options);  ///< ShapeError as MaxPool2d
  Tensor forward(const Tensor& x) override { return avg_pool2d(x, options); }
  std::string extra_repr() const override;

  Pool2dOptions options;
};

}  // namespace tessera::nn
