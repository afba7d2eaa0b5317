// The parameter-free layers: activations, Flatten, Dropout.
#include "core/check.h"
#include "core/device_rules.h"
#include "tessera/factories.h"
#include "tessera/graph.h"
#include "tessera/nn/activation.h"
#include "tessera/nn/dropout.h"
#include "tessera/nn/flatten.h"
#include "tessera/operators.h"
#include "tessera/ops.h"

namespace tessera::nn {

Tensor ReLU::forward(const Tensor& x) { return relu(x); }
Tensor Sigmoid::forward(const Tensor& x) { return sigmoid(x); }
Tensor Tanh::forward(const Tensor& x) { return tanh(x); }
Tensor GELU::forward(const Tensor& x) { return gelu(x, approximate); }
Tensor SiLU::forward(const Tensor& x) { return silu(x); }

std::string GELU::extra_repr() const {
  return approximate == GeluApproximation::kTanh ? "approximate='tanh'" : "approximate='none'";
}

Tensor Flatten::forward(const Tensor& x) { return x.flatten(start_dim, end_dim); }

std::string Flatten::extra_repr() const {
  return fmt::format("start_dim={}, end_dim={}", start_dim, end_dim);
}

Dropout::Dropout(double p) : Module("Dropout"), p(p) {
  TESSERA_CHECK(p >= 0 && p <= 1, Error, "[Dropout] p is a probability in [0, 1], got {}", p);
}

Tensor Dropout::forward(const Tensor& x) {
  // p is a public member: checked again where it is used (p = -0.5 scaled every element by
  // 2/3, p = 2 zeroed them all, silently).
  TESSERA_CHECK(p >= 0 && p <= 1, Error,
                "[Dropout] {}'s p is a probability in [0, 1], got {}; set it to a value in "
                "that range",
                path(), p);
  if (!is_training() || p == 0) return x;
  TESSERA_CHECK(is_floating(x.dtype()), DtypeError, "[Dropout] {} needs a floating input, got {}",
                path(), dtype_name(x.dtype()));
  if (p == 1) return x * 0.0;
  TESSERA_CHECK(!detail::is_capturing(x.device()), GraphCaptureError,
                "[Dropout] {} draws a new mask at every call, which a graph {} is capturing "
                "cannot repeat; capture the model in eval mode (model.eval()), or train it "
                "without recording (TrainerOptions::graph = false, no --graph)",
                path(), x.device().str());
  // The mask holds 0 or 1/(1-p), so the forward and the backward are one multiply each.
  // Drawn in float32 for half inputs: p is compared finely, whatever x's format.
  const Tensor keep = rand(x.shape(), {is_half(x.dtype()) ? kFloat32 : x.dtype(), x.device()}) >= p;
  const Tensor mask = where(keep, 1.0 / (1.0 - p), zeros({}, {x.dtype(), x.device()}));
  return x * mask;
}

std::string Dropout::extra_repr() const { return fmt::format("p={}", p); }

}  // namespace tessera::nn
