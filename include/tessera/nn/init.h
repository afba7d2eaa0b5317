#pragma once
/// Parameter initialization in place, on the tensor's own device (no round trip through
/// the host), from the default generator (seed it with manual_seed). For a weight of shape
/// [out, in, k...], fan_in = in * prod(k) and fan_out = out * prod(k). Each function returns
/// its tensor; none records in the autograd graph.
///
///   net.apply([](nn::Module& m) {
///     if (auto* l = dynamic_cast<nn::Linear*>(&m)) nn::init::xavier_uniform_(l->weight);
///   });
#include <string>

#include "tessera/export.h"
#include "tessera/tensor.h"

namespace tessera::nn::init {

/// Uniform in [low, high): low < high (Error otherwise), or low == high to fill that value.
TESSERA_API Tensor& uniform_(Tensor& t, double low = 0, double high = 1);
TESSERA_API Tensor& normal_(Tensor& t, double mean = 0, double stddev = 1);
TESSERA_API Tensor& constant_(Tensor& t, double value);
TESSERA_API Tensor& zeros_(Tensor& t);
TESSERA_API Tensor& ones_(Tensor& t);

/// Glorot: uniform in +-gain*sqrt(6/(fan_in+fan_out)), or normal with std
/// gain*sqrt(2/(fan_in+fan_out)). ShapeError for tensors of fewer than 2 dims; Error for a
/// gain that is negative or not finite (0 fills zeros).
TESSERA_API Tensor& xavier_uniform_(Tensor& t, double gain = 1);
TESSERA_API Tensor& xavier_normal_(Tensor& t, double gain = 1);

enum class FanMode { kFanIn, kFanOut };
/// He: std = gain / sqrt(fan) with gain = sqrt(2 / (1 + a^2)) (a: negative slope of a
/// leaky ReLU; 0 is ReLU); uniform in +-sqrt(3)*std, or normal with that std.
TESSERA_API Tensor& kaiming_uniform_(Tensor& t, double a = 0, FanMode mode = FanMode::kFanIn);
TESSERA_API Tensor& kaiming_normal_(Tensor& t, double a = 0, FanMode mode = FanMode::kFanIn);

}  // namespace tessera::nn::init
