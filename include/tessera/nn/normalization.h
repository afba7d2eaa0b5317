#pragma once
/// Normalization layers: BatchNorm1d, BatchNorm2d (the book's batch normalization, with
/// running statistics kept as buffers on the module's device) and LayerNorm.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "tessera/export.h"
#include "tessera/factories.h"
#include "tessera/nn/module.h"

namespace tessera::nn {

/// Batch normalization over dim 1 (the channels) of x, [N, C, ...]: each channel is
/// normalized by the mean and biased variance of its N x ... values (training) or by
/// running_mean and running_var (evaluation), then scaled by weight and shifted by bias
/// ([C] each; either may be undefined). In training, defined running statistics are updated
/// in place, on their device and without a host wait: stat = (1 - momentum) stat + momentum
/// batch_stat, the variance unbiased there, as PyTorch does. Differentiable in x, weight and
/// bias. A half x is normalized in float32 and the result has x's dtype. eps must be > 0 in
/// training (a channel of equal values has variance 0), >= 0 in evaluation.
TESSERA_API Tensor batch_norm(const Tensor& x, const Tensor& running_mean,
                              const Tensor& running_var, const Tensor& weight = {},
                              const Tensor& bias = {}, bool training = false, double momentum = 0.1,
                              double eps = 1e-5);

/// Layer normalization over the last normalized_shape.size() dims of x, which must equal
/// normalized_shape: mean and biased variance over those dims, then weight and bias (of
/// normalized_shape, or undefined). A half x is normalized in float32 and the result has x's
/// dtype, as PyTorch's CPU and CUDA kernels return it.
TESSERA_API Tensor layer_norm(const Tensor& x, const Shape& normalized_shape,
                              const Tensor& weight = {}, const Tensor& bias = {},
                              double eps = 1e-5);

struct TESSERA_API BatchNormOptions {
  double eps = 1e-5;
  /// Weight of the batch in the running statistics; in [0, 1].
  double momentum = 0.1;
  /// A learnable weight (ones) and bias (zeros).
  bool affine = true;
  /// Running statistics as buffers, used in evaluation mode. Without them a module
  /// normalizes by the batch's statistics in both modes.
  bool track_running_stats = true;
};

/// The buffers and parameters of BatchNorm1d and BatchNorm2d, which differ only in the
/// input ranks they take. Parameters: weight, bias [C]; buffers: running_mean (zeros),
/// running_var (ones) [C] and num_batches_tracked, which move with to(), live in
/// state_dict() and checkpoints under PyTorch's names, and are updated in place in training
/// mode. In data-parallel training each replica
/// normalizes by its own shard's statistics, as PyTorch's DistributedDataParallel does
/// without SyncBatchNorm; the Trainer gives every replica the first one's running statistics
/// at the end of each epoch.
class TESSERA_API BatchNorm : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  std::int64_t num_features;
  BatchNormOptions norm;
  Parameter weight;  ///< [num_features]; undefined without affine
  Parameter bias;    ///< [num_features]; undefined without affine
  /// The registered buffers ([num_features]; undefined without track_running_stats). The
  /// handles cannot be rebound (the module would lose track of its state); change the values
  /// in place (`Tensor(bn.running_var).fill_(1)`) or with load_state_dict.
  const Tensor running_mean;
  const Tensor running_var;
  /// The training calls counted so far (0-dim int64, undefined without
  /// track_running_stats), as PyTorch counts them, so checkpoints match PyTorch's names.
  const Tensor num_batches_tracked;

 protected:
  BatchNorm(const char* type_name, std::int64_t num_features, BatchNormOptions norm,
            TensorOptions options, std::initializer_list<int> ranks);

 private:
  std::vector<int> ranks_;  // the input ranks the layer takes
};

/// BatchNorm1d(num_features): inputs [N, C] or [N, C, L].
class TESSERA_API BatchNorm1d : public BatchNorm {
 public:
  // Parameters named apart from the members, for users' -Wshadow: the body is in the header.
  explicit BatchNorm1d(std::int64_t features, BatchNormOptions options_of_norm = {},
                       TensorOptions options = {})
      : BatchNorm("BatchNorm1d", features, options_of_norm, options, {2, 3}) {}
};

/// BatchNorm2d(num_features): inputs [N, C, H, W].
class TESSERA_API BatchNorm2d : public BatchNorm {
 public:
  // Parameters named apart from the members, for users' -Wshadow: the body is in the header.
  explicit BatchNorm2d(std::int64_t features, BatchNormOptions options_of_norm = {},
                       TensorOptions options = {})
      : BatchNorm("BatchNorm2d", features, options_of_norm, options, {4}) {}
};

/// LayerNorm(normalized_shape): normalizes over the input's last dims, which must equal
/// normalized_shape; weight (ones) and bias (zeros) of that shape unless
/// elementwise_affine is false.
class TESSERA_API LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     TensorOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  Shape normalized_shape;
  double eps;
  Parameter weight;  ///< normalized_shape; undefined without elementwise_affine
  Parameter bias;
};

}  // namespace tessera::nn
