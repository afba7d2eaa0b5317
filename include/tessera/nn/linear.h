#pragma once
/// Fully connected layers: y = x W^T + b over the last dim of x.
#include <cstdint>

#include "tessera/export.h"
#include "tessera/factories.h"
#include "tessera/nn/module.h"

namespace tessera::nn {

/// x W^T + b over the last dim of x (any leading dims): x [..., in], weight [out, in], bias
/// [out] or undefined. One op in the graph: its backward computes only the gradients its
/// inputs need (a network's input needs none) and the weight's directly in its layout.
TESSERA_API Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

/// Linear(in_features, out_features): weight [out, in] and bias [out], initialized like
/// PyTorch (uniform in +-1/sqrt(in_features)) directly on `options.device` (default: the
/// current DeviceScope's device) from the default generator (manual_seed).
class TESSERA_API Linear : public Module {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true,
         TensorOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  std::int64_t in_features, out_features;
  Parameter weight;  ///< [out_features, in_features]
  Parameter bias;    ///< [out_features]; undefined without bias
};

/// LazyLinear(out_features): like Linear, with in_features taken from the first input's
/// last dim (the book's nn.LazyLinear(1)). Its parameters are built at that first call: on
/// the device the module was moved to with to(), if it was (the input is then checked
/// against it), else on the input's device (MXNet's deferred initialization); with the
/// dtype given to to(dtype), else the input's (float32 for a half input under autocast, which
/// is autocast's output: parameters stay float32 there).
class TESSERA_API LazyLinear : public Module {
 public:
  explicit LazyLinear(std::int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  /// Whether the first call has built the parameters.
  bool built() const override { return weight.defined(); }

  std::int64_t in_features = 0;  ///< 0 until built
  std::int64_t out_features;
  Parameter weight;
  Parameter bias;

 private:
  bool has_bias_;
};

}  // namespace tessera::nn
