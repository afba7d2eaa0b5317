// Linked instead of the CUDA backend when tessera is built without CUDA: there is no CUDA
// backend, so num_gpus() is 0 and gpu_unavailable_reason() says tessera lacks CUDA.
#include "backend/backend.h"

namespace tessera::detail {

Backend* cuda_backend() { return nullptr; }

}  // namespace tessera::detail
