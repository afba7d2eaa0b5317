#include "core/device_rules.h"

#include <fmt/format.h>

#include "core/check.h"
#include "core/code_names.h"
#include "core/device_registry.h"

namespace tessera::detail {

Device common_device(const char* op, std::initializer_list<Operand> operands) {
  const Operand* first = nullptr;
  for (const Operand& o : operands) {
    TESSERA_CHECK(o.tensor->defined(), Error,
                  "[{}] argument '{}' is an undefined tensor; create it with a factory such as "
                  "zeros() first",
                  op, o.name);
    if (first == nullptr) first = &o;
  }
  TESSERA_INTERNAL_ASSERT(first != nullptr, "{} has no operands", op);
  const Device device = first->tensor->device();
  for (const Operand& o : operands) {
    const Device other = o.tensor->device();
    if (other == device) continue;
    std::string hint;
    if (o.tensor->dim() == 0) {
      hint = fmt::format(
          " '{}' is a 0-dim tensor: pass it as a C++ scalar with .item(), or "
          "move it with .to({}).",
          o.name, device_code(device));
    } else if (first->tensor->dim() == 0) {
      hint = fmt::format(
          " '{}' is a 0-dim tensor: pass it as a C++ scalar with .item(), or "
          "move it with .to({}).",
          first->name, device_code(other));
    }
    throw DeviceMismatchError(fmt::format(
        "[{}] operands are on different devices: {} on {}, {} on {}. tessera never copies "
        "between devices implicitly; move one with .to({}) (or .to({})) first.{}",
        op, first->name, device.str(), o.name, other.str(), device_code(other), device_code(device),
        hint));
  }
  return device;
}

void count_copy(Device src, Device dst, std::size_t bytes) {
  const bool src_host = is_host(src), dst_host = is_host(dst);
  if (src_host && dst_host) return;
  if (src_host) {
    count_host_write(dst, bytes);
  } else if (dst_host) {
    DeviceCounters& c = counters(src);
    ++c.d2h_count;
    c.d2h_bytes += bytes;
  } else {
    DeviceCounters& c = counters(dst);
    ++c.d2d_count;
    c.d2d_bytes += bytes;
  }
}

void count_host_read(Device src, std::size_t bytes, const char* op,
                     const std::source_location* where) {
  if (is_host(src)) {
    check_not_capturing(src, op, "a read of its data on the host");
    return;
  }
  count_host_wait(src, op, where);  // may throw under a SyncGuard: then nothing is counted
  DeviceCounters& c = counters(src);
  ++c.d2h_count;
  c.d2h_bytes += bytes;
}

void count_collective(Device dst, std::size_t bytes) {
  if (bytes == 0) return;
  DeviceCounters& c = counters(dst);
  ++c.d2d_count;
  c.d2d_bytes += bytes;
}

void count_host_write(Device dst, std::size_t bytes) {
  if (is_host(dst)) return;
  DeviceCounters& c = counters(dst);
  ++c.h2d_count;
  c.h2d_bytes += bytes;
}

}  // namespace tessera::detail
