// Saves a large checkpoint over argv[1] again and again until killed: the test of
// Note [Saving atomically] kills it with SIGKILL in the middle of a save.
#include <cstdio>

#include "tessera/tessera.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: save_until_killed FILE\n");
    return 2;
  }
  const tessera::Tensor big = tessera::ones({32, 1024, 1024});  // 128 MiB of float32
  std::printf("saving\n");
  std::fflush(stdout);
  for (;;) tessera::save_safetensors(argv[1], {{"w", big}});
}
