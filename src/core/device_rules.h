#pragma once
// The device rules, enforced here and nowhere else: every op's tensors share one device
// (else DeviceMismatchError), and every copy across devices or host read is counted in the
// transfer ledger.
#include <atomic>
#include <cstddef>
#include <initializer_list>
#include <source_location>
#include <vector>

#include "tessera/device.h"
#include "tessera/tensor.h"

namespace tessera::detail {

struct Operand {
  const char* name;  // "self", "other", "condition", ...
  const Tensor* tensor;
};

// The one device all operands live on. Throws Error for an undefined operand and
// DeviceMismatchError naming the op, each operand's device and the fix otherwise.
Device common_device(const char* op, std::initializer_list<Operand> operands);

// Fast path of common_device for the common two-operand case.
inline Device common_device(const char* op, const Tensor& self, const Tensor& other) {
  if (self.defined() && other.defined() && self.device() == other.device()) [[likely]] {
    return self.device();
  }
  return common_device(op, {{"self", &self}, {"other", &other}});
}

// Ledger entries (count_*, apart from autograd's record_*, which join the graph). A copy
// between two devices counts as h2d, d2h or d2d by whether either end is the host (see
// is_host); a host read of device data also counts as a host wait.
void count_copy(Device src, Device dst, std::size_t bytes);
void count_host_write(Device dst, std::size_t bytes);
// Bytes a collective brings into `dst` from the other devices of its group (one d2d entry).
void count_collective(Device dst, std::size_t bytes);
// A host read of `bytes` from `src`: a device-to-host copy plus a host wait.
void count_host_read(Device src, std::size_t bytes, const char* op,
                     const std::source_location* where);
// The host blocks until `device` catches up on behalf of `op` (implicitly). Counted, and
// checked against this thread's SyncGuard (sync_guard.cpp); `where` may be null.
void count_host_wait(Device device, const char* op, const std::source_location* where);

// Throws GraphCaptureError when `device` is capturing a graph (graph.h): `what` ("a host
// wait", "a copy from the host", ...) cannot be recorded. One atomic load when no capture is
// in progress anywhere.
void check_not_capturing(Device device, const char* op, const char* what);
// Whether `device` is capturing a graph (for work whose meaning changes when recorded: state
// made lazily, a sum into memory that outlives the capture). One atomic load when no capture
// is in progress anywhere.
bool is_capturing(Device device);
// Throws GraphCaptureError when some of `devices` (of one kind) are capturing a graph and
// others are not: `what` (a collective, a replay over several devices) runs on all of them
// together, so a recording of some would wait forever for the others' part.
void check_capturing_together(const std::vector<Device>& devices, const char* op, const char* what);

}  // namespace tessera::detail
