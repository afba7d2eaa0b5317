// Embedding: a lookup table, one index_select of the weight's rows.
#include "tessera/nn/embedding.h"

#include <fmt/format.h>

#include "core/check.h"
#include "core/tensor_impl.h"
#include "tessera/ops.h"

namespace tessera::nn {

Tensor embedding(const Tensor& indices, const Tensor& weight) {
  detail::check_defined(indices, "embedding", "indices");
  detail::check_defined(weight, "embedding", "weight");
  TESSERA_CHECK(weight.dim() == 2, ShapeError,
                "[embedding] weight must be [num_embeddings, embedding_dim], got shape {}",
                weight.shape().str());
  TESSERA_CHECK(indices.dtype() == kInt64 || indices.dtype() == kInt32, DtypeError,
                "[embedding] indices must be int64 or int32, got {}; convert them with "
                ".to(kInt64)",
                dtype_name(indices.dtype()));
  Shape shape = indices.shape();
  shape.push_back(weight.size(1));
  // Rows counted, not inferred: reshape's -1 has nothing to go by for 0 indices.
  const Tensor flat = indices.reshape({indices.numel()});
  return index_select(weight, 0, flat).reshape(shape);
}

Embedding::Embedding(std::int64_t num, std::int64_t dim, TensorOptions options)
    : Module("Embedding"), num_embeddings(num), embedding_dim(dim) {
  TESSERA_CHECK(num > 0 && dim > 0, ShapeError,
                "[Embedding] num_embeddings and embedding_dim must be positive, got {} and {}", num,
                dim);
  TESSERA_CHECK(!options.dtype || is_floating(*options.dtype), DtypeError,
                "[Embedding] the weight is floating-point, got dtype {}; make the layer float32 "
                "(the default), float64 or a half type",
                dtype_name(*options.dtype));
  weight = register_parameter("weight", randn({num, dim}, options));
}

Tensor Embedding::forward(const Tensor& indices) { return embedding(indices, weight); }

std::string Embedding::extra_repr() const {
  return fmt::format("{}, {}", num_embeddings, embedding_dim);
}

}  // namespace tessera::nn
