#pragma once
/// nn::Module: the base of every layer and model. A module owns named parameters (leaf
/// tensors that require grad), buffers (state that is not trained) and child modules, and
/// every tensor it holds is one of these, so `to(device)` moves all of it (a model cannot
/// "half move"). Calling a module checks that its input is on the device of its own
/// parameters and throws DeviceMismatchError naming the module path otherwise:
///
///   nn::Sequential net(nn::Linear(2, 8), nn::ReLU(), nn::Linear(8, 1));
///   net.to(try_gpu());                 // parameters and buffers move in place
///   Tensor y = net(X);                 // X must be on net.device()
///   net.at<nn::Linear>(0).weight.device();   // the book's net[0].weight.data.device
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/device.h"
#include "tessera/dtype.h"
#include "tessera/export.h"
#include "tessera/nn/parameter.h"
#include "tessera/tensor.h"

namespace tessera::nn {

/// Name -> tensor, as state_dict() returns it and load_state_dict() takes it. Names are
/// dotted paths: "0.weight", "fc1.bias".
using StateDict = std::map<std::string, Tensor>;

class TESSERA_API Module {
 public:
  /// Detaches the children: a layer its own shared_ptr keeps alive outlives its model as a
  /// layer of no model (its path is its own again, and another model may take it).
  virtual ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  /// Moving keeps the children and re-parents them to the new object. The new object is no
  /// model's child (a parent holds the moved-from object).
  Module(Module&& other) noexcept;
  Module& operator=(Module&& other) = delete;

  /// Checks that `x` is on the device of this module's own parameters and buffers (throws
  /// DeviceMismatchError naming the module path, the parameter and both devices), then
  /// runs forward().
  Tensor operator()(const Tensor& x);
  /// The computation, for subclasses to define. Call modules through operator().
  virtual Tensor forward(const Tensor& x) = 0;
  /// Whether this module has made its parameters: false only for a lazy layer
  /// (nn::LazyLinear) before its first call.
  virtual bool built() const { return true; }
  /// Whether this module and every descendant are built().
  bool all_built() const;

  /// Parameters of this module and (with `recurse`) its descendants, in registration order.
  /// A tensor registered under several names (tied weights) comes once, under its first name,
  /// as in PyTorch: an optimizer steps it once, and clipping counts its gradient once.
  std::vector<Tensor> parameters(bool recurse = true) const;
  /// The same with names; `remove_duplicate` false lists a tied tensor under every name
  /// (state_dict() does: each name is a key of a checkpoint).
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true,
                                                               bool remove_duplicate = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true,
                                                            bool remove_duplicate = true) const;
  /// Direct children, and every module of the tree (this one first, named "").
  std::vector<std::pair<std::string, Module*>> named_children() const;
  std::vector<std::pair<std::string, Module*>> named_modules();
  /// The parameter or buffer at a dotted path ("0.weight"); Error listing the names there
  /// are when none has that name.
  Tensor tensor(const std::string& path) const;
  /// Calls fn on every module of the tree, children first (for custom initialization).
  Module& apply(const std::function<void(Module&)>& fn);

  /// Training mode (Dropout drops) or evaluation mode (Dropout passes through), recursively.
  Module& train(bool on = true);
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }

  /// Moves every parameter and buffer to `device`, in place: tensor handles taken before
  /// (`layer.weight`, an optimizer's params) see the new device. Grads move with their
  /// parameters. Waits for the old device first (moving is a deliberate, rare step). Lazy
  /// layers not yet built will build their parameters on `device`.
  Module& to(Device device);
  /// Converts floating parameters, buffers and grads to `dtype` in place.
  Module& to(Dtype dtype);
  /// The one device all parameters and buffers share. Throws DeviceMismatchError listing
  /// each tensor and its device when they differ, and Error when the module holds no
  /// tensor yet (a lazy layer before its first call) and was never moved.
  Device device() const;

  /// Handles to every parameter and buffer (not copies), by dotted name.
  StateDict state_dict() const;
  /// Copies `state` into the parameters and buffers (across devices and dtypes, as an
  /// explicit copy). Everything is checked before anything changes: with `strict`, missing
  /// and unexpected names throw; a shape that differs always throws (ShapeError). On any
  /// error the module is left as it was.
  void load_state_dict(const StateDict& state, bool strict = true);
  /// What load_state_dict checks of one tensor: its shape and dtype.
  struct TensorLayout {
    Shape shape;
    Dtype dtype = kFloat32;
  };
  /// Checks names, shapes and dtypes (e.g. from a file's header, before any data is read)
  /// as load_state_dict(state, strict) checks them, and throws the same errors; reads and
  /// changes nothing.
  void check_state_dict(const std::map<std::string, TensorLayout>& layouts,
                        bool strict = true) const;

  /// Clears the grad of every parameter (sets it undefined).
  void zero_grad();

  /// The class name ("Linear") and the module's path from the root of its tree, e.g.
  /// "Sequential[0]" or "MLP.hidden". The root is named by its class unless renamed.
  const std::string& type_name() const { return type_name_; }
  std::string path() const;
  Module& set_name(std::string name);
  /// The tree, one module per line, like PyTorch's print(net).
  std::string str() const;
  /// Extra text after the class name ("in_features=2, out_features=8").
  virtual std::string extra_repr() const { return ""; }

 protected:
  explicit Module(std::string type_name);

  /// Registers a parameter (made a leaf that requires grad) and returns its handle, to keep
  /// in an nn::Parameter member (`weight = register_parameter("weight", w)`), whose
  /// assignment then updates the registered parameter.
  Parameter register_parameter(const std::string& name, Tensor value);
  /// Registers a buffer (never requires grad).
  Tensor register_buffer(const std::string& name, Tensor value);
  /// Registers a child; `index_style` children print as [name] in paths (Sequential).
  Module& register_module(const std::string& name, std::shared_ptr<Module> child,
                          bool index_style = false);
  /// Where to() last placed this module (for lazy layers), and its dtype.
  std::optional<Device> placed_device() const { return placed_device_; }
  std::optional<Dtype> placed_dtype() const { return placed_dtype_; }
  /// Throws DeviceMismatchError when a parameter or buffer of this module itself is on
  /// another device than `x`.
  void check_input_device(const Tensor& x) const;

 private:
  struct Child {
    std::string name;
    std::shared_ptr<Module> module;
    bool index_style = false;
  };
  void check_name(const std::string& name, const char* what) const;
  void collect(const std::string& prefix, bool recurse, bool params,
               std::vector<std::pair<std::string, Tensor>>& out) const;
  void str_into(std::string& out, const std::string& label, int indent) const;

  std::string type_name_;
  std::string name_;  // the root's label in paths; "" = type_name_
  Module* parent_ = nullptr;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<Child> children_;
  bool training_ = true;
  std::optional<Device> placed_device_;
  std::optional<Dtype> placed_dtype_;
};

/// Writes m.str(), the tree as PyTorch's print(net) shows it: std::cout << net.
TESSERA_API std::ostream& operator<<(std::ostream& os, const Module& m);

}  // namespace tessera::nn
