#pragma once
// A CPU kernel's own memory (per-thread partial sums, im2col columns, a float64 copy of a
// reduction's sums) is not a tensor's: it comes from operator new, not from the device's
// allocator, so running out of it threw a bare std::bad_alloc that named neither the op nor
// the device (and, queued on a logical device, surfaced at the next unrelated read as that).
#include <new>
#include <utility>

#include "tessera/device.h"

namespace tessera::detail {

// Throws OutOfMemoryError: `op`'s kernel on `device` could not allocate its scratch memory.
[[noreturn]] void throw_scratch_out_of_memory(const char* op, Device device);

// Runs `kernel`, turning a failed allocation of its scratch memory into OutOfMemoryError.
template <typename F>
void with_scratch_memory(const char* op, Device device, F&& kernel) {
  try {
    std::forward<F>(kernel)();
  } catch (const std::bad_alloc&) {
    throw_scratch_out_of_memory(op, device);
  }
}

}  // namespace tessera::detail
