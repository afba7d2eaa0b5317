// Exercise 3: 1000 matmuls of 100 x 100, logging the Frobenius norm of each result: read to
// the host every step, kept on the device and read once, and that recorded as a graph.
#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <optional>

#include "bench/charts.h"
#include "bench/exercises.h"
#include "tessera/tessera.h"

namespace tessera::tools::bench {
namespace {

constexpr int kSteps = 1000;

struct Variant {
  const char* name;
  Timing t;
  std::optional<std::uint64_t> host_waits;  // counted by the ledger in one run
  std::vector<double> norms;                // the log of the last run
};

// Runs `run` once under the ledger, then times it; `run` returns the norms it logged.
Variant measure(const char* name, Device dev, const Context& ctx,
                const std::function<std::vector<double>()>& run, bool count_waits = true) {
  Variant v{name, {}, std::nullopt, {}};
  reset_transfer_stats();
  v.norms = run();
  if (count_waits) v.host_waits = transfer_stats(dev).host_waits;
  v.t = time_runs([&] { v.norms = run(); }, ctx.reps());
  v.t.median /= kSteps;
  v.t.min /= kSteps;
  return v;
}

}  // namespace

void run_norm_log(Context& ctx) {
  std::cout << fmt::format("\n== 3. norm_log: {} steps of ||X @ W||_F, 100 x 100, float32\n",
                           kSteps)
            << fmt::format("{:<8} {:<16} {:>12} {:>11} {:>10}\n", "device", "variant", "per step",
                           "host waits", "vs (a)");
  std::vector<BarGroup> groups;
  const std::vector<std::string> names{"host_each_step", "device_log", "graph", "matmul_only"};
  for (const Device dev : bench_devices()) {
    manual_seed(0);
    const Tensor x = randn({100, 100}, dev) * 0.1, w = randn({100, 100}, dev) * 0.1;
    Tensor log = zeros({kSteps}, dev);
    AllowSync deliberate;  // (a) reads every step on purpose; the others read once
    std::vector<Variant> variants;
    variants.push_back(measure("host_each_step", dev, ctx, [&] {
      std::vector<double> norms;
      norms.reserve(kSteps);
      for (int i = 0; i < kSteps; ++i) norms.push_back(norm(matmul(x, w)).item<double>());
      return norms;
    }));
    const auto log_on_device = [&] {
      for (int i = 0; i < kSteps; ++i) log.narrow(0, i, 1).copy_(norm(matmul(x, w)).reshape({1}));
    };
    variants.push_back(measure("device_log", dev, ctx, [&] {
      log_on_device();
      return log.to_vector<double>();
    }));
    if (dev.is_cuda()) {
      const Graph graph = Graph::capture(dev, log_on_device);
      variants.push_back(measure("graph", dev, ctx, [&] {
        graph.replay();
        return log.to_vector<double>();
      }));
      // The matmul kernels alone, recorded back to back: the floor for one step.
      Tensor y;
      const Graph matmuls = Graph::capture(dev, [&] {
        for (int i = 0; i < kSteps; ++i) y = matmul(x, w);
      });
      variants.push_back(measure(
          "matmul_only", dev, ctx,
          [&] {
            matmuls.replay();
            synchronize(dev);
            return std::vector<double>{};
          },
          false));
    } else {
      variants.push_back(measure(
          "matmul_only", dev, ctx,
          [&] {
            for (int i = 0; i < kSteps; ++i) (void)matmul(x, w);
            synchronize(dev);
            return std::vector<double>{};
          },
          false));
    }
    // Every variant logs the same norms.
    const std::vector<double>& ref = variants.front().norms;
    for (const Variant& v : variants) {
      if (v.norms.empty()) continue;
      double worst = 0;
      for (std::size_t i = 0; i < ref.size(); ++i) {
        worst = std::max(worst, std::abs(v.norms[i] - ref[i]) / std::abs(ref[i]));
      }
      if (v.norms.size() != ref.size() || !(worst < 1e-4)) {
        std::cout << fmt::format("FAIL: {} {} logged other norms (relative difference {:.2g})\n",
                                 dev.str(), v.name, worst);
        ++ctx.report.failures;
      }
    }
    BarGroup group{dev.str(), std::vector<double>(names.size(), NAN)};
    const double per_step_a = variants.front().t.median;  // (a): read every step
    for (const Variant& v : variants) {
      const double speedup = per_step_a / v.t.median;
      std::cout << fmt::format("{:<8} {:<16} {:>12} {:>11} {:>9.2f}x\n", dev.str(), v.name,
                               format_seconds(v.t.median),
                               v.host_waits ? std::to_string(*v.host_waits) : "-", speedup);
      ctx.report.rows.push_back({{"exercise", "norm_log"},
                                 {"device", dev.str()},
                                 {"variant", v.name},
                                 {"steps", kSteps},
                                 {"seconds_per_step", v.t.median},
                                 {"min_seconds_per_step", v.t.min},
                                 {"host_waits", v.host_waits ? Json(*v.host_waits) : Json()},
                                 {"speedup_vs_host_each_step", speedup}});
      for (std::size_t k = 0; k < names.size(); ++k) {
        if (names[k] == v.name) group.values[k] = v.t.median * 1e6;
      }
    }
    groups.push_back(std::move(group));
  }
  bar_chart(ctx.chart("norm_log"),
            fmt::format("Exercise 3: logging ||X @ W|| over {} steps (100 x 100)", kSteps),
            "microseconds per step", names, groups);
}

}  // namespace tessera::tools::bench
