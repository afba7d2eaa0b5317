#include "tessera/sync_guard.h"

#include <fmt/format.h>

#include <cstdio>

#include <string_view>

#include "core/device_registry.h"
#include "core/device_rules.h"

namespace tessera {
namespace {
thread_local SyncMode t_mode = SyncMode::kOff;
thread_local int t_allow_depth = 0;
}  // namespace

SyncGuard::SyncGuard(SyncMode mode) : previous_(t_mode) { t_mode = mode; }
SyncGuard::~SyncGuard() { t_mode = previous_; }
AllowSync::AllowSync() { ++t_allow_depth; }
AllowSync::~AllowSync() { --t_allow_depth; }
SyncMode sync_mode() { return t_allow_depth > 0 ? SyncMode::kOff : t_mode; }

}  // namespace tessera

namespace tessera::detail {

void count_host_wait(Device device, const char* op, const std::source_location* where) {
  // The plain CPU never waits, but a read while it records would see what the recording
  // has not run yet.
  check_not_capturing(device, op, "a host wait (a read of device data, or a synchronize)");
  if (is_host(device)) return;
  const SyncMode mode = sync_mode();
  if (mode == SyncMode::kOff) {
    ++counters(device).host_waits;
    return;
  }
  // `std::cout << t` cannot know its caller (an operator takes no source location); say
  // how to find the line instead of "unknown".
  const bool printed = std::string_view(op) == "print";
  const std::string place =
      where != nullptr && where->line() != 0
          ? fmt::format("{}:{}", where->file_name(), where->line())
      : printed ? std::string("a `std::cout << tensor` (t.str() reports its caller's line)")
                : std::string("(location unknown)");
  const std::string message = fmt::format(
      "[{}] the host waits for {} at {}: this read copies device data to the host and stalls "
      "until the device catches up. Keep the value on the device (e.g. accumulate a log "
      "tensor and read it once), or mark a deliberate read with AllowSync",
      op, device.str(), place);
  if (mode == SyncMode::kError) throw SyncError(message);  // nothing waited, nothing counted
  std::fprintf(stderr, "tessera warning: %s\n", message.c_str());
  ++counters(device).host_waits;
}

}  // namespace tessera::detail
