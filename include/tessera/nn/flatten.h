#pragma once
/// Flatten: merges dims start_dim..end_dim (by default all but the batch dim).
#include "tessera/export.h"
#include "tessera/nn/module.h"

namespace tessera::nn {

class TESSERA_API Flatten : public Module {
 public:
  explicit Flatten(int start_dim = 1, int end_dim = -1)
      : Module("Flatten"), start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  int start_dim, end_dim;
};

}  // namespace tessera::nn
