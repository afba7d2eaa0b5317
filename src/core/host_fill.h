#pragma once
// Host code that writes fresh tensors of a CPU device in the order of that device's work.
#include <functional>
#include <vector>

#include "tessera/device.h"
#include "tessera/tensor.h"

namespace tessera::detail {

// Whether the host writes `device`'s memory, so fill_in_device_order can run for it (the
// plain CPU and logical CPU devices).
bool host_writes_memory_of(Device device);

// Whether work queued on `device` so far has yet to run (a logical CPU device's queue):
// memory it writes is not the host's to read until it has.
bool queued_work_pending(Device device);

// Runs fill(outputs), host code that writes `outputs` (fresh tensors of `device` that
// nothing queued reads yet) and nothing else of the device's, in the order of the work this
// thread queues on `device`: on the device's queue when it has one, so that the work takes
// the device's core rather than the calling thread's, or now when it has none. `fill` must
// write the tensors it is handed (a queued fill gets handles that do not keep their memory,
// which is reused in queue order once the caller drops `outputs`) and hold handles to
// everything it reads. Copies out of `outputs` then follow the device's queue even when
// their caller vouches that only the host wrote them (SourceWriters::kHostOnly).
// GraphCaptureError naming `op` and `what` (the work, for the message) while the device
// records a graph: a replay would write the same values again.
void fill_in_device_order(Device device, const char* op, const char* what,
                          const std::vector<Tensor>& outputs,
                          std::function<void(const std::vector<Tensor>& outputs)> fill);

}  // namespace tessera::detail
