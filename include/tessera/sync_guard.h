#pragma once
/// The sync guard: finds host waits the code did not ask for (the "log every minibatch"
/// mistake). Inside a SyncGuard(SyncMode::kError) scope on this thread, any implicit host
/// wait for a device (item(), to_vector(), data(), printing, a copy to the CPU) throws
/// SyncError naming the op, the device and the caller's file and line; kWarn prints the same
/// to stderr and goes on. An AllowSync scope marks deliberate reads, and synchronize() is
/// always allowed (it is an explicit request). Scopes are per thread and nest. Reads of the
/// host's own memory (the plain CPU) never wait and are never reported.
#include <source_location>

#include "tessera/device.h"
#include "tessera/error.h"
#include "tessera/export.h"

namespace tessera {

enum class SyncMode { kOff, kWarn, kError };

/// An implicit host wait inside a SyncGuard(SyncMode::kError) scope.
class TESSERA_API SyncError : public Error {
 public:
  using Error::Error;
};

/// Sets this thread's sync mode until destroyed, then restores the previous one.
class TESSERA_API SyncGuard {
 public:
  explicit SyncGuard(SyncMode mode);
  ~SyncGuard();
  SyncGuard(const SyncGuard&) = delete;
  SyncGuard& operator=(const SyncGuard&) = delete;

 private:
  SyncMode previous_;
};

/// Inside this scope host waits are deliberate: no warning, no error.
class TESSERA_API AllowSync {
 public:
  AllowSync();
  ~AllowSync();
  AllowSync(const AllowSync&) = delete;
  AllowSync& operator=(const AllowSync&) = delete;
};

/// This thread's current mode (kOff by default, or inside an AllowSync scope).
TESSERA_API SyncMode sync_mode();

}  // namespace tessera
