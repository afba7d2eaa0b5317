#pragma once
/// IDX files (the MNIST and Fashion-MNIST format), gzipped or not.
#include <filesystem>

#include "tessera/export.h"
#include "tessera/tensor.h"

namespace tessera::data {

/// Reads an IDX file of unsigned bytes (type 0x08) into a uint8 CPU tensor of its dims.
/// Compressed (.gz) and plain files are both read. A missing, truncated or corrupt file, a
/// bad magic number, other element types, trailing bytes (after the data, or after the gzip
/// stream) or dims that the file cannot hold (checked before anything is allocated or
/// inflated) throw IOError naming the file and what is wrong; nothing is ever read short.
TESSERA_API Tensor read_idx(const std::filesystem::path& path);

}  // namespace tessera::data
