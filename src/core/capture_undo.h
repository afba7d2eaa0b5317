#pragma once
// What a refused capture puts back on the host. See Note [A refused capture's host state].
#include <functional>
#include <vector>

namespace tessera::detail {

// Note [A refused capture's host state]
// Graph::capture records kernels without running them, so the host may point at memory no
// kernel has written yet: backward()'s first gradient of a leaf becomes the leaf's grad()
// there. When the capture then throws (an optimizer that is not capturable, a host read),
// the recording is dropped and that grad() holds whatever the memory held before: the next
// eager backward added to it, silently. Code that makes such host state notes how to undo it
// (note_undo); a capture that throws runs the notes, newest first, so the host state is what
// it was before the capture. Other host state (an optimizer's step count) is the caller's,
// as graph.h says.
class CaptureUndo {
 public:
  // Collects this thread's notes until destroyed (captures on other devices may nest).
  CaptureUndo();
  ~CaptureUndo();
  CaptureUndo(const CaptureUndo&) = delete;
  CaptureUndo& operator=(const CaptureUndo&) = delete;
  // Runs the notes, newest first, and forgets them.
  void roll_back() noexcept;

 private:
  std::vector<std::function<void()>> undo_;
  CaptureUndo* outer_;
  friend void note_undo(std::function<void()> undo);
};

// Adds `undo` to this thread's innermost CaptureUndo; nothing when there is none.
void note_undo(std::function<void()> undo);

}  // namespace tessera::detail
