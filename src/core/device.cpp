#include "tessera/device.h"

#include <charconv>
#include <ostream>

#include <fmt/format.h>

#include "backend/backend.h"
#include "core/check.h"
#include "core/device_registry.h"
#include "core/device_rules.h"
#include "tessera/cpu_devices.h"

namespace tessera {

Device::Device(DeviceKind kind, int index) : kind_(kind), index_(static_cast<std::int16_t>(index)) {
  TESSERA_CHECK(index >= 0 && index < detail::kMaxDevicesPerKind, DeviceError,
                "[Device] index {} is out of range; expected 0 to {}", index,
                detail::kMaxDevicesPerKind - 1);
}

Device Device::parse(std::string_view text) {
  const auto colon = text.find(':');
  const std::string_view kind = text.substr(0, colon);
  int index = 0;
  if (colon != std::string_view::npos) {
    const std::string_view digits = text.substr(colon + 1);
    // Digits only ("-0" and "01" are not indices), read before Device's own range check,
    // whose message cannot quote the text.
    const bool digits_only = !digits.empty() &&
                             digits.find_first_not_of("0123456789") == std::string_view::npos &&
                             (digits.size() == 1 || digits[0] != '0');
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    TESSERA_CHECK(digits_only && ec == std::errc() && end == digits.data() + digits.size(),
                  DeviceError,
                  "[Device::parse] '{}' has no valid index after ':'; expected e.g. 'cuda:1' (an "
                  "index is 0 to {}, in decimal digits)",
                  text, detail::kMaxDevicesPerKind - 1);
    TESSERA_CHECK(index < detail::kMaxDevicesPerKind, DeviceError,
                  "[Device::parse] '{}' names device {}, past the last one tessera can address "
                  "({}); devices count from 0",
                  text, index, detail::kMaxDevicesPerKind - 1);
  }
  if (kind == "cpu") return Device(DeviceKind::kCpu, index);
  if (kind == "cuda" || kind == "gpu") return Device(DeviceKind::kCuda, index);
  throw DeviceError(fmt::format(
      "[Device::parse] unknown device '{}'; expected 'cpu', 'cpu:N', 'cuda:N' or 'gpu:N'", text));
}

std::string Device::str() const {
  // cpu:0 is plain "cpu" unless the CPU is split, where "cpu" alone would be ambiguous.
  if (is_cpu()) {
    return index_ == 0 && !has_logical_cpu_devices() ? "cpu" : fmt::format("cpu:{}", index_);
  }
  return fmt::format("cuda:{}", index_);
}

std::ostream& operator<<(std::ostream& os, Device device) { return os << device.str(); }
std::string to_string(Device device) { return device.str(); }

Device cpu(int index) { return Device(DeviceKind::kCpu, index); }
Device gpu(int index) { return Device(DeviceKind::kCuda, index); }

int num_gpus() {
  detail::Backend* cuda = detail::cuda_backend();
  return cuda == nullptr ? 0 : cuda->device_count();
}

Device try_gpu(int index) { return index >= 0 && num_gpus() > index ? gpu(index) : cpu(); }

std::vector<Device> try_all_gpus() {
  std::vector<Device> devices;
  for (int i = 0; i < num_gpus(); ++i) devices.push_back(gpu(i));
  if (devices.empty()) devices.push_back(cpu());
  return devices;
}

std::vector<Device> available_devices() {
  std::vector<Device> devices;
  for (int i = 0; i < num_cpu_devices(); ++i) devices.push_back(cpu(i));
  for (int i = 0; i < num_gpus(); ++i) devices.push_back(gpu(i));
  return devices;
}

bool is_available(Device device) {
  return device.is_cpu() ? device.index() < num_cpu_devices() : device.index() < num_gpus();
}

std::string gpu_unavailable_reason() {
  detail::Backend* cuda = detail::cuda_backend();
  if (cuda == nullptr) {
    return "tessera was built without CUDA support (this version of tessera has no CUDA "
           "backend yet; it runs on the CPU)";
  }
  return cuda->unavailable_reason();
}

void synchronize(Device device) {
  detail::check_device(device, "synchronize");
  detail::check_not_capturing(device, "synchronize", "a host wait");
  if (!detail::is_host(device)) ++detail::counters(device).host_waits;
  detail::backend_of(device).synchronize(device.index());
}

void synchronize() {
  for (Device d : available_devices()) synchronize(d);
}

}  // namespace tessera
