// Returns from main with kernels still queued on two logical CPU devices (their results
// never read): tests/backend/work_queue_test.cpp runs it and expects a clean exit. Without
// the exit drain, OpenBLAS was torn down under a queued sgemm (SIGSEGV, 1 run in 4).
#include <vector>

#include "tessera/tessera.h"

int main() {
  using namespace tessera;
  std::vector<Tensor> kept;
  for (int i = 0; i < 40; ++i) {
    for (int d = 0; d < num_cpu_devices(); ++d) {
      kept.push_back(matmul(ones({48, 40}, cpu(d)), ones({40, 32}, cpu(d))));
    }
  }
  return 0;
}
