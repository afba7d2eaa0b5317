// IDX files, gzipped or plain (the reading itself: data/idx_reader.cpp).
#include "tessera/data/idx.h"

#include "data/idx_reader.h"

namespace tessera::data {

Tensor read_idx(const std::filesystem::path& path) { return IdxReader(path).read(); }

}  // namespace tessera::data
