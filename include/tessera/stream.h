#pragma once
/// Streams: more than one in-order queue of work on one device, so that independent work can
/// run at the same time (the book's exercise 4 on a machine with one GPU). Every device has
/// a default stream, where all its work goes unless a StreamGuard says otherwise, and side
/// streams: CUDA streams on a GPU; on a CPU device (the plain CPU, or a logical CPU device)
/// each side stream is an in-order work queue on a thread of its own, ordered with the
/// default stream by the same rules, so stream code runs, and is tested, on any machine.
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
/// A side stream of `device`, taken round-robin from a small pool the device keeps (four
/// streams, like PyTorch's pool), so two calls in a row give two different streams. On a CPU
/// device its queue's thread starts the first time a StreamGuard enters it. Throws
/// DeviceError if the device does not exist.
TESSERA_API Stream new_stream(Device device);
/// The stream this thread queues work for `device` on now.
TESSERA_API Stream current_stream(Device device);

/// Queues this thread's work for stream.device() on `stream` until destroyed, then returns
/// to the stream that was current before. Ordering is automatic and never waits on the
/// host: on entry the stream waits for everything already queued on the default stream (so
/// inputs made there are ready), and work queued on the default stream after the guard
/// ends waits for everything queued under it. Two guards one after the other on two side
/// streams therefore run concurrently. Memory freed while side streams may still use it is
/// reused only after they pass that point. Where a CPU device runs its default stream on
/// the calling thread (the plain CPU, TESSERA_CPU_ASYNC=0), that thread is the default
/// stream: default-stream work after the guard starts there once the side stream is done
/// (not counted as a host wait). Reading a tensor on the host waits for the current stream
/// (after the guard: the default stream, which has waited for the side stream). Throws
/// GraphCaptureError while the device is capturing a graph.
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

/// Work queued on `waiter` from now on waits for everything queued on `waited` so far, as
/// PyTorch's waiter.wait_stream(waited): what one side stream made, another can then read
/// (two guards one after the other run at the same time otherwise, and the second could read
/// what the first had not written yet). For a default `waited`, that includes the side
/// streams whose guards ended before. Never waits on the host, except on a device whose
/// default stream is the calling thread (the plain CPU, TESSERA_CPU_ASYNC=0) when `waiter` is
/// that default stream. Throws DeviceError unless both streams are of one device, and
/// GraphCaptureError while the device is capturing a graph.
///
///   { StreamGuard g(s1); b = a.matmul(a); }
///   wait_stream(s2, s1);
///   { StreamGuard g(s2); c = b * 3.0; }   // after b
TESSERA_API void wait_stream(Stream waiter, Stream waited);

/// Waits until the work queued on `stream` is done (for a default stream, including the side
/// streams' work it was ordered after). Allowed under any SyncGuard (an explicit request),
/// counted as a host wait on the stream's device (never on the plain CPU). Throws
/// GraphCaptureError while the device is capturing a graph.
TESSERA_API void synchronize(Stream stream);

}  // namespace tessera
