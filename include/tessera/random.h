#pragma once
/// The random number generator behind rand/randn: counter-based (Philox 4x32-10), so the
/// values depend only on the seed and on how many numbers were drawn before, never on the
/// device or on how many threads a kernel runs on. There is one default generator for the
/// whole process, as PyTorch's: user threads that draw at the same time (two threads each
/// building and seeding a model) take numbers from one sequence in whatever order they run.
/// Draw from one thread (or seed and draw under a mutex of your own) to repeat a run.
#include <cstdint>

#include "tessera/export.h"

namespace tessera {

/// Reseeds the default generator; the following rand/randn calls repeat run after run.
TESSERA_API void manual_seed(std::uint64_t seed);

/// The seed last given to manual_seed or set_rng_state (default 0x7e55e4a).
TESSERA_API std::uint64_t initial_seed();

/// Where the default generator stands: its seed and how many numbers it has handed out.
/// Restoring it (set_rng_state) makes the draws that follow repeat those that followed when
/// it was read, as a resumed training run needs for its dropout masks.
struct TESSERA_API RngState {
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;  ///< numbers drawn since manual_seed(seed)
  bool operator==(const RngState&) const = default;
};
TESSERA_API RngState rng_state();
TESSERA_API void set_rng_state(const RngState& state);

}  // namespace tessera
