#pragma once
/// Process-wide numeric settings. Each is an atomic, so reading and changing them is safe from
/// any thread; a change applies to ops queued after it.
#include "tessera/export.h"
namespace tessera {

/// Lets float32 matmul (so nn::Linear) and convolution (forward and backward, whose products
/// are GEMMs) on GPUs use TF32 tensor cores: about 10 mantissa bits per product, relative
/// error near 1e-3, several times faster. Off by default: they are then exact float32. The
/// CPU never uses TF32; float64 is unaffected. Throws nothing, waits for nothing.
TESSERA_API void set_matmul_allow_tf32(bool allow);

/// Whether float32 matmul and convolution on GPUs may use TF32 (default false).
TESSERA_API bool matmul_allow_tf32();

}  // namespace tessera
