#pragma once
/// Embedding tables: rows of a weight looked up by integer indices.
#include <cstdint>
#include <string>

#include "tessera/export.h"
#include "tessera/factories.h"
#include "tessera/nn/module.h"

namespace tessera::nn {

/// The rows of weight [num_embeddings, embedding_dim] named by `indices` (int64 or int32, any
/// shape, on weight's device): a tensor of indices.shape() + [embedding_dim]. index_select on
/// the flattened indices, so its errors (an index outside [0, num_embeddings) is an
/// IndexError found on the device: ops.h) and gradient (repeated rows add up) are its.
TESSERA_API Tensor embedding(const Tensor& indices, const Tensor& weight);

/// Embedding(num_embeddings, embedding_dim): a weight [num_embeddings, embedding_dim] drawn
/// from N(0, 1) as PyTorch's, directly on `options.device` (default: the current DeviceScope's
/// device) from the default generator (manual_seed). forward(indices) is embedding(indices,
/// weight).
class TESSERA_API Embedding : public Module {
 public:
  Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim, TensorOptions options = {});
  Tensor forward(const Tensor& indices) override;
  std::string extra_repr() const override;

  std::int64_t num_embeddings, embedding_dim;
  Parameter weight;  ///< [num_embeddings, embedding_dim]
};

}  // namespace tessera::nn
