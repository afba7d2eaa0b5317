#pragma once
// The one copy between tensors that every front end (copy_, to, copy_to, the DataLoader's
// to_device) goes through: it orders the devices' queues and counts the bytes in the ledger.
#include <source_location>

#include "tessera/tensor.h"

namespace tessera::detail {

// Who may have written a CPU source tensor: any device queue (the safe default), or only
// host threads, which the caller vouches for (a DataLoader batch it has just filled and will
// not write again). The latter lets a copy out of a queued logical CPU device skip waiting
// for that queue: the destination reads the source when its own queue gets there.
enum class SourceWriters { kAnyQueue, kHostOnly };

// dst = src (same shape), across any two devices, converting dtypes. No
// autograd and no in-place check: the callers do those. Waits for the host only where a GPU
// is read or a queued CPU device may still be writing src (counted as a host wait). `op` is
// the call the user made (`to`, `copy_`, `to_device`): errors and host waits name it.
void copy_data(const Tensor& src, const Tensor& dst, const char* op,
               const std::source_location& where, SourceWriters writers = SourceWriters::kAnyQueue);

// Every element of `t` copied to `dst` on the host as `as`, waiting for the device (the
// library's half of Tensor::to_vector, also used by printing and saving).
void read_to_host(const Tensor& t, void* dst, Dtype as, const char* op,
                  const std::source_location& where);
// Checks `t` has one element and writes it to `dst` as `as` (waits for the device).
void read_item(const Tensor& t, void* dst, Dtype as, const std::source_location& where);
// Host pointer to the first element of a CPU tensor, after waiting for its device.
void* cpu_data(const Tensor& t, Dtype expected, const char* op, const std::source_location& where);

}  // namespace tessera::detail
