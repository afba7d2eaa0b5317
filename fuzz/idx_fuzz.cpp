// libFuzzer target: the IDX reader (src/data/idx_reader.cpp), plain and gzipped: header,
// declared size against the file, inflating, bytes after the gzip stream. Every input must
// load or be refused with a tessera::Error. Seeds: tests/fixtures/fuzz/idx/ (scripts/fuzz).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "input_file.h"
#include "tessera/data/idx.h"
#include "tessera/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static tessera::fuzz::InputFile file;
  try {
    tessera::data::read_idx(
        file.write(std::string_view(reinterpret_cast<const char*>(data), size)));
  } catch (const tessera::Error&) {
    // Refused with a tessera error. Anything else escapes and ends the run.
  }
  return 0;
}
