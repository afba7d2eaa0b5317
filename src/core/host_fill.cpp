#include "core/host_fill.h"

#include "backend/backend.h"
#include "core/check.h"
#include "core/device_rules.h"
#include "core/tensor_impl.h"

namespace tessera::detail {

bool host_writes_memory_of(Device device) { return backend_of(device).fills_from_host(); }

bool queued_work_pending(Device device) {
  const Backend::StillRead pending = backend_of(device).queued_readers(device.index());
  return pending && pending();
}

void fill_in_device_order(Device device, const char* op, const char* what,
                          const std::vector<Tensor>& outputs,
                          std::function<void(const std::vector<Tensor>& outputs)> fill) {
  Backend& backend = backend_of(device);
  TESSERA_INTERNAL_ASSERT(backend.fills_from_host(), "[{}] the host cannot write {}'s memory", op,
                          device.str());
  check_not_capturing(device, op, what);
  for (const Tensor& t : outputs) {
    TESSERA_INTERNAL_ASSERT(t.device() == device, "[{}] fills a tensor on {} in {}'s order", op,
                            t.device().str(), device.str());
    impl_of(t).storage->filled_in_device_order = true;
  }
  backend.fill_from_host(device.index(), outputs, std::move(fill));
}

}  // namespace tessera::detail
