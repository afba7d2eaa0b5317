// gpu_bench: tessera on one GPU, next to raw CUDA runtime references, for scripts/gpu-check.
//
//   gpu_bench [--out FILE.json] [--quick] [--device DEV] [--only SECTION,...]
//             [--profile-step mlp|lenet]
//
// --device picks another device than cuda:0 (e.g. cpu, to try the program without a GPU: the
// raw CUDA references and pinned copies then fail and are reported as errors). --only runs
// some sections: small_add, issue, matmul, copies, raw_copies, raw_d2d, bandwidth, train,
// autocast, optim. --profile-step runs only that model's recorded step (train.*.graph, one
// epoch) and replays it once more between cudaProfilerStart and cudaProfilerStop, for
// `ncu --profile-from-start off` (scripts/gpu-check --profile).
// Plain C++, no Google Benchmark, timed as every benchmark is (Note [Timing] in bench/timing.h:
// time_calls): warm-up ops first, then `reps` timed repetitions of `inner` ops back to back,
// each repetition ending with a wait for the device (tessera::synchronize, or
// cudaDeviceSynchronize for the raw references); the figure is the median over repetitions of
// (repetition time / inner). bench/peers/pytorch_gpu.py measures PyTorch the same way, with the
// same sizes, repetitions and input distributions, and bench/gpu/summarize.py puts the two
// side by side.
//
// Measurements (keys of "results" in the JSON):
//   matmul.fp32.N, matmul.tf32.N  square float32 matmul, N = 256 ... 8192, TFLOP/s (2 N^3 per
//                                 op); for N <= 1024 also the relative error against a float64
//                                 product on the CPU (rel_err)
//   matmul.bf16.N                 the same with bfloat16 operands and result
//   copy.{h2d,d2h}.{pinned,pageable}  256 MiB between a CPU tensor and a GPU tensor (copy_),
//                                 GB/s; pinned = Tensor::pin_memory()
//   copy.d2d                      1 GiB GPU -> GPU (copy_), GB/s counting bytes read + written
//   add.large                     a + b on 256 Mi float32 (output allocated per op), GB/s
//                                 counting 3 x 1 GiB
//   add.small, add.small.sync     a + b on 2x3 float32: host time to issue one op (the per-op
//                                 overhead), and the time per op including the final wait, us
//   train.mlp, train.lenet         one training epoch (forward, cross-entropy, backward, SGD)
//                                 over 60,000 synthetic 28x28 images resident on the GPU,
//                                 batch 256, loss summed on the device and read once: the
//                                 book's MLP 784-256-10 and LeNet-5, s/epoch
//   train.{mlp,lenet}.bf16        the same under bfloat16 autocast
//   train.{mlp,lenet}.graph       the same with each full batch's step replayed from a graph
//   train.{mlp,lenet}.graph.nodes the operations (kernels, copies) in that graph
//   train.{mlp,lenet}.graph.replay one replay of that graph alone (no input copies), us
//   train.mlp.loader              the MLP fed by the DataLoader from host memory
//   step.mlp4096.{fp32,bf16}      one training step of an MLP 4096-4096-4096-10, batch 512,
//                                 float32 and under bfloat16 autocast, ms
//   optim.{sgd_momentum,adam}     one optimizer step over the MLP's 203,530 parameters,
//                                 gradients in place, us
//   raw.{h2d,d2h}.{pinned,pageable}, raw.d2d  the same copies with cudaMemcpy on
//                                 cudaMallocHost / malloc / cudaMalloc buffers (the peaks)
// Exit status: 0 when every section ran and every check passed, 1 otherwise (the JSON is
// written either way), 2 when tessera sees no GPU.
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/tessera.h"
#include "timing.h"
#if __has_include("tessera/settings.h")
#include "tessera/settings.h"
#define TESSERA_GPU_BENCH_HAS_TF32 1
#else
#define TESSERA_GPU_BENCH_HAS_TF32 0
#endif

namespace {

using tessera::Device;
using tessera::Tensor;
using tessera::bench::Clock;
using tessera::bench::seconds_since;
using tessera::bench::time_calls;
using tessera::bench::Timing;

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
  }
}
#define CHECK_CUDA(call) cuda_check((call), #call)

// ---- results ----
struct Result {
  double value = 0;
  std::string unit;
  double seconds = 0;  // median seconds per op
  double min_seconds = 0;
  double max_seconds = 0;
  int reps = 0;
  int inner = 0;
  double bytes = 0;  // bytes per op counted for bandwidth figures
  double rel_err = -1;
  bool checked = false;
  bool ok = true;
};

struct Report {
  std::map<std::string, Result> results;
  std::vector<std::string> errors;
  std::vector<std::string> notes;
};

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

std::string num(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

void write_json(const Report& r, const std::string& path, const std::string& device_name,
                bool quick) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "gpu_bench: cannot write %s\n", path.c_str());
    return;
  }
  std::fprintf(f, "{\n  \"impl\": \"tessera\",\n  \"version\": \"%s\",\n", tessera::kVersion);
  std::fprintf(f, "  \"device\": \"%s\",\n  \"quick\": %s,\n", json_escape(device_name).c_str(),
               quick ? "true" : "false");
  std::fprintf(f,
               "  \"timing\": \"median over reps of (rep time / inner); host clock, "
               "synchronize before reading it\",\n");
  std::fprintf(f, "  \"results\": {");
  bool first = true;
  for (const auto& [key, x] : r.results) {
    std::fprintf(f,
                 "%s\n    \"%s\": {\"value\": %s, \"unit\": \"%s\", \"seconds\": %s, "
                 "\"min_seconds\": %s, \"max_seconds\": %s, \"reps\": %d, \"inner\": %d",
                 first ? "" : ",", json_escape(key).c_str(), num(x.value).c_str(), x.unit.c_str(),
                 num(x.seconds).c_str(), num(x.min_seconds).c_str(), num(x.max_seconds).c_str(),
                 x.reps, x.inner);
    if (x.bytes > 0) std::fprintf(f, ", \"bytes\": %s", num(x.bytes).c_str());
    if (x.checked) {
      std::fprintf(f, ", \"rel_err\": %s, \"ok\": %s", num(x.rel_err).c_str(),
                   x.ok ? "true" : "false");
    }
    std::fprintf(f, "}");
    first = false;
  }
  std::fprintf(f, "\n  },\n  \"errors\": [");
  for (std::size_t i = 0; i < r.errors.size(); ++i) {
    std::fprintf(f, "%s\"%s\"", i ? ", " : "", json_escape(r.errors[i]).c_str());
  }
  std::fprintf(f, "],\n  \"notes\": [");
  for (std::size_t i = 0; i < r.notes.size(); ++i) {
    std::fprintf(f, "%s\"%s\"", i ? ", " : "", json_escape(r.notes[i]).c_str());
  }
  std::fprintf(f, "]\n}\n");
  std::fclose(f);
}

// ---- timing: Note [Timing] (time_calls) ----
Result make_result(const Timing& t, double value, const char* unit, double bytes = 0) {
  Result r;
  r.value = value;
  r.unit = unit;
  r.seconds = t.median;
  r.min_seconds = t.min;
  r.max_seconds = t.max;
  r.reps = t.reps;
  r.inner = t.inner;
  r.bytes = bytes;
  return r;
}

void print_result(const std::string& key, const Result& r) {
  std::printf("%-22s %10.3f %-8s (median %.3g s/op over %d x %d", key.c_str(), r.value,
              r.unit.c_str(), r.seconds, r.reps, r.inner);
  if (r.checked) std::printf(", rel_err %.2e%s", r.rel_err, r.ok ? "" : " FAILED");
  std::printf(")\n");
  std::fflush(stdout);
}

void record(Report& report, const std::string& key, Result r) {
  print_result(key, r);
  report.results[key] = std::move(r);
}

// Runs one section, turning an exception into a recorded error so the others still run.
void section(Report& report, const char* name, const std::function<void()>& f) {
  std::printf("-- %s\n", name);
  std::fflush(stdout);
  try {
    f();
  } catch (const std::exception& e) {
    std::printf("   ERROR in %s: %s\n", name, e.what());
    report.errors.push_back(std::string(name) + ": " + e.what());
  }
}

// ---- matmul ----
struct MatmulPlan {
  std::int64_t n;
  int inner, reps;
};

// ||out - ref|| / ||ref|| with ref a float64 product on the CPU.
double matmul_rel_err(const Tensor& a, const Tensor& b, const Tensor& out) {
  const Device host = tessera::cpu();
  const Tensor ref = tessera::matmul(a.to(host, tessera::kFloat64), b.to(host, tessera::kFloat64));
  const std::vector<double> want = ref.to_vector<double>();
  const std::vector<double> got = out.to_vector<double>();
  double num2 = 0, den2 = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = got[i] - want[i];
    num2 += d * d;
    den2 += want[i] * want[i];
  }
  if (std::isnan(num2)) return NAN;
  return std::sqrt(num2 / den2);
}

void bench_matmul(Report& report, Device dev, bool quick) {
  std::vector<MatmulPlan> plans = {{256, 100, 15}, {512, 50, 15}, {1024, 20, 11},
                                   {2048, 5, 11},  {4096, 2, 9},  {8192, 1, 7}};
  if (quick) plans = {{256, 20, 5}, {1024, 5, 5}};
  for (const MatmulPlan& p : plans) {
    // Inputs drawn on the CPU (standard normal, never zeros) and copied over.
    tessera::manual_seed(static_cast<std::uint64_t>(p.n));
    const Tensor a = tessera::randn({p.n, p.n}).to(dev);
    const Tensor b = tessera::randn({p.n, p.n}).to(dev);
    const double flops = 2.0 * static_cast<double>(p.n) * p.n * p.n;
    // float32, TF32 (float32 operands, TF32 tensor cores) and bfloat16 operands (float32
    // accumulation, bfloat16 result).
    const Tensor a16 = a.to(tessera::kBFloat16), b16 = b.to(tessera::kBFloat16);
    for (const std::string mode : {"fp32", "tf32", "bf16"}) {
      const bool tf32 = mode == "tf32", bf16 = mode == "bf16";
#if TESSERA_GPU_BENCH_HAS_TF32
      tessera::set_matmul_allow_tf32(tf32);
#else
      if (tf32) {
        report.notes.push_back("no tessera/settings.h: TF32 rows not measured");
        continue;
      }
#endif
      const std::string key = "matmul." + mode + "." + std::to_string(p.n);
      const Tensor& x = bf16 ? a16 : a;
      const Tensor& w = bf16 ? b16 : b;
      Tensor c;
      const Timing t = time_calls(
          2, p.reps, p.inner, [&] { c = tessera::matmul(x, w); },
          [&] { tessera::synchronize(dev); });
      Result r = make_result(t, flops / t.median / 1e12, "TFLOP/s");
      if (p.n <= 1024) {
        r.checked = true;
        r.rel_err = matmul_rel_err(x, w, c);
        // float32 lands far under 1e-3 (K <= 1024: ~1e-6); TF32 near 3e-4; a bfloat16
        // result carries its own rounding (2^-9) on top of exact products of its operands.
        const double bound = bf16 ? 1e-2 : tf32 ? 5e-3 : 1e-4;
        r.ok = std::isfinite(r.rel_err) && r.rel_err < bound;
        if (!r.ok) report.errors.push_back(key + ": relative error " + num(r.rel_err));
      }
      record(report, key, r);
    }
  }
#if TESSERA_GPU_BENCH_HAS_TF32
  tessera::set_matmul_allow_tf32(false);
#endif
  tessera::empty_cache(dev);
}

// ---- host <-> device copies ----
constexpr std::int64_t kCopyElems = std::int64_t{64} << 20;  // 256 MiB of float32
constexpr double kCopyBytes = static_cast<double>(kCopyElems) * sizeof(float);

void bench_copies(Report& report, Device dev, bool quick) {
  const int reps = quick ? 5 : 11;
  const Tensor pageable = tessera::rand({kCopyElems});
  Tensor on_gpu = tessera::empty({kCopyElems}, dev);
  const auto wait = [] { tessera::synchronize(); };
  for (const bool is_pinned : {false, true}) {
    const Tensor host = is_pinned ? pageable.pin_memory() : pageable;
    if (is_pinned && !host.is_pinned()) {
      report.errors.push_back("pin_memory() returned an unpinned tensor");
    }
    const std::string kind = is_pinned ? "pinned" : "pageable";
    Timing t = time_calls(
        2, reps, 1, [&] { on_gpu.copy_(host); }, wait);
    record(report, "copy.h2d." + kind,
           make_result(t, kCopyBytes / t.median / 1e9, "GB/s", kCopyBytes));
    Tensor back = tessera::empty({kCopyElems});
    if (is_pinned) back = back.pin_memory();
    t = time_calls(
        2, reps, 1, [&] { back.copy_(on_gpu); }, wait);
    record(report, "copy.d2h." + kind,
           make_result(t, kCopyBytes / t.median / 1e9, "GB/s", kCopyBytes));
    // The round trip must give back what went in (a sample: the first and last 64 Ki).
    for (const std::int64_t start : {std::int64_t{0}, kCopyElems - (64 << 10)}) {
      const std::vector<float> x = host.narrow(0, start, 64 << 10).to_vector<float>();
      const std::vector<float> y = back.narrow(0, start, 64 << 10).to_vector<float>();
      if (x != y) report.errors.push_back("copy round trip (" + kind + ") changed the data");
    }
  }
  tessera::empty_cache(dev);
}

void bench_raw_copies(Report& report, bool quick) {
  const int reps = quick ? 5 : 11;
  const auto bytes = static_cast<std::size_t>(kCopyBytes);
  const auto wait = [] { CHECK_CUDA(cudaDeviceSynchronize()); };
  void* d = nullptr;
  void* pinned = nullptr;
  CHECK_CUDA(cudaMalloc(&d, bytes));
  CHECK_CUDA(cudaMallocHost(&pinned, bytes));
  std::vector<float> pageable(static_cast<std::size_t>(kCopyElems), 1.5f);
  std::memset(pinned, 0x3f, bytes);
  try {
    for (const bool is_pinned : {true, false}) {
      void* h = is_pinned ? pinned : static_cast<void*>(pageable.data());
      const std::string kind = is_pinned ? "pinned" : "pageable";
      Timing t = time_calls(
          2, reps, 1, [&] { CHECK_CUDA(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice)); }, wait);
      record(report, "raw.h2d." + kind,
             make_result(t, kCopyBytes / t.median / 1e9, "GB/s", kCopyBytes));
      t = time_calls(
          2, reps, 1, [&] { CHECK_CUDA(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost)); }, wait);
      record(report, "raw.d2h." + kind,
             make_result(t, kCopyBytes / t.median / 1e9, "GB/s", kCopyBytes));
    }
  } catch (...) {
    cudaFree(d);
    cudaFreeHost(pinned);
    throw;
  }
  CHECK_CUDA(cudaFree(d));
  CHECK_CUDA(cudaFreeHost(pinned));
}

// ---- device bandwidth: device-to-device copies and a large add ----
constexpr std::int64_t kLargeElems = std::int64_t{256} << 20;  // 256 Mi float32 = 1 GiB
constexpr double kLargeBytes = static_cast<double>(kLargeElems) * sizeof(float);

void bench_raw_d2d(Report& report, bool quick) {
  const auto bytes = static_cast<std::size_t>(kLargeBytes);
  void* src = nullptr;
  void* dst = nullptr;
  CHECK_CUDA(cudaMalloc(&src, bytes));
  CHECK_CUDA(cudaMalloc(&dst, bytes));
  try {
    CHECK_CUDA(cudaMemset(src, 0x3f, bytes));
    const Timing t = time_calls(
        3, quick ? 5 : 11, 10,
        [&] { CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, nullptr)); },
        [] { CHECK_CUDA(cudaDeviceSynchronize()); });
    record(report, "raw.d2d",
           make_result(t, 2 * kLargeBytes / t.median / 1e9, "GB/s", 2 * kLargeBytes));
  } catch (...) {
    cudaFree(src);
    cudaFree(dst);
    throw;
  }
  CHECK_CUDA(cudaFree(src));
  CHECK_CUDA(cudaFree(dst));
}

void bench_device_bandwidth(Report& report, Device dev, bool quick) {
  const int reps = quick ? 5 : 11;
  const auto wait = [dev] { tessera::synchronize(dev); };
  tessera::manual_seed(1);
  const Tensor a = tessera::rand({kLargeElems}, dev);
  const Tensor b = tessera::rand({kLargeElems}, dev);
  {
    Tensor dst = tessera::empty({kLargeElems}, dev);
    const Timing t = time_calls(
        3, reps, 10, [&] { dst.copy_(a); }, wait);
    record(report, "copy.d2d",
           make_result(t, 2 * kLargeBytes / t.median / 1e9, "GB/s", 2 * kLargeBytes));
  }
  Tensor c;
  const Timing t = time_calls(
      3, reps, 10, [&] { c = a + b; }, wait);
  Result r = make_result(t, 3 * kLargeBytes / t.median / 1e9, "GB/s", 3 * kLargeBytes);
  // Check a sample of the sum on the host.
  r.checked = true;
  r.rel_err = 0;
  for (const std::int64_t start : {std::int64_t{0}, kLargeElems - 4096}) {
    const std::vector<float> x = a.narrow(0, start, 4096).to_vector<float>();
    const std::vector<float> y = b.narrow(0, start, 4096).to_vector<float>();
    const std::vector<float> z = c.narrow(0, start, 4096).to_vector<float>();
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double want = static_cast<double>(x[i] + y[i]);
      r.rel_err = std::max(r.rel_err, std::abs(z[i] - want) / std::max(1e-30, std::abs(want)));
    }
  }
  r.ok = r.rel_err == 0;
  if (!r.ok) report.errors.push_back("add.large: wrong sum, max rel err " + num(r.rel_err));
  record(report, "add.large", r);
  c = Tensor();
  tessera::empty_cache(dev);
}

// ---- per-op overhead ----
void bench_small_add(Report& report, Device dev, bool quick) {
  const Tensor a = tessera::rand({2, 3}).to(dev);
  const Tensor b = tessera::rand({2, 3}).to(dev);
  constexpr int kInner = 200;  // well under the launch queue's depth: issuing never blocks
  const int reps = quick ? 7 : 31;
  Tensor c;
  Timing ti;  // the host's time to issue one op, before the wait
  const Timing tt = time_calls(
      2000, reps, kInner, [&] { c = a + b; }, [&] { tessera::synchronize(dev); }, &ti);
  record(report, "add.small", make_result(ti, ti.median * 1e6, "us"));
  record(report, "add.small.sync", make_result(tt, tt.median * 1e6, "us"));
  const std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>(),
                           z = c.to_vector<float>();
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (z[i] != x[i] + y[i]) {
      report.errors.push_back("add.small: wrong sum");
      break;
    }
  }
}

// Host time to issue one op (no wait inside the timed loop), us: where the seed's exercise 3
// spends its time per step (a 100x100 matmul, its norm, and the copy into the log).
void bench_issue_costs(Report& report, Device dev, bool quick) {
  const Tensor x = tessera::rand({100, 100}).to(dev), w = tessera::rand({100, 100}).to(dev);
  Tensor log = tessera::zeros({1000}, dev);
  const Tensor one = tessera::zeros({1}, dev);
  const std::pair<const char*, std::function<void()>> ops[] = {
      {"issue.matmul100", [&] { (void)tessera::matmul(x, w); }},
      {"issue.norm100", [&] { (void)tessera::norm(x); }},
      {"issue.copy1", [&] { log.narrow(0, 7, 1).copy_(one); }},
  };
  constexpr int kInner = 200;
  for (const auto& [name, op] : ops) {
    Timing t;  // issue time only: the clock is read before each repetition's wait
    time_calls(
        500, quick ? 7 : 21, kInner, op, [&] { tessera::synchronize(dev); }, &t);
    record(report, name, make_result(t, t.median * 1e6, "us"));
    // The same op recorded 1000 times in a graph: its device time plus the graph's per-node
    // cost, with no host cost at all.
    const tessera::Graph graph = tessera::Graph::capture(dev, [&] {
      for (int i = 0; i < 1000; ++i) op();
    });
    const auto wait = [&] { tessera::synchronize(dev); };
    const auto replay = [&] { graph.replay(); };
    const Timing g = time_calls(0, quick ? 5 : 11, 1, replay, wait).per_op(1000);
    record(report, std::string("graph.") + (name + 6), make_result(g, g.median * 1e6, "us"));
  }
}

}  // namespace

// ---- training epochs ----
// One epoch of the book's MLP or LeNet-5 over 60,000 synthetic images resident on the device,
// batch 256, SGD, the loss summed on the device and read once per epoch. `autocast`: under
// AutocastGuard(bfloat16); `graph`: every full batch copied into fixed inputs and the step
// replayed from a graph recorded once (after one eager step, which makes the grads), the
// short last batch run eagerly, as TrainerOptions::graph does.
struct EpochPlan {
  bool lenet = false;
  bool autocast = false;
  bool graph = false;
  // With graph: one replay between cudaProfilerStart and cudaProfilerStop, for a profiler
  // started with profiling off (`ncu --profile-from-start off`, scripts/gpu-check --profile).
  bool profile = false;
};

std::string epoch_key(const EpochPlan& p) {
  return std::string(p.lenet ? "train.lenet" : "train.mlp") + (p.autocast ? ".bf16" : "") +
         (p.graph ? ".graph" : "");
}

// Returns the last epoch's mean loss per step.
double bench_epoch(Report& report, Device dev, bool quick, const EpochPlan& plan) {
  namespace nn = tessera::nn;
  const std::int64_t n = 60000, batch = 256;
  const std::string key = epoch_key(plan);
  tessera::manual_seed(0);
  const Tensor x = plan.lenet ? tessera::rand({n, 1, 28, 28}, dev) : tessera::rand({n, 784}, dev);
  const Tensor y = (tessera::rand({n}, dev) * 10.0).to(tessera::kInt64);
  nn::Sequential net =
      plan.lenet ? nn::models::lenet(/*book=*/true, dev) : nn::models::mlp(256, dev);
  tessera::optim::SGD opt(net.parameters(), {.lr = 0.1});
  Tensor loss_sum = tessera::zeros({}, dev);
  const auto step = [&](const Tensor& xb, const Tensor& yb) {
    opt.zero_grad();
    Tensor loss;
    {
      const tessera::AutocastGuard autocast(dev.kind(), tessera::kBFloat16, plan.autocast);
      loss = nn::cross_entropy(net(xb), yb);
    }
    loss.backward();
    opt.step();
    loss_sum.add_(loss.detach());
  };
  // The graph's fixed inputs, and the graph (recorded after one eager step on them).
  std::optional<tessera::Graph> graph;
  Tensor x_in = tessera::empty(x.narrow(0, 0, batch).shape(), {x.dtype(), dev});
  Tensor y_in = tessera::empty({batch}, {y.dtype(), dev});
  if (plan.graph) {
    x_in.copy_(x.narrow(0, 0, batch));
    y_in.copy_(y.narrow(0, 0, batch));
    step(x_in, y_in);
    graph = tessera::Graph::capture(dev, [&] { step(x_in, y_in); });
    // What a replay launches: fewer nodes, less of the GPU's time between kernels.
    Result nodes;
    nodes.value = static_cast<double>(graph->node_count());
    nodes.unit = "nodes";
    record(report, key + ".nodes", nodes);
  }
  double last_loss = 0;
  const auto epoch = [&] {
    loss_sum.zero_();
    for (std::int64_t start = 0; start < n; start += batch) {
      const std::int64_t len = std::min(batch, n - start);
      if (graph && len == batch) {
        x_in.copy_(x.narrow(0, start, len));
        y_in.copy_(y.narrow(0, start, len));
        graph->replay();
      } else {
        step(x.narrow(0, start, len), y.narrow(0, start, len));
      }
    }
    last_loss = loss_sum.item<double>();  // the one read per epoch
  };
  const Timing t = time_calls(1, quick ? 1 : 3, 1, epoch, [&] { tessera::synchronize(dev); });
  Result r = make_result(t, t.median, "s/epoch");
  r.checked = true;
  r.rel_err = 0;
  // The mean loss of an epoch of 10 random classes starts near ln 10 and cannot pass it by
  // much: a replay that did not train, or trained on garbage, would show here.
  const double mean_loss = last_loss / static_cast<double>((n + batch - 1) / batch);
  r.ok = std::isfinite(mean_loss) && mean_loss > 1.0 && mean_loss < 3.0;
  if (!r.ok) report.errors.push_back(key + ": mean loss " + num(mean_loss) + " per step");
  record(report, key, r);
  if (graph) {
    // A replay alone, without the copies into the fixed inputs: one step's device time when
    // the host keeps ahead, beside the kernels' own durations under a profiler. After the
    // epochs, whose loss the caller compares with the eager ones: these replays train on.
    const auto replay = [&] { graph->replay(); };
    const auto wait = [&] { tessera::synchronize(dev); };
    const Timing rt = time_calls(3, quick ? 3 : 11, 50, replay, wait);
    record(report, key + ".replay", make_result(rt, rt.median * 1e6, "us"));
    if (plan.profile && dev.is_cuda()) {
      wait();
      CHECK_CUDA(cudaProfilerStart());
      graph->replay();
      wait();
      CHECK_CUDA(cudaProfilerStop());
    }
  }
  return mean_loss;
}

void bench_train(Report& report, Device dev, bool quick) {
  for (const bool lenet : {false, true}) {
    const double eager = bench_epoch(report, dev, quick, {lenet, false, false});
    bench_epoch(report, dev, quick, {lenet, true, false});
    // Replays run the eager step's kernels on the same values, so the same epochs end at the
    // same loss (up to the order of a sum, should a kernel choose another).
    const double replayed = bench_epoch(report, dev, quick, {lenet, false, true});
    if (!(std::abs(replayed - eager) <= 1e-4 * std::abs(eager))) {
      const std::string key = epoch_key({lenet, false, true});
      report.results[key].ok = false;
      report.errors.push_back(key + ": mean loss " + num(replayed) + ", eager " + num(eager));
    }
  }
  const std::int64_t n = 60000, batch = 256;
  namespace nn = tessera::nn;
  // The MLP again as `tessera train` feeds it: uint8 images in host memory, batches gathered
  // by the DataLoader into pinned memory and copied to the GPU every step (tessera only).
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(n) * 784);
  std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < pixels.size(); ++i)
    pixels[i] = static_cast<std::uint8_t>(i * 7 % 251);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i % 10);
  tessera::data::DataLoader loader(tessera::from_vector(pixels, {n, 784}),
                                   tessera::from_vector(labels, {n}), {.batch_size = batch});
  tessera::manual_seed(0);
  nn::Sequential net = nn::models::mlp(256, dev);
  tessera::optim::SGD opt(net.parameters(), {.lr = 0.1});
  double last_loss = 0;
  const auto epoch = [&] {
    Tensor loss_sum = tessera::zeros({}, dev);
    for (const tessera::data::Batch& b : loader) {
      opt.zero_grad();
      const Tensor loss = nn::cross_entropy(net(b.x.to(dev)), b.y.to(dev));
      loss.backward();
      opt.step();
      loss_sum.add_(loss.detach());
    }
    last_loss = loss_sum.item<double>();
  };
  const Timing t = time_calls(1, quick ? 1 : 3, 1, epoch, [&] { tessera::synchronize(dev); });
  Result r = make_result(t, t.median, "s/epoch");
  r.ok = std::isfinite(last_loss);
  if (!r.ok) report.errors.push_back("train.mlp.loader: the loss is not finite");
  record(report, "train.mlp.loader", r);
}

// ---- one optimizer step over the book MLP's parameters ----
// 784x256, 256, 256x10, 10 (203,530 float32) with gradients in place: SGD with momentum 0.9
// and Adam, one fused kernel per parameter (Note [Optimizer math]), us per step.
void bench_optimizer_steps(Report& report, Device dev, bool quick) {
  tessera::manual_seed(0);
  std::vector<Tensor> params;
  for (const tessera::Shape& s : {tessera::Shape{256, 784}, tessera::Shape{256},
                                  tessera::Shape{10, 256}, tessera::Shape{10}}) {
    Tensor p = tessera::randn(s).to(dev).requires_grad_();
    p.set_grad(tessera::randn(s).to(dev));
    params.push_back(p);
  }
  tessera::optim::SGD sgd(params, {.lr = 0.01, .momentum = 0.9});
  tessera::optim::Adam adam(params, {.lr = 1e-3});
  const int reps = quick ? 7 : 31;
  const std::pair<const char*, tessera::optim::Optimizer*> steps[] = {{"optim.sgd_momentum", &sgd},
                                                                      {"optim.adam", &adam}};
  for (const auto& [key, opt] : steps) {
    const std::vector<float> before = params[0].to_vector<float>();
    const Timing t = time_calls(
        20, reps, 100, [&] { opt->step(); }, [&] { tessera::synchronize(dev); });
    Result r = make_result(t, t.median * 1e6, "us");
    // Every step moved the weights, and nothing became NaN.
    const std::vector<float> after = params[0].to_vector<float>();
    r.ok = after.size() == before.size() && after != before &&
           std::all_of(after.begin(), after.end(), [](float v) { return std::isfinite(v); });
    if (!r.ok)
      report.errors.push_back(std::string(key) + ": the weights did not move or are not finite");
    record(report, key, r);
  }
}

// ---- a large MLP's training step, float32 against bfloat16 autocast ----
// MLP 4096-4096-4096-10 (Linear, ReLU, Linear, ReLU, Linear), batch 512, SGD lr 0.01: the
// step (zero_grad, forward and loss, backward, optimizer step), ms per step.
void bench_autocast_step(Report& report, Device dev, bool quick) {
  namespace nn = tessera::nn;
  constexpr std::int64_t kWidth = 4096, kBatch = 512;
  for (const bool bf16 : {false, true}) {
    tessera::manual_seed(3);
    const tessera::TensorOptions on(dev);
    nn::Sequential net(nn::Linear(kWidth, kWidth, true, on), nn::ReLU(),
                       nn::Linear(kWidth, kWidth, true, on), nn::ReLU(),
                       nn::Linear(kWidth, 10, true, on));
    tessera::optim::SGD opt(net.parameters(), {.lr = 0.01});
    const Tensor x = tessera::randn({kBatch, kWidth}, dev);
    const Tensor y = (tessera::rand({kBatch}, dev) * 10.0).to(tessera::kInt64);
    Tensor loss;
    const auto step = [&] {
      opt.zero_grad();
      {
        const tessera::AutocastGuard autocast(dev.kind(), tessera::kBFloat16, bf16);
        loss = nn::cross_entropy(net(x), y);
      }
      loss.backward();
      opt.step();
    };
    const Timing t =
        time_calls(3, quick ? 3 : 11, quick ? 2 : 10, step, [&] { tessera::synchronize(dev); });
    Result r = make_result(t, t.median * 1e3, "ms");
    r.checked = true;
    r.rel_err = 0;
    const double last = loss.item<double>();
    r.ok = std::isfinite(last);
    const std::string key = std::string("step.mlp4096.") + (bf16 ? "bf16" : "fp32");
    if (!r.ok) report.errors.push_back(key + ": the loss is not finite");
    record(report, key, r);
  }
  tessera::empty_cache(dev);
}

int main(int argc, char** argv) {
  std::string out_path;
  std::string device_text = "cuda:0";
  std::string only;          // ",matmul,train," when --only matmul,train
  std::string profile_step;  // "mlp" or "lenet": that recorded step alone, profiled
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--out" && i + 1 < argc) {
      out_path = argv[++i];
    } else if (arg == "--device" && i + 1 < argc) {
      device_text = argv[++i];
    } else if (arg == "--only" && i + 1 < argc) {
      only = "," + std::string(argv[++i]) + ",";
    } else if (arg == "--quick") {
      quick = true;
    } else if (arg == "--profile-step" && i + 1 < argc &&
               (std::strcmp(argv[i + 1], "mlp") == 0 || std::strcmp(argv[i + 1], "lenet") == 0)) {
      profile_step = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: gpu_bench [--out FILE.json] [--quick] [--device DEV] "
                   "[--only SECTION,...] [--profile-step mlp|lenet]\n");
      return 2;
    }
  }

  Report report;
  std::string device_name = "none";
  const Device dev = Device::parse(device_text);
  if (dev.is_cuda() && tessera::num_gpus() <= dev.index()) {
    std::printf("gpu_bench: tessera sees no GPU: %s\n", tessera::gpu_unavailable_reason().c_str());
    report.errors.push_back("no GPU: " + tessera::gpu_unavailable_reason());
    if (!out_path.empty()) write_json(report, out_path, device_name, quick);
    return 2;
  }
  cudaDeviceProp prop{};
  if (dev.is_cpu()) {
    device_name = "cpu";
  } else if (cudaGetDeviceProperties(&prop, dev.index()) == cudaSuccess) {
    device_name = prop.name;
  }
  std::printf("gpu_bench: tessera %s on %s (%s)%s\n", tessera::kVersion, dev.str().c_str(),
              device_name.c_str(), quick ? ", quick" : "");

  // Sections by short name, all of them unless --only names some.
  const auto run = [&](const char* id, const char* name, const std::function<void()>& f) {
    if (!profile_step.empty()) return;  // the profiled step alone
    if (only.empty() || only.find("," + std::string(id) + ",") != std::string::npos) {
      section(report, name, f);
    }
  };
  const auto t0 = Clock::now();
  if (!profile_step.empty()) {  // nothing else: the profiler sees this one replay
    section(report, "one recorded training step, profiled", [&] {
      bench_epoch(report, dev, /*quick=*/true,
                  {.lenet = profile_step == "lenet", .graph = true, .profile = true});
    });
  }
  run("small_add", "per-op overhead (a + b on 2x3)", [&] { bench_small_add(report, dev, quick); });
  run("issue", "issue cost of exercise 3's ops", [&] { bench_issue_costs(report, dev, quick); });
  run("matmul", "matmul float32 / TF32 / bfloat16", [&] { bench_matmul(report, dev, quick); });
  run("copies", "host <-> device copies (tessera)", [&] { bench_copies(report, dev, quick); });
  const int raw_index = dev.is_cuda() ? dev.index() : 0;
  run("raw_copies", "host <-> device copies (cudaMemcpy)", [&] {
    CHECK_CUDA(cudaSetDevice(raw_index));
    bench_raw_copies(report, quick);
  });
  run("raw_d2d", "device-to-device copy (cudaMemcpy)", [&] {
    CHECK_CUDA(cudaSetDevice(raw_index));
    bench_raw_d2d(report, quick);
  });
  run("bandwidth", "device bandwidth (copy_, a + b on 256 Mi)",
      [&] { bench_device_bandwidth(report, dev, quick); });
  run("train", "training epochs (MLP, LeNet: float32, bfloat16 autocast, graphs)",
      [&] { bench_train(report, dev, quick); });
  run("autocast", "MLP 4096-4096-4096-10 step, float32 and bfloat16 autocast",
      [&] { bench_autocast_step(report, dev, quick); });
  run("optim", "optimizer steps over the MLP's parameters (SGD momentum, Adam)",
      [&] { bench_optimizer_steps(report, dev, quick); });
  std::printf("gpu_bench: done in %.1f s, %zu error(s)\n", seconds_since(t0), report.errors.size());
  for (const std::string& e : report.errors) std::printf("  error: %s\n", e.c_str());

  if (!out_path.empty()) write_json(report, out_path, device_name, quick);
  return report.errors.empty() ? 0 : 1;
}
