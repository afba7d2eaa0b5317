#include "bench_command.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "bench/exercises.h"
#include "cli_checks.h"
#include "tessera/tessera.h"

namespace tessera::tools {
namespace {

using bench::Context;

const std::vector<std::string> kExercises{"matmul", "checkpoint", "norm_log", "parallel"};

struct BenchOptions {
  std::vector<std::string> exercises;
  std::string out_dir = "bench-results";
  // Empty: the system's temporary directory, looked up when the checkpoint exercise needs it
  // (looked up here, a TMPDIR naming no directory aborted every command of the tool).
  std::string temp_dir;
  std::string chart_format = "svg";
  bool quick = false;
  int max_n_cpu = 4096;
};

void describe_devices(Context& ctx) {
  for (const Device d : bench::bench_devices()) {
    const DeviceProperties info = device_properties(d);
    ctx.report.devices.push_back({{"device", d.str()}, {"name", info.name}});
    std::cout << fmt::format("{:<8} {}\n", d.str(), info.name);
  }
  if (num_gpus() == 0) ctx.report.note("no GPU: " + gpu_unavailable_reason());
}

int run(const BenchOptions& o) {
  Context ctx;
  ctx.quick = o.quick;
  ctx.max_n_cpu = o.max_n_cpu;
  ctx.out_dir = o.out_dir;
  ctx.temp_dir = o.temp_dir;
  if (ctx.temp_dir.empty()) {
    std::error_code missing;
    ctx.temp_dir = std::filesystem::temp_directory_path(missing);
    // A TMPDIR that is no directory: kept, so that the checkpoint exercise fails naming it.
    if (missing) {
      const char* tmp = std::getenv("TMPDIR");
      ctx.temp_dir = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
    }
  }
  ctx.chart_ext = "." + o.chart_format;
  std::error_code ec;
  std::filesystem::create_directories(ctx.out_dir, ec);
  if (ec) {
    throw IOError(
        fmt::format("[bench] cannot create the output directory '{}': {}; choose "
                    "another with --out-dir",
                    ctx.out_dir.string(), ec.message()));
  }
  // Before the first exercise: a directory that exists but cannot be written failed only
  // after one had run, and stopped the others.
  if (::access(ctx.out_dir.c_str(), W_OK | X_OK) != 0) {
    throw IOError(
        fmt::format("[bench] cannot write in the output directory '{}': {}; choose "
                    "another with --out-dir",
                    ctx.out_dir.string(), std::strerror(errno)));
  }
  std::cout << fmt::format(
      "tessera {} bench: {}\n", kVersion,
      o.exercises.empty() ? "all four exercises" : fmt::format("{}", fmt::join(o.exercises, ", ")));
  describe_devices(ctx);
  const auto wanted = [&](const std::string& e) {
    return o.exercises.empty() ||
           std::find(o.exercises.begin(), o.exercises.end(), e) != o.exercises.end();
  };
  const std::filesystem::path json = ctx.out_dir / "tessera_exercises.json";
  const std::filesystem::path csv = ctx.out_dir / "tessera_exercises.csv";
  using Run = void (*)(Context&);
  const std::pair<const char*, Run> exercises[] = {{"matmul", bench::run_matmul},
                                                   {"checkpoint", bench::run_checkpoint},
                                                   {"norm_log", bench::run_norm_log},
                                                   {"parallel", bench::run_parallel}};
  const auto started = std::filesystem::file_time_type::clock::now();
  std::vector<std::string> charts;  // the ones this run drew (a failed or skipped one: none)
  for (const auto& [name, fn] : exercises) {
    if (!wanted(name)) continue;
    try {
      fn(ctx);
    } catch (const Error& e) {  // one exercise failing leaves the others' numbers
      std::cout.flush();
      std::cerr << fmt::format("tessera bench: FAIL: {}: {}\n", name, e.what());
      ++ctx.report.failures;
    }
    std::error_code ec;
    const std::filesystem::path chart = ctx.chart(name);
    if (std::filesystem::exists(chart, ec) &&
        std::filesystem::last_write_time(chart, ec) >= started) {
      charts.push_back(chart.filename().string());
    }
    ctx.report.write_json(json);  // after each, so an interrupted run keeps what it has
  }
  ctx.report.write_csv(csv);
  std::cout << fmt::format(
      "\nwrote {}, {}{} in {}\n", json.filename().string(), csv.filename().string(),
      charts.empty() ? std::string(" (no chart)") : fmt::format(" and {}", fmt::join(charts, ", ")),
      ctx.out_dir.string());
  return ctx.report.failures == 0 ? 0 : 1;
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "The four exercises of the book's GPU section as benchmarks, on the CPU and every GPU: "
      "matmul (big vs small work), checkpoint (model parameters to and from the GPU), "
      "norm_log (logging a norm per step on the host vs on the device vs a graph), parallel "
      "(two matmuls on two devices at once). Prints tables; writes JSON, CSV and charts");
  cmd->add_option("exercises", o->exercises, "which to run (default: all)")
      ->check(CLI::IsMember(kExercises));
  cmd->add_option("--out-dir", o->out_dir, "where the JSON, CSV and charts go")
      ->capture_default_str();
  cmd->add_option("--temp-dir", o->temp_dir,
                  "where the checkpoint exercise writes its file (default: $TMPDIR, else /tmp)");
  cmd->add_option("--chart-format", o->chart_format, "svg or png")
      ->check(CLI::IsMember({"svg", "png"}))
      ->capture_default_str();
  cmd->add_flag("--quick", o->quick, "fewer repetitions and smaller sizes");
  cmd->add_option("--max-n-cpu", o->max_n_cpu, "largest matmul size on the CPU")
      ->transform(cli::whole_number_in(16, 16384))
      ->capture_default_str();
  cmd->callback([o] {
    const int status = run(*o);
    if (status != 0) throw CLI::RuntimeError(status);
  });
}

}  // namespace tessera::tools
