#pragma once
// The autograd state of one tensor and the nodes of the recorded graph.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor_impl.h"
#include "tessera/tensor.h"

namespace tessera::detail {

struct Node;

// Where a node sends the gradient of one of its inputs: into another node, or into a leaf's
// grad, or nowhere (the input does not require grad).
struct Edge {
  std::shared_ptr<Node> node;
  std::shared_ptr<TensorImpl> leaf;
};

// One recorded op: given the gradient of its output, the gradients of its inputs (an
// undefined Tensor where an input needs none), one per edge.
struct Node {
  const char* name = "";
  std::function<std::vector<Tensor>(const Tensor& grad_output)> backward;
  std::vector<Edge> next;
  Shape output_shape;
  Dtype output_dtype = kFloat32;
};

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;  // null for leaves
};

}  // namespace tessera::detail
