#pragma once
// Reading the numbers a training-state file keeps as metadata text (the epochs done, the
// random generator's state, the loader's epochs), refusing what tessera never writes.
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

namespace tessera::train {

// metadata[key] as a whole number from 0 to `max`, written in decimal digits only. Error
// naming `op`, the file and the key for a missing key or any other text (std::stoi read
// "0x" as 0 and "-3" as -3, and stoull "-1" as 2^64 - 1).
std::uint64_t metadata_count(const char* op, const std::filesystem::path& file,
                             const std::map<std::string, std::string>& metadata,
                             const std::string& key, std::uint64_t max);

}  // namespace tessera::train
