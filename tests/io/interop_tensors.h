#pragma once
// The tensors of tests/fixtures/safetensors/interop.py's TENSORS, built with tessera.
#include <cmath>
#include <map>
#include <string>

#include "tessera/tessera.h"

namespace tessera::testing {

inline std::map<std::string, Tensor> interop_tensors(Device d) {
  return {
      {"weights", from_vector(std::vector<float>{-1, -0.5, 0, 0.5, 1, 1.5}, {2, 3}, d)},
      {"counts", from_vector(std::vector<std::int64_t>{0, -1, std::int64_t{1} << 40, 7}, {4}, d)},
      {"mask", from_vector(std::vector<std::uint8_t>{1, 0, 1}, {3}, d).to(kBool)},
      {"pixels", from_vector(std::vector<std::uint8_t>{0, 1, 254, 255}, {2, 2}, d)},
      {"scalar", from_vector(std::vector<double>{3.25}, {}, d)},
      {"empty", zeros({0, 2}, d)},
      {"labels", from_vector(std::vector<std::int32_t>{1, -2, 3}, {3}, d)},
      {"bf16", from_vector(std::vector<float>{1, -2.5f, INFINITY, 0x1p-133f, 0.333984375f}, {5},
                           {kBFloat16, d})},
      {"f16",
       from_vector(std::vector<float>{1, -2.5f, 65504, 0x1p-24f, -INFINITY}, {5}, {kFloat16, d})},
  };
}

inline std::map<std::string, std::string> interop_metadata() {
  return {{"format", "pt"}, {"source", "tessera interop fixture"}};
}

}  // namespace tessera::testing
