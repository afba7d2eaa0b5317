#pragma once
// The header of a safetensors file, read and checked before any tensor data is touched
// (Note [Parsing the header] in safetensors_header.cpp).
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "tessera/dtype.h"
#include "tessera/shape.h"

namespace tessera::io {

// The reference implementation refuses headers over 100 MB; so do we, before allocating.
inline constexpr std::uint64_t kMaxSafetensorsHeader = 100'000'000;

struct SafetensorsDtypeName {
  Dtype dtype;
  const char* name;
};
inline constexpr SafetensorsDtypeName kSafetensorsDtypes[] = {
    {kBool, "BOOL"},   {kUInt8, "U8"},    {kInt32, "I32"},     {kInt64, "I64"},
    {kFloat32, "F32"}, {kFloat64, "F64"}, {kBFloat16, "BF16"}, {kFloat16, "F16"}};

struct SafetensorsEntry {
  std::string name;
  Dtype dtype;
  Shape shape;
  std::uint64_t begin, end;  // its bytes, counted from the start of the data section
};

struct SafetensorsLayout {
  std::vector<SafetensorsEntry> entries;  // in the header's order
  std::map<std::string, std::string> metadata;
  std::uint64_t data_start = 0;  // where the data section starts in the file
};

// Reads the header through `fd`, a descriptor of the file `path` names, and checks all of it
// against that file's size: throws IOError naming `path` and the first problem. Whoever then
// reads the data reads it through the same descriptor: opening the path again could open
// another file, one that a save put there since (an atomic rename), with a header of its
// own; of the same size, it passed every check, and a load returned one file's header with
// the other's data.
SafetensorsLayout read_safetensors_layout(int fd, const std::filesystem::path& path);

}  // namespace tessera::io
