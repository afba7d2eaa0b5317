// Exercise 1: big vs small work on the CPU and the GPU.
#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <map>

#include "bench/charts.h"
#include "bench/exercises.h"
#include "tessera/tessera.h"

namespace tessera::tools::bench {

std::vector<Device> bench_devices() {
  std::vector<Device> devices{cpu()};
  for (int i = 0; i < num_gpus(); ++i) devices.push_back(gpu(i));
  return devices;
}

void wait_for(Device device) {
  AllowSync deliberate;
  synchronize(device);
}

namespace {

// The smallest n from which on `dev` beats the CPU at every larger n measured on both.
std::string crossover(const std::map<int, double>& cpu_s, const std::map<int, double>& dev_s) {
  int from = -1;
  for (auto it = dev_s.rbegin(); it != dev_s.rend(); ++it) {
    const auto c = cpu_s.find(it->first);
    if (c == cpu_s.end()) continue;
    if (it->second < c->second) {
      from = it->first;
    } else {
      break;
    }
  }
  return from < 0 ? "no size (up to the largest n measured on both)"
                  : fmt::format("n = {} up", from);
}

}  // namespace

void run_matmul(Context& ctx) {
  std::cout << "\n== 1. matmul: float32 C = A @ B, n x n (big vs small work, CPU vs GPU)\n"
            << fmt::format("{:<8} {:>5} {:>10} {:>12} {:>10} {:>6}\n", "device", "n", "copies",
                           "time", "GFLOP/s", "inner");
  const int max_gpu = ctx.quick ? 4096 : 8192;
  const int max_cpu = ctx.quick ? std::min(2048, ctx.max_n_cpu) : ctx.max_n_cpu;
  std::vector<Series> series;
  std::map<int, double> cpu_seconds;
  for (const Device dev : bench_devices()) {
    for (const bool with_copy : {false, true}) {
      if (with_copy && dev.is_cpu()) continue;  // nothing to copy
      Series s{fmt::format("{}{}", dev.str(), with_copy ? " incl. copies" : ""), {}};
      std::map<int, double> seconds;
      for (int n = 16; n <= (dev.is_cpu() ? max_cpu : max_gpu); n *= 2) {
        manual_seed(n);
        const Tensor a_host = randn({n, n}), b_host = randn({n, n});
        const Tensor a = a_host.to(dev), b = b_host.to(dev);
        Timing t;
        if (with_copy) {
          // What a user pays who keeps data on the host: operands in, result out.
          t = time_calls(
              [&] {
                AllowSync deliberate;
                (void)matmul(a_host.to(dev), b_host.to(dev)).to(cpu());
              },
              [&] { wait_for(dev); }, ctx.target_s(), ctx.reps());
        } else {
          t = time_calls([&] { (void)matmul(a, b); }, [&] { wait_for(dev); }, ctx.target_s(),
                         ctx.reps());
        }
        const double gflops = 2.0 * n * n * n / t.median / 1e9;
        std::cout << fmt::format("{:<8} {:>5} {:>10} {:>12} {:>10.1f} {:>6}\n", dev.str(), n,
                                 with_copy ? "yes" : "no", format_seconds(t.median), gflops,
                                 t.inner)
                  << std::flush;
        ctx.report.rows.push_back({{"exercise", "matmul"},
                                   {"device", dev.str()},
                                   {"n", n},
                                   {"with_copy", with_copy},
                                   {"seconds", t.median},
                                   {"min_seconds", t.min},
                                   {"gflops", gflops}});
        s.points.emplace_back(n, gflops);
        seconds[n] = t.median;
      }
      if (dev.is_cpu()) {
        cpu_seconds = seconds;
      } else {
        ctx.report.note(fmt::format("matmul: {} beats the CPU{} from {}", dev.str(),
                                    with_copy ? " including the copies" : "",
                                    crossover(cpu_seconds, seconds)));
      }
      series.push_back(std::move(s));
    }
  }
  line_chart(ctx.chart("matmul"), "Exercise 1: float32 matmul, n x n", "n", "GFLOP/s", series);
}

}  // namespace tessera::tools::bench
