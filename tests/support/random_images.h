#pragma once
// A small labelled image set for training tests: n images of 8x8 pseudo-random pixels from
// a fixed linear congruential sequence (the same on every machine and rank), labels i % 4.
#include <cstdint>
#include <utility>
#include <vector>

#include "tessera/tessera.h"

namespace tessera::testing {

inline std::pair<Tensor, Tensor> random_images(std::int64_t n) {
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(n * 8 * 8));
  std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
  std::uint32_t s = 12345;
  for (auto& p : pixels) p = static_cast<std::uint8_t>((s = s * 1103515245u + 12345u) >> 24);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i % 4);
  return {from_vector(pixels, {n, 8, 8}), from_vector(labels, {n})};
}

}  // namespace tessera::testing
