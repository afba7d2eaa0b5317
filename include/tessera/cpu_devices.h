#pragma once
/// Logical CPU devices: the CPU split into cpu:0, cpu:1, ... that behave as distinct devices
/// (own memory accounting and limit, mismatch errors, counted copies, own in-order work
/// queue). This is how multi-device code is tested on a machine without GPUs.
#include <cstddef>

#include "tessera/export.h"

namespace tessera {

struct TESSERA_API CpuDeviceOptions {
  /// Number of logical devices; 0 means "the plain CPU", a single device that is the host.
  int count = 0;
  /// Run each device's ops on its own worker thread, in order, like a GPU stream: host
  /// reads wait for it. Makes ordering bugs show up on the CPU. Default on.
  bool async_queues = true;
  /// Kernel threads of each device (OpenMP, BLAS, oneDNN); 0 means an equal share of the
  /// cores this process may use, cores / count (at least 1). With work queues each device's
  /// thread is also pinned to cores of its own when the devices' threads fit on the cores.
  int threads_per_device = 0;
};

/// Splits the CPU before first use. Throws Error if a tensor was already created (or its
/// memory asked for: a factory refused for its device does not count), if count
/// is negative or above 64, or if threads_per_device is negative or above 1024. The
/// environment variable TESSERA_CPU_DEVICES=N does the same at start-up (TESSERA_CPU_ASYNC=0
/// turns the worker threads off, TESSERA_CPU_THREADS=T sets threads_per_device).
TESSERA_API void configure_cpu_devices(const CpuDeviceOptions& options);

/// Whether logical CPU devices are configured (then every cpu:i is a device apart from the
/// host, and reading its data on the host counts as a device-to-host copy).
TESSERA_API bool has_logical_cpu_devices();

}  // namespace tessera
