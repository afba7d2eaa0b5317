#pragma once
// How ops join the graph: each differentiable op checks needs_grad() and, if so, records
// its backward formula with record(). In-place ops call check_inplace() first.
#include <functional>
#include <initializer_list>
#include <span>
#include <vector>

#include "tessera/tensor.h"

namespace tessera::detail {

using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

// Whether grad mode is on and some input requires grad.
bool needs_grad(std::initializer_list<const Tensor*> inputs);
inline bool needs_grad(const Tensor& a) { return needs_grad({&a}); }

// A tensor the formula will read, named by its role in the op ("input", "weight"). A null
// tensor is skipped, so a formula can save what it needs only when it needs it.
struct Saved {
  const char* role;
  const Tensor* tensor;
};

// Makes `out` (fresh from op `name`) require grad, with `backward` giving one gradient per
// input, in order. `saved` lists the tensors the formula reads: backward() refuses to run it
// if any was written in place since (Note [Saved tensors]). The span form takes any number of
// inputs (cat's).
void record(const char* name, const Tensor& out, std::span<const Tensor* const> inputs,
            BackwardFn backward, std::initializer_list<Saved> saved = {});
inline void record(const char* name, const Tensor& out, std::initializer_list<const Tensor*> inputs,
                   BackwardFn backward, std::initializer_list<Saved> saved = {}) {
  record(name, out, std::span(inputs.begin(), inputs.size()), std::move(backward), saved);
}

// Throws Error naming `op` when grad mode is on and any operand takes part in the graph:
// writing in place would corrupt values the graph saved. Marks nothing: the op marks what
// it writes (mark_written) once every check has passed, so that a refused op leaves the
// saved versions as they were (a refusal used to make later backward() passes fail).
void check_inplace(const char* op, std::initializer_list<const Tensor*> operands);

// Tensor::backward(): see Note [Backward pass] in engine.cpp.
void run_backward(const Tensor& root, const Tensor& gradient, bool retain_graph);

// The gradient of a broadcast: sums `grad` down to `shape`.
Tensor sum_to(const Tensor& grad, const Shape& shape);

}  // namespace tessera::detail
