#include "core/device_registry.h"

#include <array>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "backend/backend.h"
#include "core/check.h"

namespace tessera::detail {
namespace {

std::array<std::array<DeviceCounters, kMaxDevicesPerKind>, 2> g_counters;

std::mutex g_config_mutex;
bool g_configured = false;
std::atomic<bool> g_in_use{false};
CpuDeviceOptions g_options;

constexpr int kMaxThreadsPerDevice = 1024;

// Digits only: " 2", "+2" and "2x" are refused rather than read as 2.
int parse_count_env(const char* name, const char* text, const char* what, int max) {
  const std::string_view digits(text);
  const bool plain = !digits.empty() && digits.size() <= 9 &&
                     digits.find_first_not_of("0123456789") == std::string_view::npos;
  const long value = plain ? std::strtol(text, nullptr, 10) : -1;
  TESSERA_CHECK(plain && value <= max, Error,
                "[configure_cpu_devices] {}='{}' is not a {}; expected an integer from 0 to {}",
                name, text, what, max);
  return static_cast<int>(value);
}

// Caller holds g_config_mutex. Marks the configuration read only once all of it parsed, so
// a malformed variable throws at every use instead of once and then silently not at all.
void configure_from_env_locked() {
  if (g_configured) return;
  CpuDeviceOptions options;
  if (const char* n = std::getenv("TESSERA_CPU_DEVICES"); n != nullptr && *n != '\0') {
    options.count = parse_count_env("TESSERA_CPU_DEVICES", n, "device count", kMaxDevicesPerKind);
  }
  if (const char* t = std::getenv("TESSERA_CPU_THREADS"); t != nullptr && *t != '\0') {
    options.threads_per_device =
        parse_count_env("TESSERA_CPU_THREADS", t, "thread count", kMaxThreadsPerDevice);
  }
  if (const char* a = std::getenv("TESSERA_CPU_ASYNC"); a != nullptr && *a != '\0') {
    const std::string value(a);
    TESSERA_CHECK(value == "0" || value == "1", Error,
                  "[configure_cpu_devices] TESSERA_CPU_ASYNC='{}' is not 0 or 1; 1 (the default) "
                  "gives each logical CPU device its own work queue, 0 runs its ops on the "
                  "calling thread",
                  value);
    options.async_queues = value == "1";
  }
  g_options = options;
  g_configured = true;
}

}  // namespace

DeviceCounters& counters(Device device) {
  return g_counters[static_cast<int>(device.kind())][device.index()];
}

std::vector<std::uint64_t> d2d_moves(DeviceKind kind) {
  std::vector<std::uint64_t> out;
  for (const DeviceCounters& c : g_counters[static_cast<int>(kind)]) {
    out.push_back(c.d2d_count.load());
    out.push_back(c.d2d_bytes.load());
  }
  return out;
}

void add_d2d_moves(DeviceKind kind, const std::vector<std::uint64_t>& moves, int sign) {
  auto& all = g_counters[static_cast<int>(kind)];
  for (std::size_t i = 0; i + 1 < moves.size() && i / 2 < all.size(); i += 2) {
    if (moves[i] == 0 && moves[i + 1] == 0) continue;
    DeviceCounters& c = all[i / 2];
    if (sign > 0) {
      c.d2d_count += moves[i];
      c.d2d_bytes += moves[i + 1];
    } else {
      c.d2d_count -= moves[i];
      c.d2d_bytes -= moves[i + 1];
    }
  }
}

const CpuDeviceOptions& cpu_options() {
  if (!g_in_use.load(std::memory_order_acquire)) {
    std::lock_guard lock(g_config_mutex);
    configure_from_env_locked();
  }
  return g_options;
}

void mark_devices_in_use() {
  if (g_in_use.load(std::memory_order_relaxed)) return;
  std::lock_guard lock(g_config_mutex);
  configure_from_env_locked();
  g_in_use.store(true, std::memory_order_release);
}

bool is_host(Device device) { return device.is_cpu() && cpu_options().count == 0; }

namespace {

std::string device_list() {
  std::string out;
  for (Device d : available_devices()) out += (out.empty() ? "" : ", ") + d.str();
  return out;
}

}  // namespace

void check_device(Device device, const char* op) {
  if (device.is_cpu()) {
    const int count = num_cpu_devices();
    if (device.index() < count) return;
    if (cpu_options().count == 0) {
      throw DeviceError(fmt::format(
          "[{}] device {} does not exist: the CPU is a single device (cpu) unless it is split "
          "into logical devices. Set TESSERA_CPU_DEVICES=N or call configure_cpu_devices() "
          "before creating any tensor. Available devices: {}",
          op, device.str(), device_list()));
    }
    throw DeviceError(fmt::format(
        "[{}] device {} does not exist: {} logical CPU devices are configured (cpu:0 to "
        "cpu:{}). Available devices: {}",
        op, device.str(), count, count - 1, device_list()));
  }
  if (device.index() < num_gpus()) return;
  throw DeviceError(fmt::format(
      "[{}] device {} is not available: {}. Available devices: {}. Use try_gpu({}) to fall "
      "back to the CPU when the GPU is missing (on the command line: leave --device out, or "
      "pass --device cpu).",
      op, device.str(), gpu_unavailable_reason(), device_list(), device.index()));
}

}  // namespace tessera::detail

namespace tessera {

void configure_cpu_devices(const CpuDeviceOptions& options) {
  using namespace detail;
  TESSERA_CHECK(options.count >= 0 && options.count <= kMaxDevicesPerKind, Error,
                "[configure_cpu_devices] count {} is out of range; expected 0 to {}", options.count,
                kMaxDevicesPerKind);
  TESSERA_CHECK(
      options.threads_per_device >= 0 && options.threads_per_device <= kMaxThreadsPerDevice, Error,
      "[configure_cpu_devices] threads_per_device {} is out of range; expected 0 "
      "(an equal share of the cores) to {}",
      options.threads_per_device, kMaxThreadsPerDevice);
  std::lock_guard lock(g_config_mutex);
  TESSERA_CHECK(!g_in_use.load(), Error,
                "[configure_cpu_devices] called after the first tensor was created; call it "
                "at the start of the program (or set TESSERA_CPU_DEVICES before it starts)");
  g_configured = true;
  g_options = options;
}

bool has_logical_cpu_devices() { return detail::cpu_options().count > 0; }

int num_cpu_devices() {
  const int n = detail::cpu_options().count;
  return n == 0 ? 1 : n;
}

}  // namespace tessera
