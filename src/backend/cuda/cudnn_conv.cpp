// GPU convolutions on cuDNN's convolution kernels. See Note [cuDNN at run time].
#include "backend/cuda/cudnn_conv.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/conv_geometry.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cudnn_library.h"
#include "core/tensor_impl.h"
#include "tessera/error.h"
#include "tessera/settings.h"

// Note [cuDNN at run time]
// im2col + one cuBLAS GEMM per chunk of images (Note [CUDA convolution]) spends most of a
// small network's convolution time copying columns, and its GEMMs are narrow where channels
// are few (LeNet's 6 and 16): LeNet's recorded epoch took 2x PyTorch's, which runs cuDNN.
// float32 convolutions therefore run on cuDNN's own kernels where cuDNN is there:
// - cuDNN is opened with dlopen at the first GPU convolution, as NCCL is (Note [NCCL at run
//   time]): libcudnn.so.9 from the loader's path, or the file TESSERA_CUDNN_LIBRARY names
//   (PyTorch's nvidia-cudnn-cu13 wheel on the GPU machines), and never linked, so a build
//   runs where it is absent: every convolution then takes im2col, as with TESSERA_CUDNN=0.
// - The "legacy" API (descriptors and cudnnConvolutionForward / BackwardData /
//   BackwardFilter / BackwardBias), which cuDNN 9 still exports. Per handle, shape, device and
//   TF32 switch, a plan keeps the descriptors and each direction's algorithm: the first of
//   cuDNN's heuristic ranking (cudnnGet*Algorithm_v7, which runs nothing on the GPU and so
//   may be asked inside a graph capture) that is deterministic (runs repeat bit for bit, as
//   with im2col), needs at most kWorkspaceLimit of workspace, and keeps float32's precision:
//   FMA math and no FFT or Winograd transform where TF32 is off (matmul_allow_tf32), never a
//   conversion to float16 (TESSERA_CUDNN_LOG=1 prints each plan's choices). A
//   direction without such an algorithm, float64 and the half types (which the front end
//   widens to float32) stay on im2col, as do shapes past 32-bit sizes and empty ones.
// - A call borrows one of its stream's cuDNN handles (LeasedHandle: one handle is for one
//   thread at a time), and plans are per handle too. Handles are made outside captures only
//   (cudnnCreate allocates): a capture begins by making one for its stream where cuDNN is in
//   use, else a convolution captured before its stream ever had a free handle takes im2col.
// - A failure that says cuDNN cannot run here leaves that work to im2col: a status of the
//   NOT_SUPPORTED category from a ranking (that direction of that plan) or a run (from then
//   on); from a first handle, or sub-libraries that do not load, all of it for the process,
//   except that where TESSERA_CUDNN_LIBRARY named the library it is a DeviceError. A first
//   handle short of GPU memory leaves that call to im2col (whose allocations can release the
//   caching allocator's blocks). Other failures throw, naming the op, the call and the
//   library.
// - Workspaces are tessera tensors of the stream's caching allocator, freed on return as
//   im2col's columns are (an OOM is OutOfMemoryError).
// Never run on a GPU so far (no GPU was lent since it was written): scripts/gpu-check runs
// the convolution tests with and without it.

namespace tessera::detail::cuda {

#if TESSERA_HAVE_CUDNN
namespace {

using i64 = std::int64_t;

constexpr std::size_t kWorkspaceLimit = std::size_t{256} << 20;  // as im2col's columns
constexpr std::size_t kMaxPlans = 1024;                          // shapes times handles

struct PlanKey {
  cudnnHandle_t handle;  // Plan: one handle's (so one thread's at a time)
  int device;
  i64 n, c, h, w, o, kh, kw;
  int sh, sw, ph, pw;
  bool tf32;
  bool operator==(const PlanKey&) const = default;
};

struct PlanKeyHash {
  std::size_t operator()(const PlanKey& k) const {
    std::size_t seed = 0;
    const auto mix = [&seed](i64 v) {
      seed ^= std::hash<i64>{}(v) + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2);
    };
    mix(static_cast<i64>(reinterpret_cast<std::uintptr_t>(k.handle)));
    for (i64 v : {i64{k.device}, k.n, k.c, k.h, k.w, k.o, k.kh, k.kw, i64{k.sh}, i64{k.sw},
                  i64{k.ph}, i64{k.pw}, i64{k.tf32}}) {
      mix(v);
    }
    return seed;
  }
};

enum Direction { kForward = 0, kBackwardData = 1, kBackwardFilter = 2 };

// One direction's choice: an algorithm (cuDNN's enum for that direction, as int), its
// workspace, and the math type set on that direction's descriptor.
struct Choice {
  bool usable = false;
  int algo = 0;
  std::size_t workspace = 0;
  cudnnMathType_t math = CUDNN_FMA_MATH;  // what it runs with (for TESSERA_CUDNN_LOG)
};

// Algorithms whose sums are not float32's (FFT and Winograd transforms round more): taken only
// where TF32 is allowed, which gives up float32's precision anyway.
bool approximate(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
bool approximate(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
bool approximate(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

const char* math_name(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH:
      return "default";
    case CUDNN_TENSOR_OP_MATH:
      return "tensor op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION:
      return "tensor op with conversion";
    case CUDNN_FMA_MATH:
      return "FMA";
  }
  return "?";
}

// TESSERA_CUDNN_LOG=1: each plan's choices on stderr (for checking what a GPU runs).
bool log_plans() {
  static const bool on = [] {
    const char* env = std::getenv("TESSERA_CUDNN_LOG");
    return env != nullptr && std::strcmp(env, "1") == 0;
  }();
  return on;
}

// The descriptors of one shape and each direction's algorithm, for one handle (so for one
// thread at a time: cuDNN promises thread safety per handle, and says nothing of descriptors
// shared across threads).
class Plan {
 public:
  Plan(const CudnnLibrary& lib, cudnnHandle_t handle, const ConvGeometry& g, bool tf32)
      : lib_(lib) {
    try {  // a constructor that throws runs no destructor
      make_descriptors(g, tf32);
      choose_forward(handle, tf32);
      choose_backward_data(handle, tf32);
      choose_backward_filter(handle, tf32);
      if (log_plans()) log(g, tf32);
    } catch (...) {
      destroy();
      throw;
    }
  }
  ~Plan() { destroy(); }
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  // TESSERA_CUDNN_LOG's line.
  void log(const ConvGeometry& g, bool tf32) const {
    std::string said;
    for (int dir : {kForward, kBackwardData, kBackwardFilter}) {
      static constexpr const char* kNames[] = {"forward", "input gradient", "weight gradient"};
      const Choice& c = choice[dir];
      said += fmt::format("; {}: {}", kNames[dir],
                          c.usable ? fmt::format("algorithm {} ({} math, {} bytes of workspace)",
                                                 c.algo, math_name(c.math), c.workspace)
                                   : std::string("none (im2col)"));
    }
    const std::string line = fmt::format(
        "tessera cuDNN plan: x [{}, {}, {}, {}], weight [{}, {}, {}, {}], stride ({}, {}), "
        "padding ({}, {}), TF32 {}{}\n",
        g.n, g.c, g.h, g.w, g.o, g.c, g.kh, g.kw, g.win.stride_h, g.win.stride_w, g.win.pad_h,
        g.win.pad_w, tf32 ? "on" : "off", said);
    std::fputs(line.c_str(), stderr);
  }

  // Whether a direction runs on cuDNN (chosen, and not refused at run time).
  bool runs(int dir) const { return choice[dir].usable && !refused[dir].load(); }
  // A run of `dir` came back not supported: im2col from now on (no workspace allocated, no
  // call made in vain).
  void refuse(int dir) const { refused[dir].store(true); }

  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  // One per direction: each carries the math type its algorithm runs with.
  cudnnConvolutionDescriptor_t conv[3] = {nullptr, nullptr, nullptr};
  Choice choice[3];

 private:
  void make_descriptors(const ConvGeometry& g, bool tf32) {
    constexpr const char* op = "conv2d";
    TESSERA_CUDNN_CHECK(lib_.create_tensor(&x), op);
    TESSERA_CUDNN_CHECK(lib_.create_tensor(&y), op);
    TESSERA_CUDNN_CHECK(lib_.create_tensor(&bias), op);
    TESSERA_CUDNN_CHECK(lib_.create_filter(&w), op);
    const auto i = [](i64 v) { return static_cast<int>(v); };
    TESSERA_CUDNN_CHECK(
        lib_.set_tensor_4d(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(g.n), i(g.c), i(g.h), i(g.w)),
        op);
    TESSERA_CUDNN_CHECK(lib_.set_tensor_4d(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(g.n), i(g.o),
                                           i(g.oh), i(g.ow)),
                        op);
    TESSERA_CUDNN_CHECK(
        lib_.set_tensor_4d(bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, i(g.o), 1, 1), op);
    TESSERA_CUDNN_CHECK(lib_.set_filter_4d(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, i(g.o), i(g.c),
                                           i(g.kh), i(g.kw)),
                        op);
    // Without TF32, FMA math throughout: DEFAULT_MATH may take TF32 tensor cores on Ampere
    // and later.
    const cudnnMathType_t math = tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    for (cudnnConvolutionDescriptor_t& d : conv) {
      TESSERA_CUDNN_CHECK(lib_.create_convolution(&d), op);
      TESSERA_CUDNN_CHECK(
          lib_.set_convolution_2d(d, g.win.pad_h, g.win.pad_w, g.win.stride_h, g.win.stride_w, 1, 1,
                                  CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
          op);
      TESSERA_CUDNN_CHECK(lib_.set_math_type(d, math), op);
    }
  }

  void destroy() {
    // Statuses ignored: a destructor must not throw, and destroying cannot fail on a valid
    // descriptor; one never made is null.
    if (x != nullptr) lib_.destroy_tensor(x);
    if (y != nullptr) lib_.destroy_tensor(y);
    if (bias != nullptr) lib_.destroy_tensor(bias);
    if (w != nullptr) lib_.destroy_filter(w);
    for (cudnnConvolutionDescriptor_t d : conv) {
      if (d != nullptr) lib_.destroy_convolution(d);
    }
  }

  // Whether a ranked algorithm qualifies (Note [cuDNN at run time]): ranked as runnable,
  // deterministic, within the workspace limit, never through float16, and without TF32 none
  // that rounds more than float32's sums (tensor-op math, FFT, Winograd).
  template <typename Perf>
  static bool acceptable(const Perf& p, bool tf32) {
    if (p.status != CUDNN_STATUS_SUCCESS || p.determinism != CUDNN_DETERMINISTIC) return false;
    if (p.memory > kWorkspaceLimit) return false;
    if (p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return false;
    if (tf32) return true;
    return (p.mathType == CUDNN_FMA_MATH || p.mathType == CUDNN_DEFAULT_MATH) &&
           !approximate(p.algo);
  }

  // Takes ranked[0..found) in order: the first acceptable one whose workspace, asked for by
  // `workspace_of`, is within the limit. With TF32 each runs with the math type cuDNN ranked
  // it with (cuDNN 7.4 on); without, the descriptor keeps FMA.
  template <typename Perf, typename WorkspaceOf>
  void take_first(Direction dir, const std::vector<Perf>& ranked, int found, bool tf32,
                  WorkspaceOf workspace_of) {
    for (int k = 0; k < found; ++k) {
      const Perf& p = ranked[static_cast<std::size_t>(k)];
      if (!acceptable(p, tf32)) continue;
      if (tf32 && lib_.set_math_type(conv[dir], p.mathType) != CUDNN_STATUS_SUCCESS) continue;
      std::size_t bytes = 0;
      if (workspace_of(p.algo, &bytes) != CUDNN_STATUS_SUCCESS || bytes > kWorkspaceLimit) {
        continue;
      }
      choice[dir] = {true, static_cast<int>(p.algo), bytes, tf32 ? p.mathType : CUDNN_FMA_MATH};
      return;
    }
  }

  // Whether a ranking call went through: one of the NOT_SUPPORTED category leaves the
  // direction to im2col; any other failure (a sub-library broken, a bad parameter) throws.
  static bool ranked_ok(cudnnStatus_t status, const char* call) {
    if (CUDNN_STATUS_CATEGORY(status) == CUDNN_STATUS_NOT_SUPPORTED) return false;
    if (status != CUDNN_STATUS_SUCCESS) {
      throw_cudnn_error(status, call, "conv2d", __FILE__, __LINE__);
    }
    return true;
  }

  // Each direction: the algorithms cuDNN ranks (as many as it may return), then the first
  // that qualifies.
  void choose_forward(cudnnHandle_t handle, bool tf32) {
    int count = 0;
    if (!ranked_ok(lib_.forward_algorithm_count(handle, &count),
                   "cudnnGetConvolutionForwardAlgorithmMaxCount") ||
        count <= 0) {
      return;
    }
    std::vector<cudnnConvolutionFwdAlgoPerf_t> ranked(static_cast<std::size_t>(count));
    int found = 0;
    if (!ranked_ok(
            lib_.forward_algorithms(handle, x, w, conv[kForward], y, count, &found, ranked.data()),
            "cudnnGetConvolutionForwardAlgorithm_v7")) {
      return;
    }
    take_first(kForward, ranked, std::min(found, count), tf32,
               [&](cudnnConvolutionFwdAlgo_t a, std::size_t* b) {
                 return lib_.forward_workspace(handle, x, w, conv[kForward], y, a, b);
               });
  }
  void choose_backward_data(cudnnHandle_t handle, bool tf32) {
    int count = 0;
    if (!ranked_ok(lib_.backward_data_algorithm_count(handle, &count),
                   "cudnnGetConvolutionBackwardDataAlgorithmMaxCount") ||
        count <= 0) {
      return;
    }
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> ranked(static_cast<std::size_t>(count));
    int found = 0;
    if (!ranked_ok(lib_.backward_data_algorithms(handle, w, y, conv[kBackwardData], x, count,
                                                 &found, ranked.data()),
                   "cudnnGetConvolutionBackwardDataAlgorithm_v7")) {
      return;
    }
    take_first(kBackwardData, ranked, std::min(found, count), tf32,
               [&](cudnnConvolutionBwdDataAlgo_t a, std::size_t* b) {
                 return lib_.backward_data_workspace(handle, w, y, conv[kBackwardData], x, a, b);
               });
  }
  void choose_backward_filter(cudnnHandle_t handle, bool tf32) {
    int count = 0;
    if (!ranked_ok(lib_.backward_filter_algorithm_count(handle, &count),
                   "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount") ||
        count <= 0) {
      return;
    }
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> ranked(static_cast<std::size_t>(count));
    int found = 0;
    if (!ranked_ok(lib_.backward_filter_algorithms(handle, x, y, conv[kBackwardFilter], w, count,
                                                   &found, ranked.data()),
                   "cudnnGetConvolutionBackwardFilterAlgorithm_v7")) {
      return;
    }
    take_first(kBackwardFilter, ranked, std::min(found, count), tf32,
               [&](cudnnConvolutionBwdFilterAlgo_t a, std::size_t* b) {
                 return lib_.backward_filter_workspace(handle, x, y, conv[kBackwardFilter], w, a,
                                                       b);
               });
  }

  const CudnnLibrary& lib_;
  mutable std::atomic<bool> refused[3] = {};
};

// The shapes cuDNN is asked to take: float32, nothing empty, every size a 32-bit int (the
// 4-d descriptors' type) and no tensor past 2^31 elements.
bool takes(const ConvGeometry& g, Dtype dtype) {
  if (dtype != kFloat32) return false;
  const i64 limit = INT_MAX;
  for (i64 v : {g.n, g.c, g.h, g.w, g.o, g.kh, g.kw, g.oh, g.ow}) {
    if (v <= 0 || v > limit) return false;
  }
  return g.n * g.c * g.h * g.w <= limit && g.n * g.o * g.oh * g.ow <= limit &&
         g.o * g.c * g.kh * g.kw <= limit;
}

// A cuDNN handle of one stream, lent to one call at a time: cuDNN's functions may run on
// several threads at once, but not on one handle (its documentation's thread safety), and
// two threads may queue convolutions on one stream. Handles are made on demand (as many as
// threads ever convolved on the stream at once) and kept for the process.
class LeasedHandle {
 public:
  // nullptr handle() while the stream is capturing and has no free handle (cudnnCreate
  // allocates: Note [cuDNN at run time]), and where cuDNN turned out not to run here.
  LeasedHandle(const CudnnLibrary& lib, cudaStream_t stream) : stream_(stream) {
    // Made under the lock too: NVIDIA asks that handles not be created on several threads
    // at once before the first exists.
    std::lock_guard lock(mutex());
    std::vector<cudnnHandle_t>& free = pool()[stream];
    if (!free.empty()) {
      handle_ = free.back();
      free.pop_back();
      return;
    }
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    TESSERA_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    if (capture != cudaStreamCaptureStatusNone) return;
    cudnnHandle_t h = nullptr;
    const cudnnStatus_t made = lib.create(&h);
    if (made != CUDNN_STATUS_SUCCESS && cannot_run_here(made)) {
      // Throws where TESSERA_CUDNN_LIBRARY named the library; else im2col from now on.
      cudnn_unusable(fmt::format(
          "[conv2d] {} (cuDNN {}) loads but cannot run here: cudnnCreate says {} "
          "(cudnnStatus_t {}). Set TESSERA_CUDNN=0 to convolve without cuDNN, or install a "
          "cuDNN 9 for this GPU, driver and CUDA",
          lib.path, lib.version_string(), lib.get_error_string(made), static_cast<int>(made)));
      return;
    }
    if (made == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED) {
      // The GPU's memory is held, much of it perhaps by the caching allocator, which im2col's
      // own allocations can release and retry: this call goes without cuDNN.
      return;
    }
    TESSERA_CUDNN_CHECK(made, "conv2d");
    const cudnnStatus_t set = lib.set_stream(h, stream);
    if (set != CUDNN_STATUS_SUCCESS) {
      lib.destroy(h);
      TESSERA_CUDNN_CHECK(set, "conv2d");
    }
    handle_ = h;
  }
  ~LeasedHandle() {
    if (handle_ == nullptr) return;
    std::lock_guard lock(mutex());
    pool()[stream_].push_back(handle_);
  }
  LeasedHandle(const LeasedHandle&) = delete;
  LeasedHandle& operator=(const LeasedHandle&) = delete;

  cudnnHandle_t handle() const { return handle_; }

 private:
  // Failures of a first handle that say cuDNN does not run on this machine at all (a
  // sub-library missing or mismatched, no kernels for this GPU, an old driver) rather than
  // that something went wrong.
  static bool cannot_run_here(cudnnStatus_t s) {
    return CUDNN_STATUS_CATEGORY(s) == CUDNN_STATUS_NOT_SUPPORTED ||
           s == CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED ||
           s == CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH;
  }
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::unordered_map<cudaStream_t, std::vector<cudnnHandle_t>>& pool() {
    static auto* p = new std::unordered_map<cudaStream_t, std::vector<cudnnHandle_t>>;
    return *p;  // never destroyed: a thread may return a handle while the process exits
  }
  cudaStream_t stream_;
  cudnnHandle_t handle_ = nullptr;
};

// The plan of this shape on this device, made on first use. At most kMaxPlans are kept: past
// that the table starts afresh (a plan in use lives on in its callers' hands).
std::shared_ptr<const Plan> plan_for(const CudnnLibrary& lib, cudnnHandle_t handle, int device,
                                     const ConvGeometry& g) {
  const bool tf32 = matmul_allow_tf32();
  const PlanKey key{
      handle,         device,         g.n,         g.c,         g.h, g.w, g.o, g.kh, g.kw,
      g.win.stride_h, g.win.stride_w, g.win.pad_h, g.win.pad_w, tf32};
  static std::mutex mutex;
  // Never destroyed: descriptors are not destroyed while the process exits (cuDNN may be
  // gone by then).
  static auto& plans = *new std::unordered_map<PlanKey, std::shared_ptr<const Plan>, PlanKeyHash>;
  {
    std::lock_guard lock(mutex);
    const auto it = plans.find(key);
    if (it != plans.end()) return it->second;
  }
  auto made = std::make_shared<const Plan>(lib, handle, g, tf32);  // outside the lock: slow
  std::lock_guard lock(mutex);
  if (plans.size() >= kMaxPlans) plans.clear();
  return plans.emplace(key, std::move(made)).first->second;  // another thread's if it won
}

void* ptr(const Tensor& t) { return impl_of(t).data(); }

// A workspace of `bytes` on `device` for one call (nullptr for none).
Tensor workspace(std::size_t bytes, Device device, const char* op) {
  if (bytes == 0) return {};
  return make_tensor({static_cast<i64>(bytes)}, kUInt8, device, op);
}

void* ptr_or_null(const Tensor& t) { return t.defined() ? ptr(t) : nullptr; }

// Whether a call went through: a status of the NOT_SUPPORTED category (an engine that cannot
// run here, as one needing NVRTC where it is missing, or a shape it refuses) launches nothing
// and leaves the work to im2col; any other failure throws.
bool ran(cudnnStatus_t status, const char* call, const char* op) {
  if (CUDNN_STATUS_CATEGORY(status) == CUDNN_STATUS_NOT_SUPPORTED) return false;
  if (status != CUDNN_STATUS_SUCCESS) throw_cudnn_error(status, call, op, __FILE__, __LINE__);
  return true;
}

// What a call needs: the library, a handle of the stream and the shape's plan; no plan
// where cuDNN does not take the call.
struct Ready {
  Ready(cudaStream_t stream, const ConvGeometry& g, Dtype dtype, int device)
      : lib(takes(g, dtype) ? cudnn_library() : nullptr) {
    if (lib == nullptr) return;
    lease.emplace(*lib, stream);
    if (lease->handle() == nullptr) return;
    plan = plan_for(*lib, lease->handle(), device, g);
  }
  cudnnHandle_t handle() const { return lease->handle(); }

  const CudnnLibrary* lib;
  std::optional<LeasedHandle> lease;
  std::shared_ptr<const Plan> plan;
};

}  // namespace

bool cudnn_conv2d(cudaStream_t stream, const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const Tensor& out, const Window2d& w) {
  const ConvGeometry g = ConvGeometry::of(x.shape(), weight.shape(), w);
  const Ready r(stream, g, out.dtype(), out.device().index());
  if (r.plan == nullptr || !r.plan->runs(kForward)) return false;
  const Plan& p = *r.plan;
  const Choice& c = p.choice[kForward];
  const Tensor ws = workspace(c.workspace, out.device(), "conv2d");
  const float one = 1, zero = 0;
  if (!ran(r.lib->forward(r.handle(), &one, p.x, ptr(x), p.w, ptr(weight), p.conv[kForward],
                          static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), ptr_or_null(ws),
                          c.workspace, &zero, p.y, ptr(out)),
           "cudnnConvolutionForward", "conv2d")) {
    p.refuse(kForward);
    return false;
  }
  if (bias.defined()) {
    TESSERA_CUDNN_CHECK(r.lib->add_tensor(r.handle(), &one, p.bias, ptr(bias), &one, p.y, ptr(out)),
                        "conv2d");
  }
  count_cudnn_run(CudnnPart::kForward);
  return true;
}

CudnnGradients cudnn_conv2d_backward(cudaStream_t stream, const Tensor& x, const Tensor& weight,
                                     const Tensor& grad_out, const Tensor& grad_x,
                                     const Tensor& grad_weight, const Tensor& grad_bias,
                                     const Window2d& w) {
  CudnnGradients done;
  const ConvGeometry g = ConvGeometry::of(x.shape(), weight.shape(), w);
  const Ready r(stream, g, x.dtype(), x.device().index());
  if (r.plan == nullptr) return done;
  const Plan& p = *r.plan;
  const Choice& data = p.choice[kBackwardData];
  const Choice& filter = p.choice[kBackwardFilter];
  const bool do_x = grad_x.defined() && p.runs(kBackwardData);
  const bool do_weight = grad_weight.defined() && p.runs(kBackwardFilter);
  // One workspace for both directions (they run one after the other on the stream).
  const std::size_t bytes = std::max(do_x ? data.workspace : 0, do_weight ? filter.workspace : 0);
  const Tensor ws = workspace(bytes, x.device(), "conv2d_backward");
  const float one = 1, zero = 0;
  if (do_x) {
    done.x = ran(r.lib->backward_data(r.handle(), &one, p.w, ptr(weight), p.y, ptr(grad_out),
                                      p.conv[kBackwardData],
                                      static_cast<cudnnConvolutionBwdDataAlgo_t>(data.algo),
                                      ptr_or_null(ws), data.workspace, &zero, p.x, ptr(grad_x)),
                 "cudnnConvolutionBackwardData", "conv2d_backward");
    if (!done.x) p.refuse(kBackwardData);
  }
  if (do_weight) {
    done.weight =
        ran(r.lib->backward_filter(r.handle(), &one, p.x, ptr(x), p.y, ptr(grad_out),
                                   p.conv[kBackwardFilter],
                                   static_cast<cudnnConvolutionBwdFilterAlgo_t>(filter.algo),
                                   ptr_or_null(ws), filter.workspace, &zero, p.w, ptr(grad_weight)),
            "cudnnConvolutionBackwardFilter", "conv2d_backward");
    if (!done.weight) p.refuse(kBackwardFilter);
  }
  if (grad_bias.defined()) {
    done.bias = ran(
        r.lib->backward_bias(r.handle(), &one, p.y, ptr(grad_out), &zero, p.bias, ptr(grad_bias)),
        "cudnnConvolutionBackwardBias", "conv2d_backward");
  }
  if (done.x) count_cudnn_run(CudnnPart::kInputGradient);
  if (done.weight) count_cudnn_run(CudnnPart::kWeightGradient);
  if (done.bias) count_cudnn_run(CudnnPart::kBiasGradient);
  return done;
}

void cudnn_prepare_capture(cudaStream_t stream) {
  const CudnnLibrary* lib = cudnn_library_if_loaded();
  if (lib == nullptr) return;
  // A handle made now, outside the capture, and given back to the stream's pool at once.
  // Best effort: a graph may hold no convolution, so only the error of a library the user
  // named stops the capture; otherwise the captured convolutions find out for themselves.
  try {
    const LeasedHandle lease(*lib, stream);
  } catch (const DeviceError&) {
    throw;
  } catch (const Error&) {
  }
}

#else  // no <cudnn.h> at build time: every convolution takes im2col

bool cudnn_conv2d(cudaStream_t, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                  const Window2d&) {
  return false;
}

CudnnGradients cudnn_conv2d_backward(cudaStream_t, const Tensor&, const Tensor&, const Tensor&,
                                     const Tensor&, const Tensor&, const Tensor&, const Window2d&) {
  return {};
}

void cudnn_prepare_capture(cudaStream_t) {}

#endif

}  // namespace tessera::detail::cuda
