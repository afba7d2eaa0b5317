#pragma once
/// Elementwise activations as modules (no parameters).
#include "tessera/export.h"
#include "tessera/nn/module.h"

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

}  // namespace tessera::nn
