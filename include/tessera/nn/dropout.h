#pragma once
/// Dropout: in training mode, zeroes each element with probability p (drawn on the input's
/// device from the default generator) and scales the rest by 1/(1-p); in eval mode it
/// passes the input through.
#include "tessera/export.h"
#include "tessera/nn/module.h"

namespace tessera::nn {

class TESSERA_API Dropout : public Module {
 public:
  /// Error when p is outside [0, 1].
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  double p;
};

}  // namespace tessera::nn
