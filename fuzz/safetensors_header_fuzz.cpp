// libFuzzer target: the safetensors header parser (src/io/safetensors_header.cpp). The input
// is the header's JSON text; the harness puts the right length in front of it, so mutations
// reach the parser instead of the length check (safetensors_load_fuzz covers that check and
// whole files). With no data section, only headers of empty tensors are accepted; every
// input must parse or be refused with a tessera::Error. Seeds: tests/fixtures/fuzz/
// safetensors_header/; run with fuzz/safetensors.dict (scripts/fuzz).
#include <cstddef>
#include <cstdint>
#include <string>

#include "input_file.h"
#include "tessera/error.h"
#include "tessera/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static tessera::fuzz::InputFile file;
  std::string prefix(8, '\0');
  for (int i = 0; i < 8; ++i)
    prefix[i] = static_cast<char>((std::uint64_t{size} >> (8 * i)) & 0xff);
  const std::string_view header(reinterpret_cast<const char*>(data), size);
  try {
    tessera::read_safetensors_header(file.write(prefix, header));
  } catch (const tessera::Error&) {
    // Refused with a tessera error: what a bad header must give. Anything else escapes and
    // ends the run (std::terminate), as does a sanitizer report.
  }
  return 0;
}
