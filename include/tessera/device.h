#pragma once
/// Device: where a tensor's memory lives and where ops on it run. A small value type.
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/export.h"

namespace tessera {

enum class DeviceKind : std::uint8_t { kCpu = 0, kCuda = 1 };

/// A device handle: a kind and an index. Building one never checks that the device exists
/// (like torch.device('cuda:1')); using it for data does, and throws DeviceError if not.
class TESSERA_API Device {
 public:
  constexpr Device() = default;  ///< The CPU.
  /// Throws DeviceError for an index outside 0 to 63 (at most 64 devices of a kind).
  Device(DeviceKind kind, int index);

  /// Parses "cpu", "cpu:1", "cuda", "cuda:0", "gpu:1" (= "cuda:1"); the index is 0 to 63,
  /// written in decimal digits only. Throws DeviceError naming the text.
  static Device parse(std::string_view text);

  constexpr DeviceKind kind() const { return kind_; }
  constexpr int index() const { return index_; }
  constexpr bool is_cpu() const { return kind_ == DeviceKind::kCpu; }
  constexpr bool is_cuda() const { return kind_ == DeviceKind::kCuda; }

  /// "cpu" for cpu:0 (or "cpu:0" when logical CPU devices are configured), "cpu:1", "cuda:0".
  std::string str() const;

  friend constexpr bool operator==(Device a, Device b) = default;

 private:
  DeviceKind kind_ = DeviceKind::kCpu;
  std::int16_t index_ = 0;
};

TESSERA_API std::ostream& operator<<(std::ostream& os, Device device);
TESSERA_API std::string to_string(Device device);

/// The CPU (the book's cpu()). With logical CPU devices configured, cpu(i) is the i-th of
/// them and cpu() is cpu(0); without, cpu() is the whole CPU and cpu(i > 0) does not exist.
TESSERA_API Device cpu(int index = 0);
/// The i-th GPU handle (the book's gpu(i)); it need not exist until it is used for data.
TESSERA_API Device gpu(int index = 0);
/// Number of GPUs tessera can use (0 when built without CUDA, with no driver, or when
/// CUDA_VISIBLE_DEVICES hides them; gpu_unavailable_reason() says which).
TESSERA_API int num_gpus();
/// gpu(i) if it exists, else cpu().
TESSERA_API Device try_gpu(int index = 0);
/// Every GPU, or {cpu()} when there is none (what the book's docstring promises).
TESSERA_API std::vector<Device> try_all_gpus();

/// Number of CPU devices: 1, or the number of logical CPU devices when configured.
TESSERA_API int num_cpu_devices();
/// Every device that can hold data now: the CPU devices, then the GPUs.
TESSERA_API std::vector<Device> available_devices();
/// Whether `device` exists and can hold data.
TESSERA_API bool is_available(Device device);
/// Why no (or no further) GPU is visible, in words; empty when every GPU index < num_gpus().
TESSERA_API std::string gpu_unavailable_reason();

/// Waits until all work queued on `device` has finished, on every stream. Counted as a host
/// wait (never on the plain CPU).
TESSERA_API void synchronize(Device device);
/// Waits for every device.
TESSERA_API void synchronize();

}  // namespace tessera

template <>
struct std::hash<tessera::Device> {
  std::size_t operator()(tessera::Device d) const noexcept {
    return (static_cast<std::size_t>(d.kind()) << 16) ^ static_cast<std::size_t>(d.index());
  }
};
