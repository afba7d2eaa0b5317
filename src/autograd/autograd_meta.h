#pragma once
// The autograd state of one tensor and the nodes of the recorded graph.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor_impl.h"
#include "tessera/tensor.h"

namespace tessera::detail {

struct Node;

// Where a node sends the gradient of one of its inputs: into another node, or into a leaf's
// grad, or nowhere (the input does not require grad). `leaf_storage`: the leaf's storage
// when the op ran, so a leaf moved or replaced since (Module::to, a parameter assigned)
// is refused instead of getting a gradient of the old tensor (Note [Saved tensors]).
struct Edge {
  std::shared_ptr<Node> node;
  std::shared_ptr<TensorImpl> leaf;
  std::shared_ptr<Storage> leaf_storage;
  std::uint32_t leaf_rebinds = 0;  // TensorImpl::rebinds then
};

// A tensor a formula reads at backward time, and its storage's version when it was saved.
// `tensor`: the saved tensor itself, which the formula may hold, so that a move of it to
// other memory since (Module::to) is seen too.
struct SavedVersion {
  const char* role;  // "input", "weight", "output", ...
  std::shared_ptr<Storage> storage;
  std::uint64_t version = 0;
  Shape shape;
  Dtype dtype = kFloat32;
  std::weak_ptr<TensorImpl> tensor;
  std::uint32_t rebinds = 0;  // the tensor's TensorImpl::rebinds then
};

// One recorded op: given the gradient of its output, the gradients of its inputs (an
// undefined Tensor where an input needs none), one per edge.
struct Node {
  using Backward = std::function<std::vector<Tensor>(const Tensor& grad_output)>;
  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  // Releases the graph behind it without recursing once per node (Note [Freeing long
  // graphs] in engine.cpp).
  ~Node();

  const char* name = "";
  Backward backward;
  std::vector<Edge> next;
  std::vector<SavedVersion> saved;  // checked before `backward` runs, dropped with it
  Shape output_shape;
  Dtype output_dtype = kFloat32;
};

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;  // null for leaves
  // Leaves only: called when a backward pass has summed the leaf's last contribution.
  std::function<void(const Tensor& leaf)> grad_ready;
};

}  // namespace tessera::detail
