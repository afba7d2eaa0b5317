// Exercise 4: two matmuls at once on two devices against one after the other on one. With
// two GPUs, the real thing; with one, two streams on it; with none, two logical CPU devices.
#include <fmt/format.h>

#include <iostream>
#include <optional>

#include "bench/charts.h"
#include "bench/exercises.h"
#include "tessera/tessera.h"

namespace tessera::tools::bench {

void run_parallel(Context& ctx) {
  std::cout << "\n== 4. parallel: two float32 matmuls at once vs one after the other\n";
  const std::vector<Device> gpus = try_all_gpus();
  std::string mode;
  Device first, second;
  bool streams = false;
  if (num_gpus() >= 2) {
    mode = "two GPUs", first = gpus[0], second = gpus[1];
  } else if (num_gpus() == 1) {
    mode = "two streams on one GPU", first = second = gpus[0], streams = true;
  } else if (available_devices().size() >= 2) {
    mode = "two logical CPU devices", first = available_devices()[0],
    second = available_devices()[1];
  } else {
    ctx.report.note(
        "parallel: skipped: needs two devices; with no GPU, split the CPU "
        "(TESSERA_CPU_DEVICES=2 tessera bench parallel)");
    return;
  }
  std::cout << fmt::format("measured: {} ({} and {})\n", mode, first.str(), second.str());
  if (first.is_cpu()) {  // each owns half the cores (Note [Devices own their cores])
    std::cout << fmt::format("  {}: {}\n  {}: {}\n", first.str(), device_properties(first).details,
                             second.str(), device_properties(second).details);
  }
  std::cout << fmt::format("{:>5} {:>12} {:>12} {:>8}\n", "n", "sequential", "parallel", "scaling");
  std::optional<Stream> s1, s2;
  if (streams) s1 = new_stream(first), s2 = new_stream(first);
  const auto wait_both = [&] {
    wait_for(first);
    if (second != first) wait_for(second);
  };
  BarGroup group{mode, {}};
  std::vector<std::string> names;
  std::vector<int> sizes{256, 1024, 4096};
  if (ctx.quick) sizes.pop_back();  // two 4096 matmuls take a second on a small CPU
  for (const int n : sizes) {
    manual_seed(n);
    const Tensor a1 = randn({n, n}, first), b1 = randn({n, n}, first);
    const Tensor a2 = randn({n, n}, second), b2 = randn({n, n}, second);
    const Tensor a2_first = a2.to(first), b2_first = b2.to(first);  // for the sequential run
    Tensor c1, c2;
    wait_both();
    const Timing seq = time_calls(
        [&] {
          c1 = matmul(a1, b1);
          c2 = matmul(a2_first, b2_first);
        },
        wait_both, ctx.target_s(), ctx.reps());
    const Timing par = time_calls(
        [&] {
          if (streams) {
            {
              StreamGuard g(*s1);
              c1 = matmul(a1, b1);
            }
            StreamGuard g(*s2);
            c2 = matmul(a2, b2);
          } else {
            c1 = matmul(a1, b1);  // queued on `first`; the host goes on at once
            c2 = matmul(a2, b2);
          }
        },
        wait_both, ctx.target_s(), ctx.reps());
    const double scaling = seq.median / par.median;
    std::cout << fmt::format("{:>5} {:>12} {:>12} {:>8.2f}\n", n, format_seconds(seq.median),
                             format_seconds(par.median), scaling)
              << std::flush;
    ctx.report.rows.push_back({{"exercise", "parallel"},
                               {"mode", mode},
                               {"devices", {first.str(), second.str()}},
                               {"n", n},
                               {"sequential_seconds", seq.median},
                               {"parallel_seconds", par.median},
                               {"scaling", scaling}});
    names.push_back(fmt::format("n = {}", n));
    group.values.push_back(scaling);
  }
  bar_chart(ctx.chart("parallel"),
            fmt::format("Exercise 4: two matmuls at once ({}): sequential / parallel time", mode),
            "scaling", names, {group});
}

}  // namespace tessera::tools::bench
