#include "backend/cpu/cpu_backend.h"
#include "core/check.h"
namespace tessera::detail {
void CpuBackend::matmul(const Tensor&, const Tensor&, const Tensor&) {
  TESSERA_INTERNAL_ASSERT(false, "matmul kernel missing");
}
void CpuBackend::softmax(const Tensor&, int, bool, const Tensor&) {
  TESSERA_INTERNAL_ASSERT(false, "softmax kernel missing");
}
}  // namespace tessera::detail
