// The graph recorder and the backward pass. See Note [Backward pass].
#include <fmt/format.h>

#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "autograd/autograd_meta.h"
#include "autograd/record.h"
#include "core/capture_undo.h"
#include "core/check.h"
#include "core/code_names.h"
#include "core/device_rules.h"
#include "core/tensor_impl.h"
#include "tessera/autograd.h"
#include "tessera/factories.h"
#include "tessera/graph.h"
#include "tessera/operators.h"

// Note [Backward pass]
// The graph is recorded as each op runs: a Node per op holding its backward formula (with
// the tensors it saved) and one Edge per input. backward() finds the nodes reachable from
// the output, counts how many edges feed each, and processes a node once all its
// gradients have arrived (a topological order), summing gradients that meet. Leaves get
// their gradient added to grad(). Formulas run under NoGradGuard and only queue device
// work: backward never waits for a device. Unless retain_graph, each node drops its
// formula (and its saved tensors) once used, so memory is returned as the pass goes.

// Note [Saved tensors]
// A formula reads tensors the forward pass saved (a layer's input for its weight gradient,
// an activation's output). If one of them is written in place before backward() (a reused
// input buffer refilled, a parameter stepped), the formula would silently compute a wrong
// gradient. As in PyTorch, each storage carries a version that every in-place front end
// bumps (mark_written); record() notes the versions of the tensors a formula declares, and
// backward() compares them before the pass and again right before running it (a grad-ready
// hook may write in the middle of the pass), refusing with the op and the tensor's role.
// Views share their storage, so writing through any view is seen. Module::to and parameter
// assignment point a tensor at other memory instead of writing it: a formula holding that
// tensor would read the new values, and a leaf would get a gradient computed for the old
// one (on its old device), so record() also notes each saved tensor and each leaf input,
// and backward() refuses a pass in which one of them now has other memory.

namespace tessera {
namespace {
thread_local bool t_grad_enabled = true;
}

NoGradGuard::NoGradGuard() : previous_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = previous_; }
bool grad_enabled() { return t_grad_enabled; }

}  // namespace tessera

namespace tessera::detail {

// Note [Freeing long graphs]
// A node owns the nodes before it (its edges) and, through the tensors its formula captured,
// their autograd state and so their nodes too: freeing the last node of a chain of 300,000
// ops freed the one before it from inside its destructor, and so on, until the stack ran
// out (SIGSEGV when the loss went out of scope). The outermost ~Node on a thread instead
// collects what it owns in lists and frees them one at a time in a loop; a ~Node run while
// that loop frees something adds what it owns to the lists and returns. The depth stays a
// few frames, however long the graph (as PyTorch's deleteNode).
namespace {

struct NodeTeardown {
  std::vector<std::shared_ptr<Node>> nodes;
  std::vector<Node::Backward> formulas;
};
thread_local NodeTeardown* t_teardown = nullptr;

}  // namespace

Node::~Node() {
  NodeTeardown* const running = t_teardown;
  NodeTeardown local;
  NodeTeardown& into = running != nullptr ? *running : local;
  for (Edge& e : next) {
    if (e.node) into.nodes.push_back(std::move(e.node));
  }
  if (backward) into.formulas.push_back(std::move(backward));
  if (running != nullptr) return;
  t_teardown = &local;
  while (!local.nodes.empty() || !local.formulas.empty()) {
    if (!local.formulas.empty()) {
      Node::Backward formula = std::move(local.formulas.back());
      local.formulas.pop_back();  // the captured tensors go as `formula` does, below
    } else {
      std::shared_ptr<Node> node = std::move(local.nodes.back());
      local.nodes.pop_back();
    }
  }
  t_teardown = nullptr;
}

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor* t : inputs) {
    if (t->defined() && t->impl()->autograd && t->impl()->autograd->requires_grad) return true;
  }
  return false;
}

void record(const char* name, const Tensor& out, std::span<const Tensor* const> inputs,
            BackwardFn backward, std::initializer_list<Saved> saved) {
  auto node = std::make_shared<Node>();
  node->name = name;
  node->backward = std::move(backward);
  for (const Saved& s : saved) {
    if (s.tensor == nullptr || !s.tensor->defined()) continue;
    const TensorImpl& t = impl_of(*s.tensor);
    node->saved.push_back(
        {s.role, t.storage, t.storage->version, t.shape, t.dtype, s.tensor->impl_ptr(), t.rebinds});
  }
  node->output_shape = out.shape();
  node->output_dtype = out.dtype();
  for (const Tensor* t : inputs) {
    Edge edge;
    const auto& meta = t->defined() ? t->impl()->autograd : nullptr;
    if (meta && meta->requires_grad) {
      if (meta->grad_fn) {
        edge.node = meta->grad_fn;
      } else {
        edge.leaf = t->impl_ptr();
        edge.leaf_storage = edge.leaf->storage;
        edge.leaf_rebinds = edge.leaf->rebinds;
      }
    }
    node->next.push_back(std::move(edge));
  }
  auto meta = std::make_shared<AutogradMeta>();
  meta->requires_grad = true;
  meta->grad_fn = std::move(node);
  out.impl()->autograd = std::move(meta);
}

void check_inplace(const char* op, std::initializer_list<const Tensor*> operands) {
  if (!t_grad_enabled) return;
  bool first = true;  // the tensor written (self); the rest are read
  for (const Tensor* t : operands) {
    const bool needs = t->defined() && t->requires_grad();
    if (first) {
      TESSERA_CHECK(!needs, Error,
                    "[{}] cannot write in place into a tensor that requires grad ({}): in-place "
                    "writes are not recorded for backward(), and the graph may need its old "
                    "values{}. Use the out-of-place form "
                    "(a new tensor), or write under NoGradGuard when the write is not part of "
                    "the model (as optimizers update parameters)",
                    op, t->impl()->autograd->grad_fn ? "the result of a recorded op" : "a leaf",
                    t->impl()->autograd->grad_fn ? "" : ", and its gradient would miss the write");
    } else {
      TESSERA_CHECK(!needs, Error,
                    "[{}] cannot write in place with an operand that requires grad (other): "
                    "in-place writes are not recorded for backward(), so its gradient would miss "
                    "this use. Use the out-of-place form "
                    "(a new tensor)",
                    op);
    }
    first = false;
  }
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const int lead = grad.dim() - shape.size();
  std::vector<int> dims;
  for (int d = 0; d < grad.dim(); ++d) {
    if (d < lead || (shape[d - lead] == 1 && grad.size(d) != 1)) dims.push_back(d);
  }
  return sum(grad, dims, /*keepdim=*/true).reshape(shape);
}

namespace {

// The advice for a tensor that now has other memory than when the graph was recorded.
constexpr const char* kMovedFix =
    "Run backward() before moving or replacing it (Module::to, a parameter assigned), or run "
    "the forward pass again after";

// Note [Saved tensors]: throws when a tensor `n` saved was written in place since.
void check_saved_versions(const Node& n) {
  for (const SavedVersion& s : n.saved) {
    const std::shared_ptr<TensorImpl> now = s.tensor.lock();
    TESSERA_CHECK(now == nullptr || (now->storage == s.storage && now->rebinds == s.rebinds), Error,
                  "[backward] {} saved its {} ({} {} on {}) for the backward pass, but that "
                  "tensor was moved, converted or replaced afterwards (now {} {} on {}), so its "
                  "gradient would be computed from other values. {}",
                  n.name, s.role, dtype_name(s.dtype), s.shape.str(), s.storage->device.str(),
                  dtype_name(now->dtype), now->shape.str(), now->storage->device.str(), kMovedFix);
    TESSERA_CHECK(s.storage->version == s.version, Error,
                  "[backward] {} saved its {} ({} {} on {}) for the backward pass, but it was "
                  "written in place afterwards (version {}, now {}), so its gradient would be "
                  "wrong. Write into a copy instead (.clone()), or run backward() before "
                  "changing it",
                  n.name, s.role, dtype_name(s.dtype), s.shape.str(), s.storage->device.str(),
                  s.version, s.storage->version);
  }
}

// A leaf input of `n` that now has other memory (moved, or replaced) would get a gradient
// of the tensor it was, on that tensor's device.
void check_leaves_in_place(const Node& n) {
  for (std::size_t i = 0; i < n.next.size(); ++i) {
    const Edge& e = n.next[i];
    if (!e.leaf || (e.leaf->storage == e.leaf_storage && e.leaf->rebinds == e.leaf_rebinds)) {
      continue;
    }
    const Device was = e.leaf_storage->device, now = e.leaf->storage->device;
    const std::string message = fmt::format(
        "[backward] {}'s input {} is a tensor that requires grad ({} on {} when {} ran), but "
        "it was moved, converted or replaced afterwards (now {} {} on {}), so the gradient "
        "backward() "
        "computed belongs to the tensor it was. {}",
        n.name, i, e.leaf->shape.str(), was.str(), n.name, dtype_name(e.leaf->dtype),
        e.leaf->shape.str(), now.str(), kMovedFix);
    if (was != now) throw DeviceMismatchError(message);
    throw Error(message);
  }
}

void check_not_freed(const Node& n) {
  TESSERA_CHECK(static_cast<bool>(n.backward), Error,
                "[backward] the graph through '{}' was already used by a backward() and freed; "
                "pass retain_graph = true to the first backward() to run it twice",
                n.name);
}

void accumulate(const std::shared_ptr<TensorImpl>& leaf_ptr, Tensor&& g) {
  TensorImpl& leaf = *leaf_ptr;
  AutogradMeta& meta = *leaf.autograd;
  // In the leaf's dtype, as PyTorch's engine casts every gradient to its input's: a formula
  // run under autocast (backward() inside an AutocastGuard) sums a bfloat16 bias's gradient
  // into float32.
  if (g.dtype() != leaf.dtype) g = g.to(leaf.dtype);
  // Two threads' passes may reach one leaf (a model shared by threads): each sum reads the
  // grad() the other wrote, or an update is lost. The sum is queued inside the lock, so on
  // a device both threads feed it also runs after the one it read.
  static std::mutex accumulating;
  const std::lock_guard lock(accumulating);
  if (meta.grad.defined()) {
    // Recorded in a graph, the sum goes into the grad itself: a new tensor would be the
    // recording's, and every replay would write old grad + g there, never accumulating
    // (Graph::capture in graph.h).
    if (detail::is_capturing(leaf.device())) {
      // An expanded grad (set_grad of an expand) has no memory of its own to add into.
      for (int d = 0; d < meta.grad.dim(); ++d) {
        TESSERA_CHECK(meta.grad.strides()[d] != 0 || meta.grad.size(d) <= 1, GraphCaptureError,
                      "[backward] {} is capturing a graph and the gradient it adds to is an "
                      "expanded tensor (shape {}), which cannot be summed into in place; give "
                      "the parameter a gradient of its own (set_grad(g.contiguous())) or none "
                      "(zero_grad()) before capturing",
                      leaf.device().str(), meta.grad.shape().str());
      }
      meta.grad.add_(g);
    } else {
      meta.grad = meta.grad + g;
    }
    return;
  }
  // The first gradient is copied when anything else can see it: formulas may hand the same
  // tensor to several inputs (or a view of it), and users (or gradient clipping) scale
  // grad() in place. A fresh, contiguous gradient nobody else holds is kept as it is. CPU
  // kernels queued or recorded (by a graph) borrow their tensors, so the kernel that writes
  // it does not count (Note [Memory freed in queue order], Note [Memory of CPU graphs]).
  const bool sole_owner = g.impl_ptr().use_count() == 1 &&
                          detail::impl_of(g).storage.use_count() == 1 && g.is_contiguous() &&
                          !detail::impl_of(g).autograd;
  meta.grad = sole_owner ? std::move(g) : g.clone();
  // Recorded, that grad is memory no kernel has written: a capture that throws takes it back
  // (Note [A refused capture's host state]).
  if (detail::is_capturing(leaf.device())) {
    detail::note_undo([leaf_ptr] { leaf_ptr->autograd->grad = Tensor(); });
  }
}

// Calls a copy of the leaf's hook: a hook may remove or replace itself
// (set_grad_ready_hook), which destroyed the function, and the state it captured, while it
// still ran.
void call_grad_ready_hook(const AutogradMeta& meta, const Tensor& leaf) {
  const std::function<void(const Tensor&)> hook = meta.grad_ready;
  hook(leaf);
}

}  // namespace

// Note [Grad-ready hooks]
// Data-parallel training overlaps the all-reduce of early gradients with the backward pass
// of the rest of the model (as PyTorch's DDP does with its autograd hooks). That needs to
// know when a parameter's gradient is final for this pass: when the last edge into it has
// been followed, whether or not that edge carried a gradient. The pass counts those edges
// while it checks saved versions; a leaf never reached gets no call (its user, e.g. the
// GradientReducer, finishes such leaves after backward returns).

void run_backward(const Tensor& root, const Tensor& gradient_in, bool retain_graph) {
  check_defined(root, "backward");
  TESSERA_CHECK(root.requires_grad(), Error,
                "[backward] this tensor does not require grad: no op that produced it had an "
                "input with requires_grad_() set (or it was computed under NoGradGuard)");
  Tensor gradient = gradient_in;
  if (!gradient.defined()) {
    TESSERA_CHECK(root.numel() == 1, ShapeError,
                  "[backward] without a gradient argument the tensor must have one element, "
                  "got shape {}; pass backward(gradient) or reduce it first (e.g. sum())",
                  root.shape().str());
    gradient = ones_like(root);
  }
  TESSERA_CHECK(gradient.shape() == root.shape(), ShapeError,
                "[backward] gradient has shape {} but the tensor has shape {}",
                gradient.shape().str(), root.shape().str());
  TESSERA_CHECK(gradient.device() == root.device(), DeviceMismatchError,
                "[backward] gradient is on {} but the tensor is on {}; move it with .to({})",
                gradient.device().str(), root.device().str(), detail::device_code(root.device()));
  NoGradGuard no_grad;
  // In the tensor's dtype, as PyTorch casts it: every gradient below then has its tensor's
  // dtype (a float64 leaf never gets an int64 grad()).
  if (gradient.dtype() != root.dtype()) gradient = gradient.to(root.dtype());
  const AutogradMeta& root_meta = *root.impl()->autograd;
  if (!root_meta.grad_fn) {
    accumulate(root.impl_ptr(), Tensor(gradient));
    if (root_meta.grad_ready) call_grad_ready_hook(root_meta, root);
    return;
  }
  // Count the edges into each node reachable from the root, and check what each saved (and
  // that an earlier backward() did not free it) before any formula runs, so a refused pass
  // changes no grad().
  // Edges into leaves with a grad-ready hook are counted too: the hook fires when the last
  // one has been followed (Note [Grad-ready hooks]).
  std::unordered_map<Node*, int> pending;
  std::unordered_map<TensorImpl*, int> leaf_pending;
  std::vector<Node*> stack{root_meta.grad_fn.get()};
  std::unordered_set<Node*> seen{root_meta.grad_fn.get()};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    check_not_freed(*n);
    check_leaves_in_place(*n);
    check_saved_versions(*n);
    for (const Edge& e : n->next) {
      if (e.leaf && e.leaf->autograd->grad_ready) ++leaf_pending[e.leaf.get()];
      if (!e.node) continue;
      ++pending[e.node.get()];
      if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }
  std::unordered_map<Node*, Tensor> grads{{root_meta.grad_fn.get(), gradient}};
  std::vector<Node*> ready{root_meta.grad_fn.get()};
  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    Tensor g = std::move(grads[n]);
    grads.erase(n);
    std::vector<Tensor> inputs(n->next.size());
    if (g.defined()) {           // else no gradient reached this node: its inputs get none from it
      check_saved_versions(*n);  // again: a grad-ready hook may have written since the start
      // A gradient wider than the node's output (a float64 target promoted the loss, a
      // bfloat16 layer under autocast joined a float32 residual) is the output's dtype for
      // its formula, as in PyTorch: conv2d's and the pools' kernels read a float64 gradient
      // as float32 values (wrong gradients, silently), and matmul's refused to mix dtypes.
      if (g.dtype() != n->output_dtype) g = g.to(n->output_dtype);
      inputs = n->backward(g);
      TESSERA_INTERNAL_ASSERT(inputs.size() == n->next.size(),
                              "{} returned {} gradients for {} inputs", n->name, inputs.size(),
                              n->next.size());
      if (!retain_graph) {
        n->backward = nullptr;
        n->saved.clear();
      }
    }
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const Edge& e = n->next[i];
      if (inputs[i].defined()) {
        if (e.leaf) {
          accumulate(e.leaf, std::move(inputs[i]));
        } else if (e.node) {
          Tensor& slot = grads[e.node.get()];
          slot = slot.defined() ? slot + inputs[i] : inputs[i];
        }
      }
      if (e.leaf && e.leaf->autograd->grad_ready && --leaf_pending[e.leaf.get()] == 0) {
        call_grad_ready_hook(*e.leaf->autograd, Tensor(e.leaf));
      }
      if (e.node && --pending[e.node.get()] == 0) ready.push_back(e.node.get());
    }
  }
}

}  // namespace tessera::detail

namespace tessera {
using detail::AutogradMeta;

Tensor& Tensor::requires_grad_(bool enabled) {
  detail::check_defined(*this, "requires_grad_");
  TESSERA_CHECK(!enabled || is_floating(dtype()), DtypeError,
                "[requires_grad_] only floating tensors have gradients; this one is {}. Convert "
                "it with .to(kFloat32) first",
                dtype_name(dtype()));
  auto& meta = impl_->autograd;
  TESSERA_CHECK(!(meta && meta->grad_fn), Error,
                "[requires_grad_] this tensor was produced by a recorded op ({}); only leaves can "
                "be marked. Use detach().requires_grad_() for a new leaf",
                meta && meta->grad_fn ? meta->grad_fn->name : "");
  if (!meta) meta = std::make_shared<AutogradMeta>();
  meta->requires_grad = enabled;
  return *this;
}

bool Tensor::requires_grad() const {
  return defined() && impl_->autograd && impl_->autograd->requires_grad;
}

Tensor Tensor::grad() const {
  detail::check_defined(*this, "grad");
  return impl_->autograd ? impl_->autograd->grad : Tensor();
}

void Tensor::set_grad(const Tensor& grad) {
  detail::check_defined(*this, "set_grad");
  if (grad.defined()) {
    TESSERA_CHECK(grad.device() == device(), DeviceMismatchError,
                  "[set_grad] the gradient is on {} but the tensor is on {}; move it with .to({})",
                  grad.device().str(), device().str(), detail::device_code(device()));
    TESSERA_CHECK(grad.shape() == shape(), ShapeError,
                  "[set_grad] the gradient has shape {} but the tensor has shape {}; pass a "
                  "gradient of the tensor's shape",
                  grad.shape().str(), shape().str());
    TESSERA_CHECK(grad.dtype() == dtype(), DtypeError,
                  "[set_grad] the gradient must have the tensor's dtype: got {}, expected {}; "
                  "convert it with .to({})",
                  dtype_name(grad.dtype()), dtype_name(dtype()), detail::dtype_code(dtype()));
    // Its own storage as its gradient: clipping or zeroing the gradient would change it.
    TESSERA_CHECK(!grad.shares_storage(*this), Error,
                  "[set_grad] the gradient shares the tensor's own memory, so changing the "
                  "gradient would change the tensor; pass a copy (.clone())");
  }
  if (!impl_->autograd) impl_->autograd = std::make_shared<AutogradMeta>();
  impl_->autograd->grad = grad;
}

void set_grad_ready_hook(const Tensor& leaf, std::function<void(const Tensor&)> hook) {
  detail::check_defined(leaf, "set_grad_ready_hook");
  TESSERA_CHECK(leaf.requires_grad() && leaf.is_leaf(), Error,
                "[set_grad_ready_hook] the tensor must be a leaf that requires grad (a "
                "parameter); this one {}",
                leaf.requires_grad() ? "was produced by a recorded op"
                                     : "does not require grad: call requires_grad_() first");
  leaf.impl()->autograd->grad_ready = std::move(hook);
}

bool Tensor::is_leaf() const {
  detail::check_defined(*this, "is_leaf");
  return !(impl_->autograd && impl_->autograd->grad_fn);
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  detail::run_backward(*this, gradient, retain_graph);
}

Tensor Tensor::detach() const {
  detail::check_defined(*this, "detach");
  return detail::make_view(*this, shape(), strides(), storage_offset());
}

}  // namespace tessera
