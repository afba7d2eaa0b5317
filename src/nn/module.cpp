// nn::Module: registration, traversal, moving in place, the device audit, state dicts.
#include "tessera/nn/module.h"

#include <algorithm>
#include <ostream>
#include <set>
#include <string_view>
#include <vector>

#include "core/check.h"
#include "core/code_names.h"
#include "core/device_registry.h"
#include "core/rethrow.h"
#include "core/tensor_impl.h"
#include "ops/broadcast.h"
#include "tessera/autograd.h"

namespace tessera::nn {
namespace {

// Note [Moving a module in place]
// PyTorch's module.to() swaps each parameter's data under the same Parameter object, so
// handles taken earlier (an optimizer's, `layer.weight`) follow the move. tessera does the
// same by pointing the parameter's TensorImpl at the converted copy's storage and metadata.
// Metadata is otherwise immutable (queued CPU kernels read it when they run), so the move
// first waits for every device involved: no queued kernel can still read the old metadata.
void rebind(const Tensor& dst, const Tensor& src) {
  detail::TensorImpl& d = detail::impl_of(dst);
  const detail::TensorImpl& s = detail::impl_of(src);
  d.storage = s.storage;
  d.shape = s.shape;
  d.strides = s.strides;
  d.offset = s.offset;
  d.dtype = s.dtype;
  d.contiguous = s.contiguous;
  ++d.rebinds;
}

// Converts every tensor of `tensors` with `convert` (skipping those `convert` leaves alone)
// and rebinds them, with their grads, once all devices involved are idle.
template <typename Convert>
void convert_in_place(const std::vector<Tensor>& tensors, Convert convert) {
  NoGradGuard no_grad;
  struct Move {
    Tensor target, value, grad_value;
  };
  std::vector<Move> moves;
  std::vector<Device> devices;
  auto note = [&](Device d) {
    if (std::find(devices.begin(), devices.end(), d) == devices.end()) devices.push_back(d);
  };
  std::vector<const Tensor*> seen;
  for (const Tensor& t : tensors) {
    // A tensor registered under several names (tied weights) is converted once: each name
    // made its own copy, so a move that fits in memory ran out of it (3 names, 3 copies).
    if (std::any_of(seen.begin(), seen.end(), [&](const Tensor* s) { return s->is_same(t); })) {
      continue;
    }
    seen.push_back(&t);
    Tensor value = convert(t);
    if (value.is_same(t)) continue;
    const Tensor grad = t.grad();
    moves.push_back({t, value, grad.defined() ? convert(grad) : Tensor()});
    note(t.device());
    note(value.device());
  }
  if (moves.empty()) return;
  for (Device d : devices) synchronize(d);
  for (const Move& m : moves) {
    rebind(m.target, m.value);
    if (m.grad_value.defined()) Tensor(m.target).set_grad(m.grad_value);
  }
}

// "prefix.name"; either alone when the other is empty (a module's own name is "").
std::string join_path(const std::string& prefix, const std::string& name) {
  if (prefix.empty()) return name;
  return name.empty() ? prefix : prefix + "." + name;
}

}  // namespace

Module::Module(std::string type_name) : type_name_(std::move(type_name)) {}

Module::~Module() {
  // A child that outlives this module must not follow a pointer to it (path(), and the
  // check that a module has one parent, did: a read of freed memory).
  for (Child& c : children_) {
    if (c.module->parent_ == this) c.module->parent_ = nullptr;
  }
}

Module::Module(Module&& other) noexcept
    : type_name_(std::move(other.type_name_)),
      name_(std::move(other.name_)),
      params_(std::move(other.params_)),
      buffers_(std::move(other.buffers_)),
      children_(std::move(other.children_)),
      training_(other.training_),
      placed_device_(other.placed_device_),
      placed_dtype_(other.placed_dtype_) {
  for (Child& c : children_) c.module->parent_ = this;
}

// Note [Errors name the layer]
// An op's error inside a model ("[conv2d] the kernel (5 along H) is larger than the padded
// input") did not say which of the model's layers failed; Linear's own checks did, the
// functions the other layers call could not. The innermost module inside a model that sees
// an error which does not name it yet adds where it is ("in Sequential[1], a Conv2d"), as
// the same error type; the modules around it then find their path in it and add nothing.
Tensor Module::operator()(const Tensor& x) {
  detail::check_defined(x, type_name_.c_str(), "input");
  check_input_device(x);
  if (parent_ == nullptr) return forward(x);
  try {
    return forward(x);
  } catch (const Error& e) {
    const std::string where = path();
    if (std::string_view(e.what()).find(where) != std::string_view::npos) throw;
    detail::rethrow_reworded(std::current_exception(), [&](const std::string& what) {
      return fmt::format("{} (in {}, a {})", what, where, type_name_);
    });
  }
}

void Module::check_input_device(const Tensor& x) const {
  auto check = [&](const std::pair<std::string, Tensor>& named) {
    const Device d = named.second.device();
    TESSERA_CHECK(d == x.device(), DeviceMismatchError,
                  "[{}] {}.{} is on {}, input is on {}; tessera never copies implicitly: move "
                  "the input with x.to({}) or the model with model.to({})",
                  type_name_, path(), named.first, d.str(), x.device().str(),
                  detail::device_code(d), detail::device_code(x.device()));
  };
  std::for_each(params_.begin(), params_.end(), check);
  std::for_each(buffers_.begin(), buffers_.end(), check);
}

// ---- registration ----

void Module::check_name(const std::string& name, const char* what) const {
  TESSERA_CHECK(!name.empty() && name.find('.') == std::string::npos, Error,
                "[{}] {} name '{}' must be non-empty and contain no '.'", type_name_, what, name);
  auto taken = [&](const auto& list) {
    return std::any_of(list.begin(), list.end(), [&](const auto& e) {
      if constexpr (std::is_same_v<std::decay_t<decltype(e)>, Child>) {
        return e.name == name;
      } else {
        return e.first == name;
      }
    });
  };
  TESSERA_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_), Error,
                "[{}] a parameter, buffer or child named '{}' exists already", type_name_, name);
}

Parameter Module::register_parameter(const std::string& name, Tensor value) {
  check_name(name, "parameter");
  detail::check_defined(value, "register_parameter", name.c_str());
  TESSERA_CHECK(is_floating(value.dtype()), DtypeError,
                "[{}] parameter '{}' must be floating to take gradients, got {}", type_name_, name,
                dtype_name(value.dtype()));
  if (!value.is_leaf()) value = value.detach();
  value.requires_grad_(true);
  params_.emplace_back(name, value);
  return Parameter(value);
}

// ---- assigning to a parameter (Note [Moving a module in place]) ----

Parameter& Parameter::operator=(const Parameter& other) {
  if (other.registration_ && !defined()) {
    Tensor::operator=(other);  // a layer binding its member to the parameter it registered
    return *this;
  }
  return *this = static_cast<const Tensor&>(other);
}

Parameter& Parameter::operator=(const Tensor& value) {
  constexpr const char* kOp = "Parameter::operator=";
  TESSERA_CHECK(defined(), Error,
                "[{}] this parameter is not registered (a layer built without bias, or a lazy "
                "layer before its first call), so there is nothing to update; build the layer "
                "with it (e.g. with_bias = true), or call a lazy layer once first",
                kOp);
  detail::check_defined(value, kOp, "value");
  if (value.is_same(*this)) return *this;
  TESSERA_CHECK(value.shape() == shape(), ShapeError,
                "[{}] a parameter of shape {} cannot take a value of shape {}; give it a "
                "tensor of its own shape (or build a new layer for another shape)",
                kOp, shape().str(), value.shape().str());
  TESSERA_CHECK(is_floating(value.dtype()), DtypeError,
                "[{}] a parameter must be floating to take gradients, got {}; convert the "
                "value with .to(kFloat32)",
                kOp, dtype_name(value.dtype()));
  // Taken, an expanded value trained until the optimizer's step and loaded nowhere (both
  // refused it later, as "not contiguous" or "an expanded view").
  TESSERA_CHECK(detail::writable(value), Error,
                "[{}] the value (shape {}, strides {}) is an expanded view whose elements "
                "share memory, so an optimizer could not update them one by one; give the "
                "parameter a tensor of its own (the value's .clone())",
                kOp, value.shape().str(), value.strides().str());
  // Rebinding the metadata in place is safe only once no queued kernel reads it.
  synchronize(device());
  if (value.device() != device()) synchronize(value.device());
  rebind(*this, value);
  set_grad({});
  return *this;
}

Tensor Module::register_buffer(const std::string& name, Tensor value) {
  check_name(name, "buffer");
  detail::check_defined(value, "register_buffer", name.c_str());
  value = value.detach();
  buffers_.emplace_back(name, value);
  return value;
}

Module& Module::register_module(const std::string& name, std::shared_ptr<Module> child,
                                bool index_style) {
  check_name(name, "child module");
  TESSERA_CHECK(child != nullptr, Error, "[{}] child module '{}' is null", type_name_, name);
  // A model's root has no parent, so the check below let it be added inside itself (or
  // inside one of its children), and every later walk of the model recursed until it crashed.
  for (const Module* m = this; m != nullptr; m = m->parent_) {
    TESSERA_CHECK(m != child.get(), Error,
                  "[{}] child module '{}' ({}) is {} or holds it: a module inside itself "
                  "would make the model endless. Add another module",
                  type_name_, name, child->type_name_,
                  m == this ? "this module itself" : "a module that holds this one");
  }
  TESSERA_CHECK(child->parent_ == nullptr, Error,
                "[{}] child module '{}' ({}) has its place in a model already, at {}: a module "
                "has one place (its path names its parameters), so it cannot be added twice. "
                "To apply one layer twice, call it twice in a forward(); else build another",
                type_name_, name, child->type_name_, child->path());
  child->parent_ = this;
  children_.push_back({name, std::move(child), index_style});
  return *children_.back().module;
}

// ---- traversal ----

bool Module::all_built() const {
  if (!built()) return false;
  return std::all_of(children_.begin(), children_.end(),
                     [](const Child& c) { return c.module->all_built(); });
}

void Module::collect(const std::string& prefix, bool recurse, bool params,
                     std::vector<std::pair<std::string, Tensor>>& out) const {
  for (const auto& [name, t] : params ? params_ : buffers_)
    out.emplace_back(join_path(prefix, name), t);
  if (!recurse) return;
  for (const Child& c : children_) c.module->collect(join_path(prefix, c.name), true, params, out);
}

namespace {

// Keeps the first name of each tensor registered under several (tied weights).
void remove_duplicates(std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::pair<std::string, Tensor>> kept;
  kept.reserve(named.size());
  for (auto& entry : named) {
    const bool seen = std::any_of(kept.begin(), kept.end(),
                                  [&](const auto& k) { return k.second.is_same(entry.second); });
    if (!seen) kept.push_back(std::move(entry));
  }
  named = std::move(kept);
}

}  // namespace

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse,
                                                                     bool remove_duplicate) const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", recurse, true, out);
  if (remove_duplicate) remove_duplicates(out);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse,
                                                                  bool remove_duplicate) const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", recurse, false, out);
  if (remove_duplicate) remove_duplicates(out);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_children() const {
  std::vector<std::pair<std::string, Module*>> out;
  for (const Child& c : children_) out.emplace_back(c.name, c.module.get());
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{"", this}};
  for (const Child& c : children_) {
    for (auto& [name, m] : c.module->named_modules()) {
      out.emplace_back(join_path(c.name, name), m);
    }
  }
  return out;
}

Tensor Module::tensor(const std::string& path) const {
  const auto dot = path.find('.');
  if (dot != std::string::npos) {
    const std::string head = path.substr(0, dot);
    for (const Child& c : children_) {
      if (c.name == head) return c.module->tensor(path.substr(dot + 1));
    }
  } else {
    for (const auto& list : {&params_, &buffers_}) {
      for (const auto& [name, t] : *list) {
        if (name == path) return t;
      }
    }
  }
  std::string names;
  for (const auto& [name, t] : state_dict()) names += (names.empty() ? "" : ", ") + name;
  throw Error(fmt::format("[Module::tensor] {} ({}) has no parameter or buffer '{}'; it has: {}",
                          this->path(), type_name_, path, names.empty() ? "none" : names));
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
  for (Child& c : children_) c.module->apply(fn);
  fn(*this);
  return *this;
}

Module& Module::train(bool on) {
  for (auto& [name, m] : named_modules()) m->training_ = on;
  return *this;
}

// ---- devices and dtypes ----

Module& Module::to(Device device) {
  detail::check_device(device, "Module::to");
  std::vector<Tensor> tensors;
  const auto modules = named_modules();
  for (auto& [name, m] : modules) {
    for (const auto& list : {&m->params_, &m->buffers_}) {
      for (const auto& [n, t] : *list) tensors.push_back(t);
    }
  }
  convert_in_place(tensors, [device](const Tensor& t) { return t.to(device); });
  // Only once every tensor moved: a refused move (out of memory) leaves the whole model
  // where it was, lazy layers included.
  for (auto& [name, m] : modules) m->placed_device_ = device;
  return *this;
}

Module& Module::to(Dtype dtype) {
  TESSERA_CHECK(is_floating(dtype), DtypeError,
                "[Module::to] modules convert to floating dtypes only (float32, float64, bfloat16, "
                "float16), got {}",
                dtype_name(dtype));
  std::vector<Tensor> tensors;
  const auto modules = named_modules();
  for (auto& [name, m] : modules) {
    for (const auto& list : {&m->params_, &m->buffers_}) {
      for (const auto& [n, t] : *list) {
        if (is_floating(t.dtype())) tensors.push_back(t);
      }
    }
  }
  convert_in_place(tensors, [dtype](const Tensor& t) { return t.to(dtype); });
  for (auto& [name, m] : modules) m->placed_dtype_ = dtype;  // as in to(Device)
  return *this;
}

Device Module::device() const {
  std::vector<std::pair<std::string, Device>> found;
  std::vector<Device> distinct;
  auto visit = [&](const Module& m, auto& self) -> void {
    for (const auto& list : {&m.params_, &m.buffers_}) {
      for (const auto& [name, t] : *list) {
        found.emplace_back(m.path() + "." + name, t.device());
        if (std::find(distinct.begin(), distinct.end(), t.device()) == distinct.end()) {
          distinct.push_back(t.device());
        }
      }
    }
    for (const Child& c : m.children_) self(*c.module, self);
  };
  visit(*this, visit);
  if (distinct.empty()) {
    TESSERA_CHECK(placed_device_.has_value(), Error,
                  "[Module::device] {} holds no parameters or buffers{}", path(),
                  all_built() ? ", so it has no device of its own; place it with to(device) to "
                                "give it one"
                              : " yet (a lazy layer builds them at its first call); call it "
                                "once or place it with to(device)");
    return *placed_device_;
  }
  if (distinct.size() == 1) return distinct.front();
  std::string list;
  for (const auto& [name, d] : found) list += fmt::format("\n  {} on {}", name, d.str());
  throw DeviceMismatchError(fmt::format(
      "[Module::device] {} has tensors on {} devices; move it with to(device) to put them on "
      "one:{}",
      path(), distinct.size(), list));
}

// ---- state ----

StateDict Module::state_dict() const {
  StateDict out;
  for (auto& [name, t] : named_parameters(true, false)) out.emplace(name, t.detach());
  for (auto& [name, t] : named_buffers(true, false)) out.emplace(name, t.detach());
  return out;
}

void Module::check_state_dict(const std::map<std::string, TensorLayout>& layouts,
                              bool strict) const {
  std::vector<std::pair<std::string, Tensor>> own = named_parameters(true, false);
  for (auto& entry : named_buffers(true, false)) own.push_back(std::move(entry));
  std::vector<std::string> missing, unexpected;
  std::set<std::string> own_names;
  for (const auto& [name, t] : own) {
    own_names.insert(name);
    auto it = layouts.find(name);
    if (it == layouts.end()) {
      missing.push_back(name);
      continue;
    }
    TESSERA_CHECK(it->second.shape == t.shape(), ShapeError,
                  "[load_state_dict] {} has shape {} in the module but {} in the state dict; the "
                  "state dict belongs to a differently configured model",
                  name, t.shape().str(), it->second.shape.str());
    TESSERA_CHECK(is_floating(it->second.dtype) == is_floating(t.dtype()), DtypeError,
                  "[load_state_dict] {} is {} in the module but {} in the state dict; a "
                  "floating tensor loads from a floating one of any width, an integer one from "
                  "integers: the state dict belongs to another model, or was saved with another "
                  "dtype",
                  name, dtype_name(t.dtype()), dtype_name(it->second.dtype));
    // Refused before anything is written: the load leaves the module as it was (a broadcast
    // buffer used to fail only after the tensors before it had been overwritten).
    TESSERA_CHECK(detail::writable(t), Error,
                  "[load_state_dict] {} (shape {}, strides {}) is an expanded view whose "
                  "elements share memory, so it cannot be loaded in place; register a tensor "
                  "of its own for it (the view's .clone())",
                  name, t.shape().str(), t.strides().str());
  }
  for (const auto& [name, layout] : layouts) {
    if (!own_names.contains(name)) unexpected.push_back(name);
  }
  if (strict && (!missing.empty() || !unexpected.empty())) {
    auto join = [](const std::vector<std::string>& v) {
      std::string s;
      for (const auto& n : v) s += (s.empty() ? "" : ", ") + n;
      return s.empty() ? std::string("none") : s;
    };
    // An unexpected name may belong to a layer that has no parameters yet (a lazy layer
    // before its first call): loading with strict=false would skip it, so say what helps.
    std::string unbuilt;
    for (const auto& [name, m] : const_cast<Module*>(this)->named_modules()) {
      if (m->type_name().rfind("Lazy", 0) != 0 || !m->named_parameters().empty()) continue;
      const std::string prefix = name.empty() ? "" : name + ".";
      for (const std::string& u : unexpected) {
        if (u.rfind(prefix, 0) == 0 && u.find('.', prefix.size()) == std::string::npos) {
          unbuilt = fmt::format(
              " ({} has no parameters yet: a lazy layer builds them on its first call, so run "
              "the model once on an input before loading)",
              m->path());
          break;
        }
      }
      if (!unbuilt.empty()) break;
    }
    throw Error(fmt::format(
        "[load_state_dict] the state dict does not match {}: missing {}; unexpected {}{}. "
        "Pass strict=false to load only the names that match",
        path(), join(missing), join(unexpected), unbuilt));
  }
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  std::map<std::string, TensorLayout> layouts;
  for (const auto& [name, t] : state) {
    detail::check_defined(t, "load_state_dict", name.c_str());
    layouts.emplace(name, TensorLayout{t.shape(), t.dtype()});
  }
  check_state_dict(layouts, strict);
  std::vector<std::pair<std::string, Tensor>> own = named_parameters(true, false);
  for (auto& entry : named_buffers(true, false)) own.push_back(std::move(entry));
  NoGradGuard no_grad;
  for (const auto& [name, t] : own) {
    auto it = state.find(name);
    if (it != state.end()) Tensor(t).copy_(it->second);
  }
}

void Module::zero_grad() {
  // Every name: a tied tensor cleared twice costs less than finding it once (a step's path).
  for (auto& [name, p] : named_parameters(true, false)) p.set_grad(Tensor());
}

// ---- names and printing ----

std::string Module::path() const {
  if (parent_ == nullptr) return name_.empty() ? type_name_ : name_;
  for (const Child& c : parent_->children_) {
    if (c.module.get() == this) {
      return parent_->path() + (c.index_style ? "[" + c.name + "]" : "." + c.name);
    }
  }
  return type_name_;  // unreachable: a parent always lists its children
}

Module& Module::set_name(std::string name) {
  name_ = std::move(name);
  return *this;
}

void Module::str_into(std::string& out, const std::string& label, int indent) const {
  const std::string pad(static_cast<std::size_t>(indent) * 2, ' ');
  out += pad + (label.empty() ? "" : "(" + label + "): ") + type_name_ + "(" + extra_repr();
  if (children_.empty()) {
    out += ")\n";
    return;
  }
  out += "\n";
  for (const Child& c : children_) c.module->str_into(out, c.name, indent + 1);
  out += pad + ")\n";
}

std::ostream& operator<<(std::ostream& os, const Module& m) { return os << m.str(); }

std::string Module::str() const {
  std::string out;
  str_into(out, "", 0);
  return out;
}

}  // namespace tessera::nn
