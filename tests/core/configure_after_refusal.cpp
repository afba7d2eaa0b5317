// A program of its own (the configuration is per process, and tessera_tests has made
// tensors by then): a factory refused for its device makes no tensor, so the fix its message
// gives, configure_cpu_devices() before the first tensor, still works.
#include <cstdio>

#include "tessera/tessera.h"

int main() {
  using namespace tessera;
  try {
    (void)zeros({1}, cpu(1));
    std::puts("zeros on cpu:1 of an unsplit CPU was not refused");
    return 1;
  } catch (const DeviceError& e) {
    std::printf("refused: %s\n", e.what());
  }
  configure_cpu_devices({.count = 2});
  const Tensor t = ones({2}, cpu(1));
  std::printf("configured after the refusal; %s holds %g\n", t.device().str().c_str(),
              sum(t).item<double>());
  return 0;
}
