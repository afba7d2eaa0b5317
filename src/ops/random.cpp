#include "ops/random.h"

#include <mutex>

#include "tessera/random.h"

namespace tessera {
namespace {

constexpr std::uint64_t kDefaultSeed = 0x7e55e4a;

std::mutex g_mutex;
std::uint64_t g_seed = kDefaultSeed;
std::uint64_t g_offset = 0;

}  // namespace

void manual_seed(std::uint64_t seed) {
  std::lock_guard lock(g_mutex);
  g_seed = seed;
  g_offset = 0;
}

std::uint64_t initial_seed() {
  std::lock_guard lock(g_mutex);
  return g_seed;
}

RngState rng_state() {
  std::lock_guard lock(g_mutex);
  return {g_seed, g_offset};
}

void set_rng_state(const RngState& state) {
  std::lock_guard lock(g_mutex);
  g_seed = state.seed;
  g_offset = state.offset;
}

}  // namespace tessera

namespace tessera::detail {

std::pair<std::uint64_t, std::uint64_t> reserve_random(std::uint64_t count) {
  std::lock_guard lock(g_mutex);
  const std::uint64_t first = g_offset;
  g_offset += count;
  return {g_seed, first};
}

}  // namespace tessera::detail
