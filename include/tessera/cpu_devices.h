#pragma once
/// Logical CPU devices: the CPU split into cpu:0, cpu:1, ... that behave as distinct devices
/// (own memory accounting and limit, mismatch errors, counted copies, own in-order work
/// queue). This is how multi-device code is tested on a machine without GPUs.
#include <cstddef>

namespace tessera {

struct CpuDeviceOptions {
  /// Number of logical devices; 0 means "the plain CPU", a single device that is the host.
  int count = 0;
  /// Run each device's ops on its own worker thread, in order, like a GPU stream: host
  /// reads wait for it. Makes ordering bugs show up on the CPU. Default on.
  bool async_queues = true;
};

/// Splits the CPU before first use. Throws Error if a tensor was already created, or if
/// count is negative or above 64. The environment variable TESSERA_CPU_DEVICES=N does the
/// same at start-up (and TESSERA_CPU_ASYNC=0 turns the worker threads off).
void configure_cpu_devices(const CpuDeviceOptions& options);

/// Whether logical CPU devices are configured (then every cpu:i is a device apart from the
/// host, and reading its data on the host counts as a device-to-host copy).
bool has_logical_cpu_devices();

}  // namespace tessera
