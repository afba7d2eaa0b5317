#pragma once
/// nn::Parameter: a layer's public handle to one of its registered parameters
/// (`linear.weight`, `conv.bias`). It is a Tensor for everything but assignment: assigning a
/// tensor to it updates the registered parameter itself instead of rebinding the handle.
///
///   nn::Linear linear(2, 8);
///   optim::SGD opt(linear.parameters(), {.lr = 0.1});
///   linear.weight = w.to(dev);   // the registered weight now holds w's data, on dev:
///                                // parameters(), opt and the device audit all see it
#include "tessera/export.h"
#include "tessera/tensor.h"

namespace tessera::nn {

class Module;

class TESSERA_API Parameter : public Tensor {
 public:
  /// Not registered yet (a layer without bias, a lazy layer before its first call).
  Parameter() = default;
  Parameter(const Parameter&) = default;

  /// Makes the registered parameter hold `value`: its data (shared with `value`, not copied,
  /// like LibTorch's weight.set_data(value)), device and floating dtype. The handle stays the
  /// one that parameters(), state_dict() and an optimizer built earlier hold, so they see
  /// the new value; it stays a leaf that requires grad, and its gradient is cleared (an
  /// optimizer's state, such as momentum, stays where it was). Waits for the devices
  /// involved, like Module::to. Throws ShapeError when the shapes differ, DtypeError for a
  /// non-floating value, and Error for an undefined value or a parameter that is not
  /// registered. (Assigning through a plain Tensor& bound to it rebinds only that reference.)
  Parameter& operator=(const Tensor& value);
  /// The same, from another parameter's value. A layer binds its unregistered Parameter
  /// member to what register_parameter() returns this way (`weight = register_parameter(..)`).
  Parameter& operator=(const Parameter& other);

 private:
  friend class Module;
  explicit Parameter(Tensor registered) : Tensor(std::move(registered)), registration_(true) {}
  bool registration_ = false;  // returned by register_parameter(): binds an unregistered one
};

}  // namespace tessera::nn
