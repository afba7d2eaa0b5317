#pragma once
/// Flatten: merges dims start_dim..end_dim (by default all but the batch dim).
#include "tessera/export.h"
#include "tessera/nn/module.h"

namespace tessera::nn {

class TESSERA_API Flatten : public Module {
 public:
  explicit Flatten(int start = 1, int end = -1)
      : Module("Flatten"), start_dim(start), end_dim(end) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  int start_dim, end_dim;
};

}  // namespace tessera::nn
