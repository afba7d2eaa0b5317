// The factory of one kernel level's CpuBackend (Note [CPU kernel variants] in
// cpu_backend.cpp); compiled once per level, like the kernels.
#include "backend/cpu/cpu_backend.h"

namespace tessera::detail::TESSERA_CPU_ISA {  // built once per level: cpu_backend.h

CpuBackendBase* make_cpu_backend() { return new CpuBackend(); }

}  // namespace tessera::detail::TESSERA_CPU_ISA
