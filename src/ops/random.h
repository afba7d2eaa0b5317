#pragma once
// The default generator's state: a seed and a running counter offset (see philox.h).
#include <cstdint>
#include <utility>

namespace tessera::detail {

// Reserves `count` counters and returns {seed, first counter}.
std::pair<std::uint64_t, std::uint64_t> reserve_random(std::uint64_t count);

}  // namespace tessera::detail
