// Linked instead of peers/libtorch_bench.cpp when CMake finds no LibTorch.
#include "common.h"

namespace tessera::bench {

std::string configure_peer_threads() { return "none (LibTorch not found at configure time)"; }

}  // namespace tessera::bench
