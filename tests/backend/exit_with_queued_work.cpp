// Returns from main with kernels still queued (their results never read): on two logical
// CPU devices' queues, or with the argument `side-stream` on a side stream of the first CPU
// device (the side stream making the process's first matmul, so the BLAS library's statics
// are made on its thread). tests/backend/work_queue_test.cpp runs it and expects a clean
// exit. Without the exit drain, OpenBLAS or oneDNN was torn down under a queued kernel
// (SIGSEGV: 1 run in 4 on the devices' queues, every run on a side stream).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tessera/tessera.h"

int main(int argc, char** argv) {
  using namespace tessera;
  if (argc > 1 && std::string(argv[1]) == "side-stream") {
    const Device d = available_devices().front();
    const Tensor a = ones({200, 200}, d);
    StreamGuard guard(new_stream(d));
    Tensor b = a;
    for (int i = 0; i < 40; ++i) b = b.matmul(a) * (1.0 / 200);
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "fork-then-queue") {
    // The parent made the backend but no queue; the child makes its own queues and returns
    // with work on them: its exit must wait for them as any program's does.
    (void)memory_stats(cpu(0));
    const pid_t child = fork();
    if (child == 0) {
      std::vector<Tensor> kept;
      for (int i = 0; i < 40; ++i) {
        for (int d = 0; d < num_cpu_devices(); ++d) {
          const Tensor a = ones({200, 200}, cpu(d));
          kept.push_back(a.matmul(a));
        }
      }
      return 0;
    }
    int status = 0;
    waitpid(child, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 2;
  }
  if (argc > 1 && std::string(argv[1]) == "fork") {
    // A child forked after another thread queued work has the queues but not their threads:
    // its exit waited for them for ever. The parent gives it 20 s.
    std::thread worker([] {
      const Device d = available_devices().back();
      Tensor a = ones({256, 256}, d);
      for (int i = 0; i < 100; ++i) a = a.matmul(a) * 0.001;
    });
    worker.join();
    const pid_t child = fork();
    if (child == 0) return 0;
    for (int tenth = 0; tenth < 200; ++tenth) {
      int status = 0;
      if (waitpid(child, &status, WNOHANG) == child) {
        return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 2;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    kill(child, SIGKILL);
    return 3;  // the child hung
  }
  if (argc > 1 && std::string(argv[1]) == "other-thread") {
    std::thread worker([] {
      const Device d = available_devices().back();
      Tensor a = ones({256, 256}, d);
      for (int i = 0; i < 200; ++i) a = a.matmul(a) * 0.001;
    });
    worker.join();
    return 0;
  }
  std::vector<Tensor> kept;
  for (int i = 0; i < 40; ++i) {
    for (int d = 0; d < num_cpu_devices(); ++d) {
      kept.push_back(matmul(ones({48, 40}, cpu(d)), ones({40, 32}, cpu(d))));
    }
  }
  return 0;
}
