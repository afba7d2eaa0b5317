// libFuzzer target: load_safetensors on whole files (length prefix, header, data section,
// BOOL bytes), then an op on each BOOL tensor loaded (a BOOL byte other than 0 or 1 once
// made where() read out of bounds). Every input must load or be refused with a
// tessera::Error. Seeds: tests/fixtures/fuzz/safetensors/ (scripts/fuzz).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "input_file.h"
#include "tessera/error.h"
#include "tessera/factories.h"
#include "tessera/ops.h"
#include "tessera/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static tessera::fuzz::InputFile file;
  try {
    const tessera::SafetensorsFile loaded = tessera::load_safetensors(
        file.write(std::string_view(reinterpret_cast<const char*>(data), size)));
    for (const auto& [name, t] : loaded.tensors) {
      if (t.dtype() != tessera::kBool) continue;
      tessera::sum(tessera::where(t, 1.0, tessera::zeros(t.shape()))).item<double>();
    }
  } catch (const tessera::Error&) {
    // Refused with a tessera error. Anything else escapes and ends the run.
  }
  return 0;
}
