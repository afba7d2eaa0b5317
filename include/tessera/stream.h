#pragma once
/// Streams: more than one in-order queue of work on one GPU, so that independent work can
/// run at the same time (the book's exercise 4 on a machine with one GPU). Every device has
/// a default stream, where all its work goes unless a StreamGuard says otherwise. CPU
/// devices have only their default stream: for concurrent CPU work use logical CPU devices.
#include <iosfwd>
#include <string>

#include "tessera/device.h"
#include "tessera/export.h"

namespace tessera {

/// A queue of work on one device: the device and an id (0 is the device's default stream).
class TESSERA_API Stream {
 public:
  /// The default stream of the CPU.
  constexpr Stream() = default;
  constexpr Device device() const { return device_; }
  constexpr int id() const { return id_; }
  constexpr bool is_default() const { return id_ == 0; }
  /// "cuda:0" for a default stream, "cuda:0/stream 2" otherwise.
  std::string str() const;
  friend constexpr bool operator==(Stream a, Stream b) = default;

 private:
  friend Stream default_stream(Device device);
  friend Stream new_stream(Device device);
  friend Stream current_stream(Device device);
  constexpr Stream(Device device, int id) : device_(device), id_(id) {}
  Device device_;
  int id_ = 0;
};

TESSERA_API std::ostream& operator<<(std::ostream& os, Stream stream);

/// The default stream of `device`. Throws DeviceError if the device does not exist.
TESSERA_API Stream default_stream(Device device);
/// A side stream of GPU `device`, taken round-robin from a small pool the GPU keeps (like
/// PyTorch's), so two calls in a row give two different streams. Throws DeviceError for a
/// CPU device (it has one queue; split the CPU with TESSERA_CPU_DEVICES instead) and for a
/// GPU that does not exist.
TESSERA_API Stream new_stream(Device device);
/// The stream this thread queues work for `device` on now.
TESSERA_API Stream current_stream(Device device);

/// Queues this thread's work for stream.device() on `stream` until destroyed, then returns
/// to the stream that was current before. Ordering is automatic and never waits on the
/// host: on entry the stream waits for everything already queued on the default stream (so
/// inputs made there are ready), and work queued on the default stream after the guard
/// ends waits for everything queued under it. Two guards one after the other on two side
/// streams therefore run concurrently. Memory freed while side streams may still use it is
/// reused only after they pass that point. Not allowed while a graph is being captured.
class TESSERA_API StreamGuard {
 public:
  explicit StreamGuard(Stream stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream stream_;
  int previous_;
};

/// Waits until the work queued on `stream` is done. Always allowed (an explicit request),
/// counted as a host wait on the stream's device.
TESSERA_API void synchronize(Stream stream);

}  // namespace tessera
