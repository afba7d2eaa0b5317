#pragma once
/// Optimizer: the base of SGD, Adam and AdamW. An optimizer holds handles to leaf parameters
/// (e.g. module.parameters()) and updates them in place on their own devices, all of a
/// device's parameters in one queued task on a CPU device and one fused kernel per 16 of
/// them on a GPU; its state (momentum, moments) lives beside each parameter and is
/// allocated at the first step that reaches it. Parameters without a grad are skipped.
#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tessera/export.h"
#include "tessera/tensor.h"

namespace tessera::optim {

/// An optimizer's state as named tensors, as state_dict() returns it and load_state_dict()
/// takes it; the same container as nn::StateDict. See Note [Optimizer state keys] in
/// src/optim/optimizer.cpp.
using OptimizerState = std::map<std::string, Tensor>;

class TESSERA_API Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// Updates every parameter that has a grad, in place on its device. Never waits. Throws
  /// DeviceMismatchError when a grad (or the optimizer's state) is on another device than
  /// its parameter, ShapeError when a grad's shape differs, Error for a non-contiguous
  /// parameter. SGD, Adam and AdamW check every parameter before updating any, so a refused
  /// step leaves every parameter and its state as they were: fix the cause and step again.
  virtual void step() = 0;
  /// As step(), unless `found_inf` is nonzero: a float32 0-dim tensor on the parameters'
  /// device, as GradScaler (grad_scaler.h) makes it. The kernels read it on the device and
  /// then write nothing, neither parameters nor state, so deciding costs no host wait; an
  /// undefined found_inf is step(). SGD, Adam and AdamW implement it, and throw DtypeError
  /// or ShapeError for a found_inf that is not a float32 0-dim tensor and DeviceMismatchError
  /// for one on another device than a parameter with a grad; the default throws Error, as an
  /// optimizer that cannot skip a step on the device cannot be scaled.
  virtual void step_unless(const Tensor& found_inf);
  /// Clears every parameter's grad (sets it undefined, like PyTorch's set_to_none=True).
  void zero_grad();
  /// The parameters, in the order given.
  const std::vector<Tensor>& params() const { return params_; }
  /// The learning rate, and a new one (Error when negative), e.g. for a schedule.
  virtual double lr() const = 0;
  virtual void set_lr(double lr) = 0;
  /// The optimizer and its options as its constructor takes them, e.g. "SGD(lr=0.1,
  /// momentum=0.9, dampening=0, weight_decay=0, nesterov=false)"; each number is written so
  /// that it reads back exactly, so equal strings mean equal steps. An optimizer of your own
  /// gives its name unless it overrides this.
  virtual std::string str() const { return name_; }

  /// Capturable: everything that changes from one step to the next lives on the devices
  /// (Adam's step counts), so that a step recorded in a graph (graph.h) replays as the
  /// next step, not as the recorded one. Costs one tiny op per parameter and step. Other
  /// host settings (lr, options) are fixed into a recording: record again after changing
  /// them. SGD's only host state is whether its momentum buffers exist: record a step
  /// after the first one (as Trainer does). Off by default.
  virtual void set_capturable(bool on) { capturable_ = on; }
  bool capturable() const { return capturable_; }

  /// The state that step() carries from one step to the next, as copies on the devices it
  /// lives on (where the parameters were at the first step: after moving the model,
  /// load_state_dict(state_dict()) moves it to them), keyed "<parameter index>.<name>"
  /// ("0.momentum_buffer", "3.exp_avg"); a parameter no step has reached yet has no entries.
  /// Options (lr, betas, ...) are not in it: they come from the constructor and set_lr, as the
  /// program that resumes gives them. Never waits for the device. SGD, Adam and AdamW implement it;
  /// the default throws Error, so that an optimizer that cannot save its state is never resumed
  /// without it.
  virtual OptimizerState state_dict() const;
  /// Copies `state` into this optimizer's state, on its parameters' devices (a tensor on
  /// another device is copied there explicitly). Every key is checked before anything
  /// changes: Error for a key this optimizer does not keep (another optimizer's state), a
  /// parameter index past params(), or a parameter's entries incomplete; ShapeError for a
  /// tensor unlike the parameter's state, DtypeError for one of another kind of dtype (a
  /// floating buffer of another floating dtype is converted to its parameter's, as in
  /// PyTorch). On an error this optimizer is left as it was. Parameters without entries
  /// start afresh. The default throws Error.
  virtual void load_state_dict(const OptimizerState& state);

 protected:
  /// Checks `params`: not empty, each defined, a leaf, floating, and given once (Error,
  /// DtypeError). `name` ("SGD") prefixes messages.
  Optimizer(std::vector<Tensor> params, const char* name);
  /// The checks step_unless promises on a defined found_inf; `op` ("SGD.step_unless").
  void check_found_inf(const char* op, const Tensor& found_inf) const;
  /// Throws GraphCaptureError when parameter `index`'s device is capturing a graph: the state
  /// a first step makes (zeros, a first buffer) would be made again at every replay,
  /// resetting it. Call before making state lazily; `op` ("Adam.step").
  void check_state_outside_capture(const char* op, std::size_t index) const;
  /// Splits a state_dict key "<index>.<name>" into its parameter index and name, checking
  /// that the index names a parameter and the name is one of `names` (Error, naming `op`).
  std::pair<std::size_t, std::string> parse_state_key(const char* op, const std::string& key,
                                                      const std::vector<std::string>& names) const;
  /// Checks one loaded tensor against what the optimizer keeps: `shape`, `dtype` (ShapeError,
  /// DtypeError naming `op` and `key`).
  static void check_state_tensor(const char* op, const std::string& key, const Tensor& t,
                                 const Shape& shape, Dtype dtype);
  /// A loaded per-parameter buffer (a momentum, a moment) for `param`: its shape checked as
  /// above, and a floating buffer of another floating dtype converted to the parameter's, as
  /// PyTorch does (a half-precision copy of a float32 run resumes its optimizer too).
  static Tensor loaded_buffer(const char* op, const std::string& key, const Tensor& t,
                              const Tensor& param);

  std::vector<Tensor> params_;
  const char* name_;
  bool capturable_ = false;
};

}  // namespace tessera::optim
