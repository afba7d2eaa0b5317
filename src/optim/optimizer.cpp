// Optimizer: the parameter checks shared by every optimizer, and zero_grad.
#include "tessera/optim/optimizer.h"

#include <unordered_map>

#include "core/check.h"
#include "core/tensor_impl.h"

namespace tessera::optim {

Optimizer::Optimizer(std::vector<Tensor> params, const char* name)
    : params_(std::move(params)), name_(name) {
  TESSERA_CHECK(!params_.empty(), Error,
                "[{}] got an empty parameter list; pass the tensors to optimize, e.g. "
                "module.parameters()",
                name_);
  std::unordered_map<const detail::TensorImpl*, std::size_t> seen;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    TESSERA_CHECK(p.defined(), Error, "[{}] parameter {} is an undefined tensor", name_, i);
    TESSERA_CHECK(p.is_leaf(), Error,
                  "[{}] parameter {} is not a leaf: it was computed by an op that requires "
                  "grad. Optimize the leaf tensors themselves (or x.detach().requires_grad_())",
                  name_, i);
    TESSERA_CHECK(is_floating(p.dtype()), DtypeError,
                  "[{}] parameter {} is {}; only float32 and float64 tensors can be optimized. "
                  "Convert it with .to(kFloat32) before requires_grad_()",
                  name_, i, dtype_name(p.dtype()));
    const auto [at, inserted] = seen.emplace(p.impl(), i);
    TESSERA_CHECK(inserted, Error,
                  "[{}] parameter {} is the same tensor as parameter {}; pass each parameter "
                  "once",
                  name_, i, at->second);
  }
}

void Optimizer::zero_grad() {
  for (Tensor& p : params_) p.set_grad(Tensor());
}

Tensor Optimizer::grad_for_step(std::size_t i) const {
  const Tensor& p = params_[i];
  Tensor g = p.grad();
  if (!g.defined()) return g;
  TESSERA_CHECK(g.device() == p.device(), DeviceMismatchError,
                "[{}.step] parameter {} is on {} but its grad is on {}; a grad must live on "
                "its parameter's device. Move it with p.set_grad(p.grad().to({}))",
                name_, i, p.device().str(), g.device().str(), p.device().str());
  TESSERA_CHECK(g.shape() == p.shape(), ShapeError,
                "[{}.step] parameter {} has shape {} but its grad has shape {}", name_, i,
                p.shape().str(), g.shape().str());
  TESSERA_CHECK(p.is_contiguous(), Error,
                "[{}.step] parameter {} is not contiguous (a transposed or sliced view); "
                "optimize a contiguous tensor, e.g. x.contiguous().detach().requires_grad_()",
                name_, i);
  if (g.dtype() != p.dtype()) g = g.to(p.dtype());  // kernels, no wait
  return g.contiguous();
}

void Optimizer::check_state(std::size_t i, const Tensor& state) const {
  const Tensor& p = params_[i];
  TESSERA_CHECK(state.device() == p.device(), DeviceMismatchError,
                "[{}.step] parameter {} is now on {} but its optimizer state is on {}; create "
                "the optimizer after moving the model",
                name_, i, p.device().str(), state.device().str());
  TESSERA_CHECK(state.dtype() == p.dtype() && state.shape() == p.shape(), Error,
                "[{}.step] parameter {} is now {} {} but its optimizer state is {} {}; create "
                "the optimizer after converting the model",
                name_, i, dtype_name(p.dtype()), p.shape().str(), dtype_name(state.dtype()),
                state.shape().str());
}

}  // namespace tessera::optim
