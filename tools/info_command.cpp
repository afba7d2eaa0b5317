#include "info_command.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "blas_info.h"
#include "cli_checks.h"
#include "tessera/tessera.h"

namespace tessera::tools {
namespace {

struct InfoOptions {
  int cpu_devices = -1;  // -1: leave it to TESSERA_CPU_DEVICES
};

std::string limit_text(std::size_t limit) {
  return limit == SIZE_MAX ? "none" : format_bytes(limit);
}

// One row per device: what tessera's tensors hold there now (in use), at most (peak), what
// its allocator keeps (reserved), and the cap set by set_memory_limit.
void print_memory_table(const std::vector<Device>& devices) {
  constexpr const char* kRule = "+----------+------------+------------+------------+------------+";
  fmt::print("{}\n| {:<8} | {:>10} | {:>10} | {:>10} | {:>10} |\n{}\n", kRule, "device", "in use",
             "peak", "reserved", "limit", kRule);
  for (Device d : devices) {
    const MemoryStats s = memory_stats(d);
    fmt::print("| {:<8} | {:>10} | {:>10} | {:>10} | {:>10} |\n", d.str(), format_bytes(s.in_use),
               format_bytes(s.peak), format_bytes(s.reserved), limit_text(s.limit));
  }
  fmt::print("{}\n", kRule);
}

void print_cpu() {
  const DeviceProperties info = device_properties(cpu());
  fmt::print("CPU\n");
  fmt::print("  model:   {}\n", info.name);
  fmt::print("  cores:   {}\n", info.cores);
  fmt::print("  memory:  {} total\n", format_bytes(info.total_memory));
  fmt::print("  BLAS:    {}\n", describe_blas());
  fmt::print("  kernels: built for {}\n", info.kernel_isa);

  std::vector<Device> cpus;
  for (int i = 0; i < num_cpu_devices(); ++i) cpus.push_back(cpu(i));
  if (has_logical_cpu_devices()) {
    fmt::print("  logical CPU devices: {} configured\n", cpus.size());
    for (int i = 0; i < static_cast<int>(cpus.size()); ++i) {
      fmt::print("    {:<7} {}\n", cpus[i].str(), device_properties(cpus[i]).details);
    }
  } else {
    fmt::print(
        "  logical CPU devices: none (the CPU is one device, cpu; set "
        "TESSERA_CPU_DEVICES=N or pass --cpu-devices N to split it)\n");
  }
  print_memory_table(cpus);
}

// Splits `text` into its non-empty lines.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    if (end > start) lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// One block per GPU: index, name, multiprocessors, memory, then the backend's details as it
// gives them (PCI bus id, UUID, compute capability, driver and runtime versions) and its
// memory report (the driver's free/total). All of it comes through device_properties(); the
// tool never calls CUDA itself.
void print_gpus() {
  const int n = num_gpus();
  fmt::print("\nGPUs\n  num_gpus(): {}\n", n);
  if (n == 0) {
    fmt::print("  why none:   {}\n", gpu_unavailable_reason());
    return;
  }
  std::vector<Device> gpus;
  for (int i = 0; i < n; ++i) {
    const Device d = gpu(i);
    const DeviceProperties info = device_properties(d);
    const MemoryStats s = memory_stats(d);
    fmt::print("  {:<7} {}, {} memory, {} multiprocessors\n", d.str(), info.name,
               format_bytes(info.total_memory), info.cores);
    fmt::print("          memory:  {} used by tessera of {} total ({} in tensors)\n",
               format_bytes(s.reserved), format_bytes(info.total_memory), format_bytes(s.in_use));
    for (const std::string& line : lines_of(info.details)) fmt::print("          {}\n", line);
    for (const std::string& line : lines_of(info.memory_report)) {
      fmt::print("          memory report: {}\n", line);
    }
    gpus.push_back(d);
  }
  print_memory_table(gpus);
}

int run_info(const InfoOptions& options) {
  if (options.cpu_devices >= 0) {
    // Exactly as TESSERA_CPU_DEVICES=N: the library then reads TESSERA_CPU_THREADS and
    // TESSERA_CPU_ASYNC with its own checks (options of our own ignored the first and took
    // any value but "0" of the second as on).
    setenv("TESSERA_CPU_DEVICES", std::to_string(options.cpu_devices).c_str(), 1);
  }
  fmt::print("tessera {}\n\n", kVersion);
  print_cpu();
  print_gpus();
  return 0;
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto options = std::make_shared<InfoOptions>();
  CLI::App* info = app.add_subcommand(
      "info",
      "List the devices tessera can use (CPU model, cores, memory, BLAS, logical CPU "
      "devices, GPUs) and the memory tessera holds on each");
  info->add_option("--cpu-devices", options->cpu_devices,
                   "Split the CPU into N logical devices first (like TESSERA_CPU_DEVICES=N)")
      ->transform(cli::whole_number_in(0, 64));
  info->callback([options] { run_info(*options); });
}

}  // namespace tessera::tools
