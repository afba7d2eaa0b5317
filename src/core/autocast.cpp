// The autocast scope (tessera/autocast.h): one thread-local setting per device kind, read by
// the op front ends of matmul, conv2d, softmax, cross_entropy and the reductions.
#include "tessera/autocast.h"

#include "core/check.h"

namespace tessera {
namespace {

constexpr int kKinds = 2;  // DeviceKind::kCpu, kCuda
thread_local std::optional<Dtype> t_autocast[kKinds];

std::optional<Dtype>& slot(DeviceKind kind) { return t_autocast[static_cast<int>(kind)]; }

}  // namespace

AutocastGuard::AutocastGuard(DeviceKind kind, Dtype dtype, bool enabled)
    : kind_(kind), previous_(slot(kind)) {
  TESSERA_CHECK(is_half(dtype), DtypeError,
                "[AutocastGuard] autocasts to bfloat16 or float16, got {}; use kBFloat16 or "
                "kFloat16",
                dtype_name(dtype));
  slot(kind) = enabled ? std::optional<Dtype>(dtype) : std::nullopt;
}

AutocastGuard::~AutocastGuard() { slot(kind_) = previous_; }

std::optional<Dtype> autocast_dtype(DeviceKind kind) { return slot(kind); }

}  // namespace tessera
