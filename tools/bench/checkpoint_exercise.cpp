// Exercise 2: reading and writing model parameters on the GPU, through the checkpoint
// format, against the raw pinned-copy bandwidth (on the CPU: against read(2) of the file).
#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <iostream>
#include <system_error>
#include <utility>
#include <vector>

#include "bench/charts.h"
#include "bench/exercises.h"
#include "tessera/tessera.h"
#include "timing.h"  // bench/timing.h

namespace tessera::tools::bench {

void run_checkpoint(Context& ctx) {
  const Device dev = try_gpu();
  std::cout << fmt::format("\n== 2. checkpoint: a 100 MB model saved from and loaded onto {}\n",
                           dev.str());
  // Six 2048 x 2048 layers with bias: 100,712,448 bytes of float32 parameters.
  manual_seed(0);
  nn::Sequential model;
  for (int i = 0; i < 6; ++i) model.push_back(nn::Linear(2048, 2048, true, dev));
  std::size_t bytes = 0;
  for (const Tensor& p : model.parameters()) bytes += p.nbytes();
  const std::filesystem::path path =
      ctx.temp_dir / fmt::format("tessera_bench_{}.safetensors", ::getpid());
  struct Remove {
    std::filesystem::path p;
    ~Remove() {
      std::error_code ec;
      std::filesystem::remove(p, ec);
    }
  } remove{path};

  AllowSync deliberate;  // saving reads the parameters to the host: that is the point
  // One call at a time: each saves or loads 100 MB, far above the timer's resolution.
  const Timing save = time_runs([&] { nn::save_checkpoint(model, path); }, ctx.reps());
  const Timing load = time_runs(
      [&] {
        nn::load_checkpoint(model, path);
        synchronize(dev);
      },
      ctx.reps());
  struct Item {
    const char* what;
    Timing t;
  };
  std::vector<Item> items{{"save", save}, {"load", load}};
  if (dev.is_cuda()) {
    // The same bytes as one tensor between page-locked host memory and the GPU.
    const std::int64_t n = static_cast<std::int64_t>(bytes / 4);
    const Tensor host = zeros({n}).pin_memory();
    Tensor on_gpu = zeros({n}, dev);
    items.push_back({"raw_h2d_pinned", time_calls([&] { on_gpu.copy_(host); },
                                                  [&] { synchronize(dev); }, 0.05, ctx.reps())});
    Tensor back = host;  // pinned; the copy below writes it
    items.push_back({"raw_d2h_pinned", time_calls([&] { back.copy_(on_gpu); },
                                                  [&] { synchronize(dev); }, 0.05, ctx.reps())});
  } else {
    ctx.report.note(
        "checkpoint: no GPU, so the model lives on the CPU; load is compared with "
        "raw_read, read(2) of the same file from the page cache");
    // The floor under a load from the page cache: read(2) of the whole file into a buffer
    // already touched, one call (as many as it takes). Timed interleaved with the loads so
    // that a busy machine slows both alike; the load's row above is replaced by these runs.
    std::vector<char> buffer(std::filesystem::file_size(path));
    const auto read_file = [&] {
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) throw IOError("checkpoint exercise: cannot open " + path.string());
      std::size_t done = 0;
      while (done < buffer.size()) {
        const ssize_t n = ::read(fd, buffer.data() + done, buffer.size() - done);
        if (n <= 0) break;
        done += static_cast<std::size_t>(n);
      }
      ::close(fd);
    };
    const auto load_file = [&] { nn::load_checkpoint(model, path); };
    const auto load_tensors = [&] { (void)load_safetensors(path, dev); };
    std::vector<double> loads, reads, tensors;
    const int reps = std::max(ctx.reps(), 7);
    load_file(), read_file(), load_tensors();  // warm-up: the page cache and the caches
    // One run each, interleaved (Note [Timing]: no warm-up here, it came above; no device wait).
    const auto time_one = [](const std::function<void()>& run, std::vector<double>& times) {
      times.push_back(::tessera::bench::time_calls(0, 1, 1, run, [] {}).median);
    };
    for (int r = 0; r < reps; ++r) {
      time_one(load_file, loads);
      time_one(read_file, reads);
      time_one(load_tensors, tensors);
    }
    const auto timing = [](std::vector<double> v) {
      const ::tessera::bench::Timing t = ::tessera::bench::summarize(std::move(v), 1);
      return Timing{t.median, t.min, 1};
    };
    items[1].t = timing(loads);
    items.push_back({"load_safetensors", timing(tensors)});
    items.push_back({"raw_read", timing(reads)});
    std::cout << fmt::format(
        "load_checkpoint / read(2) time: {:.2f} (median of {} interleaved runs)\n",
        items[1].t.median / items.back().t.median, reps);
  }
  std::cout << fmt::format("{:<16} {:>12} {:>12} {:>10}\n", "what", "bytes", "time", "GB/s");
  BarGroup group{dev.str(), {}};
  std::vector<std::string> names;
  for (const Item& it : items) {
    const double gbps = static_cast<double>(bytes) / it.t.median / 1e9;
    std::cout << fmt::format("{:<16} {:>12} {:>12} {:>10.2f}\n", it.what, bytes,
                             format_seconds(it.t.median), gbps);
    ctx.report.rows.push_back({{"exercise", "checkpoint"},
                               {"device", dev.str()},
                               {"what", it.what},
                               {"bytes", bytes},
                               {"seconds", it.t.median},
                               {"min_seconds", it.t.min},
                               {"gbps", gbps}});
    names.push_back(it.what);
    group.values.push_back(gbps);
  }
  bar_chart(ctx.chart("checkpoint"),
            "Exercise 2: 100 MB of parameters through a safetensors checkpoint", "GB/s", names,
            {group});
}

}  // namespace tessera::tools::bench
