// Process-wide numeric settings (tessera/settings.h).
#include "tessera/settings.h"

#include <atomic>

namespace tessera {
namespace {

// Relaxed: the flag orders nothing else; each matmul reads it once when it is queued.
std::atomic<bool> g_matmul_allow_tf32{false};

}  // namespace

void set_matmul_allow_tf32(bool allow) {
  g_matmul_allow_tf32.store(allow, std::memory_order_relaxed);
}

bool matmul_allow_tf32() { return g_matmul_allow_tf32.load(std::memory_order_relaxed); }

}  // namespace tessera
