#pragma once
/// IDX files (the MNIST and Fashion-MNIST format), gzipped or not.
#include <filesystem>

#include "tessera/tensor.h"

namespace tessera::data {

/// Reads an IDX file of unsigned bytes (type 0x08) into a uint8 CPU tensor of its dims.
/// Compressed (.gz) and plain files are both read. A missing, truncated or corrupt file, a
/// bad magic number, other element types or trailing bytes throw IOError naming the file
/// and what is wrong; nothing is ever read short.
Tensor read_idx(const std::filesystem::path& path);

}  // namespace tessera::data
