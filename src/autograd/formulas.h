#pragma once
// Backward formulas, recorded by the ops (src/ops, src/core) when needs_grad() holds. Each
// saves what its formula needs and calls record().
#include <vector>

#include "backend/backend.h"
#include "tessera/tensor.h"

namespace tessera::detail {

void record_binary(BinaryOp op, const char* name, const Tensor& a, const Tensor& b,
                   const Tensor& out);
void record_binary_scalar(BinaryOp op, const char* name, const Tensor& a, double scalar,
                          bool scalar_first, const Tensor& out);
void record_unary(UnaryOp op, const char* name, const Tensor& a, const Tensor& out);
void record_where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out);

// `dims` are the reduced dims (normalized); out is the op's result (keepdim as asked).
void record_reduce(ReduceOp op, const char* name, const Tensor& a, const std::vector<int>& dims,
                   bool keepdim, const Tensor& out);
void record_matmul(const Tensor& a, const Tensor& b, const Tensor& out);
void record_softmax(const Tensor& a, int dim, bool log, const Tensor& out);

// Views and copies.
void record_reshape(const char* name, const Tensor& a, const Tensor& out);
void record_permute(const Tensor& a, const std::vector<int>& dims, const Tensor& out);
// out is a view of a's elements: narrow/slice/select. `scatter` writes a gradient of out's
// shape into the matching view of a zero tensor shaped like a.
void record_subview(const char* name, const Tensor& a, const Tensor& out,
                    std::function<Tensor(const Tensor& zeros_like_a)> same_view);
void record_expand(const Tensor& a, const Tensor& out);
void record_copy(const char* name, const Tensor& a, const Tensor& out);
// out joins `inputs` along `dim` (normalized): each input's gradient is its slice of out's.
void record_cat(const std::vector<Tensor>& inputs, int dim, const Tensor& out);

}  // namespace tessera::detail
