// See Note [A refused capture's host state] in capture_undo.h.
#include "core/capture_undo.h"

#include <utility>

namespace tessera::detail {
namespace {

thread_local CaptureUndo* innermost = nullptr;

}  // namespace

CaptureUndo::CaptureUndo() : outer_(innermost) { innermost = this; }

CaptureUndo::~CaptureUndo() { innermost = outer_; }

void CaptureUndo::roll_back() noexcept {
  for (auto it = undo_.rbegin(); it != undo_.rend(); ++it) (*it)();
  undo_.clear();
}

void note_undo(std::function<void()> undo) {
  if (innermost != nullptr) innermost->undo_.push_back(std::move(undo));
}

}  // namespace tessera::detail
