// Optimizer: the parameter checks shared by every optimizer, zero_grad, and the refusal to
// skip a step for optimizers that cannot.
#include "tessera/optim/optimizer.h"

#include <algorithm>
#include <charconv>
#include <string_view>
#include <unordered_map>

#include "core/check.h"
#include "core/device_rules.h"
#include "core/tensor_impl.h"
#include "tessera/graph.h"

// Note [A step refused before any update]
// A step once was one kernel per parameter (now one task or kernel for many: Note [One kernel
// for the parameters]). When each parameter's checks ran right before its own
// kernel, a refusal at parameter 2 (a grad on another device, a transposed parameter) came
// after parameters 0 and 1 had moved and their momentum had advanced; the message invites a
// fix and a second step(), which then updated 0 and 1 twice. So step_unless runs every
// parameter's checks first (detail::check_sgd_step / check_adam_step, the same checks the
// kernels' front ends repeat) and only then launches. What can still stop a step part-way
// is running out of memory for a gradient's conversion or a half-precision working copy.

namespace tessera::optim {

Optimizer::Optimizer(std::vector<Tensor> params, const char* name)
    : params_(std::move(params)), name_(name) {
  TESSERA_CHECK(!params_.empty(), Error,
                "[{}] got an empty parameter list; pass the tensors to optimize, e.g. "
                "module.parameters(). A model whose layers are lazy (LazyLinear) has none "
                "until its first forward: run one batch through it first, or give Classifier "
                "a make_optimizer and let Trainer::fit build it",
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
                  "[{}] parameter {} is {}; only floating tensors (float32, float64, bfloat16, "
                  "float16) can be optimized. Convert it with .to(kFloat32) before "
                  "requires_grad_()",
                  name_, i, dtype_name(p.dtype()));
    const auto [at, inserted] = seen.emplace(p.impl(), i);
    TESSERA_CHECK(inserted, Error,
                  "[{}] parameter {} is the same tensor as parameter {}; pass each parameter "
                  "once",
                  name_, i, at->second);
  }
}

void Optimizer::step_unless(const Tensor& found_inf) {
  if (!found_inf.defined()) return step();
  TESSERA_CHECK(false, Error,
                "[{}.step_unless] this optimizer cannot skip a step on the device, so a "
                "GradScaler cannot drive it; use SGD, Adam or AdamW, or override "
                "Optimizer::step_unless to pass found_inf to its kernels",
                name_);
}

void Optimizer::check_found_inf(const char* op, const Tensor& found_inf) const {
  // The kernels read it as one float on the parameter's device.
  TESSERA_CHECK(found_inf.dtype() == kFloat32, DtypeError,
                "[{}] found_inf is {}; it must be float32, as GradScaler makes it", op,
                dtype_name(found_inf.dtype()));
  TESSERA_CHECK(found_inf.dim() == 0, ShapeError,
                "[{}] found_inf has shape {}; it must be a 0-dim tensor, as GradScaler makes it",
                op, found_inf.shape().str());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    TESSERA_CHECK(!p.grad().defined() || p.device() == found_inf.device(), DeviceMismatchError,
                  "[{}] parameter {} is on {} but found_inf is on {}. An optimizer and its "
                  "gradient scaler work on one device: use one GradScaler per device",
                  op, i, p.device().str(), found_inf.device().str());
  }
}

void Optimizer::check_state_outside_capture(const char* op, std::size_t index) const {
  const Device d = params_[index].device();
  TESSERA_CHECK(!detail::is_capturing(d), GraphCaptureError,
                "[{}] parameter {} has no optimizer state yet, and {} is capturing a graph: "
                "the state its first step makes would be made again by every replay, "
                "resetting it. Take one step before Graph::capture (as Trainer does)",
                op, index, d.str());
}

OptimizerState Optimizer::state_dict() const {
  TESSERA_CHECK(false, Error,
                "[{}.state_dict] this optimizer cannot save its state; use SGD, Adam or AdamW, "
                "or override Optimizer::state_dict and load_state_dict",
                name_);
  return {};
}

void Optimizer::load_state_dict(const OptimizerState&) {
  TESSERA_CHECK(false, Error,
                "[{}.load_state_dict] this optimizer cannot load a state; use SGD, Adam or "
                "AdamW, or override Optimizer::state_dict and load_state_dict",
                name_);
}

// Note [Optimizer state keys]
// A state_dict names each tensor "<parameter index>.<name>", as torch.optim keys its state by
// parameter index: the optimizer holds tensors, not names (it may optimize tensors of no
// module, or of several), and indices are what every replica and rank agree on when each
// builds its model the same way. Options are left out, unlike PyTorch's param_groups: the
// resuming program passes them (and may mean to change lr); a file that carried them would
// silently override the command line.

namespace {

// "an Adam" (the message said "a Adam").
const char* article(const char* name) {
  return std::string_view("AEIOUaeiou").find(name[0]) != std::string_view::npos ? "an" : "a";
}

}  // namespace

std::pair<std::size_t, std::string> Optimizer::parse_state_key(
    const char* op, const std::string& key, const std::vector<std::string>& names) const {
  const std::size_t dot = key.find('.');
  std::size_t index = 0;
  const char* end = key.data() + (dot == std::string::npos ? 0 : dot);
  const auto [ptr, ec] = std::from_chars(key.data(), end, index);
  std::string name = dot == std::string::npos ? std::string() : key.substr(dot + 1);
  std::string known;
  for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
  TESSERA_CHECK(dot != std::string::npos && dot > 0 && ec == std::errc() && ptr == end, Error,
                "[{}] unknown key '{}': {} state keys are '<parameter index>.<name>' with name "
                "one of {}. Load a state_dict saved from {} {}",
                op, key, name_, known, article(name_), name_);
  TESSERA_CHECK(std::find(names.begin(), names.end(), name) != names.end(), Error,
                "[{}] unknown key '{}': {} keeps {} per parameter, not '{}'. Was the state "
                "saved from another kind of optimizer? Load it into the kind that saved it, "
                "built with the same settings, or build a fresh {} without loading it",
                op, key, name_, known, name, name_);
  TESSERA_CHECK(index < params_.size(), Error,
                "[{}] key '{}' names parameter {} but this {} has {} parameters. Build the "
                "optimizer over the same parameters as the one that was saved",
                op, key, index, name_, params_.size());
  return {index, std::move(name)};
}

void Optimizer::check_state_tensor(const char* op, const std::string& key, const Tensor& t,
                                   const Shape& shape, Dtype dtype) {
  TESSERA_CHECK(t.defined(), Error, "[{}] '{}' is an undefined tensor", op, key);
  TESSERA_CHECK(t.shape() == shape, ShapeError,
                "[{}] '{}' has shape {} but this optimizer keeps it as {}. Build the optimizer "
                "over the same model as the one that was saved",
                op, key, t.shape().str(), shape.str());
  TESSERA_CHECK(t.dtype() == dtype, DtypeError,
                "[{}] '{}' is {} but this optimizer keeps it as {}. Build the model in the "
                "dtype it was saved in",
                op, key, dtype_name(t.dtype()), dtype_name(dtype));
}

Tensor Optimizer::loaded_buffer(const char* op, const std::string& key, const Tensor& t,
                                const Tensor& param) {
  if (t.defined() && t.dtype() != param.dtype() && is_floating(t.dtype()) &&
      is_floating(param.dtype())) {
    check_state_tensor(op, key, t, param.shape(), t.dtype());
    return t.to(param.dtype());
  }
  check_state_tensor(op, key, t, param.shape(), param.dtype());
  return t;
}

void Optimizer::zero_grad() {
  for (Tensor& p : params_) p.set_grad(Tensor());
}

}  // namespace tessera::optim
