#include "backend/cpu/cpu_backend.h"
#include "core/check.h"
namespace tessera::detail {
void CpuBackend::reduce(ReduceOp, const Tensor&, std::uint32_t, const Tensor&) {
  TESSERA_INTERNAL_ASSERT(false, "reduce kernel missing");
}
}  // namespace tessera::detail
