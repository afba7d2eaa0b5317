#pragma once
// What the layers with parameters (Linear, BatchNorm, LayerNorm) check of an input's dtype.
#include "tessera/nn/module.h"

namespace tessera::nn {

// What autocast does with a layer's input of another dtype than its parameters: casts both to
// its dtype (Linear, Conv2d), or nothing but compute a half input with float32 parameters in
// float32 (the normalization layers).
enum class UnderAutocast { kCastsBoth, kWidensHalfInput };

// Refuses an input whose dtype the layer's parameters (of dtype `params`) cannot take, unless
// autocast runs the layer as `rule` says: DtypeError naming the layer, its path and the fix.
void check_input_dtype(const Module& m, const Tensor& x, Dtype params,
                       UnderAutocast rule = UnderAutocast::kCastsBoth);

}  // namespace tessera::nn
