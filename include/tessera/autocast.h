#pragma once
/// Mixed precision by scope: inside an AutocastGuard, matmul (so nn::Linear) and conv2d on
/// devices of the guard's kind run in bfloat16 or float16 (their float32 operands are cast
/// by recorded casts, so gradients come back in the parameters' own dtype), while softmax,
/// log_softmax, cross_entropy and the reductions of half tensors give float32. Parameters,
/// and so the optimizers' weights, stay float32.
///
///   {
///     AutocastGuard autocast(DeviceKind::kCpu, kBFloat16);
///     loss = nn::cross_entropy(net(x), y);   // the Linear layers in bfloat16, the loss float32
///   }
///   loss.backward();                         // gradients float32, like the parameters
#include <optional>

#include "tessera/device.h"
#include "tessera/dtype.h"
#include "tessera/export.h"

namespace tessera {

/// Turns autocast on (`enabled`) or off for devices of `kind` on this thread until the guard
/// is destroyed, when the previous setting comes back; guards nest. Throws DtypeError unless
/// `dtype` is kBFloat16 or kFloat16. Waits for nothing.
class TESSERA_API AutocastGuard {
 public:
  AutocastGuard(DeviceKind kind, Dtype dtype = kBFloat16, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DeviceKind kind_;
  std::optional<Dtype> previous_;
};

/// The dtype autocast gives matmul and conv2d on devices of `kind` on this thread, or
/// nullopt when autocast is off there.
TESSERA_API std::optional<Dtype> autocast_dtype(DeviceKind kind);

}  // namespace tessera
