#pragma once
/// Elementwise activations as modules (no parameters).
#include "tessera/export.h"
#include "tessera/nn/module.h"
#include "tessera/ops.h"

namespace tessera::nn {

class TESSERA_API ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& x) override;
};

class TESSERA_API Sigmoid : public Module {
 public:
  Sigmoid() : Module("Sigmoid") {}
  Tensor forward(const Tensor& x) override;
};

class TESSERA_API Tanh : public Module {
 public:
  Tanh() : Module("Tanh") {}
  Tensor forward(const Tensor& x) override;
};

/// gelu(x, approximate); prints as PyTorch's: GELU(approximate='none') or 'tanh'.
class TESSERA_API GELU : public Module {
 public:
  explicit GELU(GeluApproximation approximation = GeluApproximation::kNone)
      : Module("GELU"), approximate(approximation) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  GeluApproximation approximate;
};

/// silu(x), x * sigmoid(x).
class TESSERA_API SiLU : public Module {
 public:
  SiLU() : Module("SiLU") {}
  Tensor forward(const Tensor& x) override;
};

}  // namespace tessera::nn
