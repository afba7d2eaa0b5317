// GPU convolutions on cuDNN's convolution kernels. See Note [cuDNN at run time].
#include "backend/cuda/cudnn_conv.h"

#include <climits>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "backend/conv_geometry.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cudnn_library.h"
#include "core/tensor_impl.h"
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
//   BackwardFilter / BackwardBias), which cuDNN 9 still exports. Per shape, device and TF32
//   switch, a plan keeps the descriptors and each direction's algorithm: the first of
//   cuDNN's heuristic ranking (cudnnGet*Algorithm_v7, which runs nothing on the GPU and so
//   may be asked inside a graph capture) that is deterministic (runs repeat bit for bit, as
//   with im2col), needs at most kWorkspaceLimit of workspace, and keeps float32's precision:
//   FMA math where TF32 is off (matmul_allow_tf32), never a conversion to float16. A
//   direction without such an algorithm, float64 and the half types (which the front end
//   widens to float32) stay on im2col, as do shapes past 32-bit sizes and empty ones.
// - A call borrows one of its stream's cuDNN handles (LeasedHandle: one handle is for one
//   thread at a time); handles are made outside captures only (cudnnCreate allocates), so a
//   convolution captured before its stream ever had a free handle takes im2col.
// - Workspaces are tessera tensors of the stream's caching allocator, freed on return as
//   im2col's columns are (an OOM is OutOfMemoryError).
// Never run on a GPU so far (no GPU was lent since it was written): scripts/gpu-check runs
// the convolution tests with and without it.

namespace tessera::detail::cuda {

#if TESSERA_HAVE_CUDNN
namespace {

using i64 = std::int64_t;

constexpr std::size_t kWorkspaceLimit = std::size_t{256} << 20;  // as im2col's columns
constexpr std::size_t kMaxPlans = 256;

struct PlanKey {
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
    for (i64 v : {i64{k.device}, k.n, k.c, k.h, k.w, k.o, k.kh, k.kw, i64{k.sh}, i64{k.sw},
                  i64{k.ph}, i64{k.pw}, i64{k.tf32}}) {
      mix(v);
    }
    return seed;
  }
};

enum Direction { kForward = 0, kBackwardData = 1, kBackwardFilter = 2 };

// One direction's choice: an algorithm (cuDNN's enum for that direction, as int) and its
// workspace; the math type it was ranked with is set on that direction's descriptor.
struct Choice {
  bool usable = false;
  int algo = 0;
  std::size_t workspace = 0;
};

// The descriptors of one shape and each direction's algorithm. Read-only once made, so
// several threads may use one plan at once (cuDNN reads descriptors, never writes them).
class Plan {
 public:
  Plan(const CudnnLibrary& lib, cudnnHandle_t handle, const ConvGeometry& g, bool tf32)
      : lib_(lib) {
    constexpr const char* op = "conv2d";
    TESSERA_CUDNN_CHECK(lib.create_tensor(&x), op);
    TESSERA_CUDNN_CHECK(lib.create_tensor(&y), op);
    TESSERA_CUDNN_CHECK(lib.create_tensor(&bias), op);
    TESSERA_CUDNN_CHECK(lib.create_filter(&w), op);
    const auto i = [](i64 v) { return static_cast<int>(v); };
    TESSERA_CUDNN_CHECK(
        lib.set_tensor_4d(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(g.n), i(g.c), i(g.h), i(g.w)),
        op);
    TESSERA_CUDNN_CHECK(
        lib.set_tensor_4d(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(g.n), i(g.o), i(g.oh), i(g.ow)),
        op);
    TESSERA_CUDNN_CHECK(
        lib.set_tensor_4d(bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, i(g.o), 1, 1), op);
    TESSERA_CUDNN_CHECK(
        lib.set_filter_4d(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, i(g.o), i(g.c), i(g.kh), i(g.kw)),
        op);
    const cudnnMathType_t math = tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    for (cudnnConvolutionDescriptor_t& d : conv) {
      TESSERA_CUDNN_CHECK(lib.create_convolution(&d), op);
      TESSERA_CUDNN_CHECK(
          lib.set_convolution_2d(d, g.win.pad_h, g.win.pad_w, g.win.stride_h, g.win.stride_w, 1, 1,
                                 CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
          op);
      TESSERA_CUDNN_CHECK(lib.set_math_type(d, math), op);
    }
    choose_forward(handle, tf32);
    choose_backward_data(handle, tf32);
    choose_backward_filter(handle, tf32);
  }
  ~Plan() {
    // Statuses ignored: a destructor must not throw, and destroying cannot fail on a valid
    // descriptor.
    lib_.destroy_tensor(x);
    lib_.destroy_tensor(y);
    lib_.destroy_tensor(bias);
    lib_.destroy_filter(w);
    for (cudnnConvolutionDescriptor_t d : conv) lib_.destroy_convolution(d);
  }
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  // One per direction: each carries the math type its algorithm was ranked with.
  cudnnConvolutionDescriptor_t conv[3] = {nullptr, nullptr, nullptr};
  Choice choice[3];

 private:
  // Whether a ranked algorithm qualifies (Note [cuDNN at run time]).
  template <typename Perf>
  static bool acceptable(const Perf& p, bool tf32) {
    if (p.status != CUDNN_STATUS_SUCCESS || p.determinism != CUDNN_DETERMINISTIC) return false;
    if (p.memory > kWorkspaceLimit) return false;
    if (p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return false;  // float16 inside
    // Without TF32 only FMA math: DEFAULT_MATH may take TF32 tensor cores on Ampere and later.
    return tf32 || p.mathType == CUDNN_FMA_MATH;
  }

  // Takes ranked[0..found) in order: the first acceptable one whose workspace, asked for by
  // `workspace_of`, is within the limit.
  template <typename Perf, typename WorkspaceOf>
  void take_first(Direction dir, const Perf* ranked, int found, bool tf32,
                  WorkspaceOf workspace_of) {
    for (int k = 0; k < found; ++k) {
      const Perf& p = ranked[k];
      if (!acceptable(p, tf32)) continue;
      // The math type cuDNN ranked it with is the one it runs with (cuDNN 7.4 on).
      TESSERA_CUDNN_CHECK(lib_.set_math_type(conv[dir], p.mathType), "conv2d");
      std::size_t bytes = 0;
      if (workspace_of(p.algo, &bytes) != CUDNN_STATUS_SUCCESS || bytes > kWorkspaceLimit) {
        continue;
      }
      choice[dir] = {true, static_cast<int>(p.algo), bytes};
      return;
    }
  }

  void choose_forward(cudnnHandle_t handle, bool tf32) {
    cudnnConvolutionFwdAlgoPerf_t ranked[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int found = 0;
    TESSERA_CUDNN_CHECK(lib_.forward_algorithms(handle, x, w, conv[kForward], y,
                                                CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, ranked),
                        "conv2d");
    take_first(kForward, ranked, found, tf32, [&](cudnnConvolutionFwdAlgo_t a, std::size_t* b) {
      return lib_.forward_workspace(handle, x, w, conv[kForward], y, a, b);
    });
  }
  void choose_backward_data(cudnnHandle_t handle, bool tf32) {
    cudnnConvolutionBwdDataAlgoPerf_t ranked[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int found = 0;
    TESSERA_CUDNN_CHECK(
        lib_.backward_data_algorithms(handle, w, y, conv[kBackwardData], x,
                                      CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &found, ranked),
        "conv2d_backward");
    take_first(kBackwardData, ranked, found, tf32,
               [&](cudnnConvolutionBwdDataAlgo_t a, std::size_t* b) {
                 return lib_.backward_data_workspace(handle, w, y, conv[kBackwardData], x, a, b);
               });
  }
  void choose_backward_filter(cudnnHandle_t handle, bool tf32) {
    cudnnConvolutionBwdFilterAlgoPerf_t ranked[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int found = 0;
    TESSERA_CUDNN_CHECK(
        lib_.backward_filter_algorithms(handle, x, y, conv[kBackwardFilter], w,
                                        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &found, ranked),
        "conv2d_backward");
    take_first(kBackwardFilter, ranked, found, tf32,
               [&](cudnnConvolutionBwdFilterAlgo_t a, std::size_t* b) {
                 return lib_.backward_filter_workspace(handle, x, y, conv[kBackwardFilter], w, a,
                                                       b);
               });
  }

  const CudnnLibrary& lib_;
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
  // allocates: Note [cuDNN at run time]).
  LeasedHandle(const CudnnLibrary& lib, cudaStream_t stream) : stream_(stream) {
    {
      std::lock_guard lock(mutex());
      std::vector<cudnnHandle_t>& free = pool()[stream];
      if (!free.empty()) {
        handle_ = free.back();
        free.pop_back();
        return;
      }
    }
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    TESSERA_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    if (capture != cudaStreamCaptureStatusNone) return;
    cudnnHandle_t h = nullptr;
    TESSERA_CUDNN_CHECK(lib.create(&h), "conv2d");
    TESSERA_CUDNN_CHECK(lib.set_stream(h, stream), "conv2d");
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
      device,         g.n,         g.c,         g.h, g.w, g.o, g.kh, g.kw, g.win.stride_h,
      g.win.stride_w, g.win.pad_h, g.win.pad_w, tf32};
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

// Whether a call went through: CUDNN_STATUS_NOT_SUPPORTED (an engine that cannot run here, as
// one needing NVRTC where it is missing) launches nothing and leaves the work to im2col;
// any other failure throws.
bool ran(cudnnStatus_t status, const char* call, const char* op) {
  if (status == CUDNN_STATUS_NOT_SUPPORTED) return false;
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
  if (r.plan == nullptr || !r.plan->choice[kForward].usable) return false;
  const Plan& p = *r.plan;
  const Choice& c = p.choice[kForward];
  const Tensor ws = workspace(c.workspace, out.device(), "conv2d");
  const float one = 1, zero = 0;
  if (!ran(r.lib->forward(r.handle(), &one, p.x, ptr(x), p.w, ptr(weight), p.conv[kForward],
                          static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), ptr_or_null(ws),
                          c.workspace, &zero, p.y, ptr(out)),
           "cudnnConvolutionForward", "conv2d")) {
    return false;
  }
  if (bias.defined()) {
    TESSERA_CUDNN_CHECK(r.lib->add_tensor(r.handle(), &one, p.bias, ptr(bias), &one, p.y, ptr(out)),
                        "conv2d");
  }
  count_cudnn_convolution();
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
  const bool do_x = grad_x.defined() && data.usable;
  const bool do_weight = grad_weight.defined() && filter.usable;
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
  }
  if (do_weight) {
    done.weight =
        ran(r.lib->backward_filter(r.handle(), &one, p.x, ptr(x), p.y, ptr(grad_out),
                                   p.conv[kBackwardFilter],
                                   static_cast<cudnnConvolutionBwdFilterAlgo_t>(filter.algo),
                                   ptr_or_null(ws), filter.workspace, &zero, p.w, ptr(grad_weight)),
            "cudnnConvolutionBackwardFilter", "conv2d_backward");
  }
  if (grad_bias.defined()) {
    done.bias = ran(
        r.lib->backward_bias(r.handle(), &one, p.y, ptr(grad_out), &zero, p.bias, ptr(grad_bias)),
        "cudnnConvolutionBackwardBias", "conv2d_backward");
  }
  if (done.x || done.weight || done.bias) count_cudnn_convolution();
  return done;
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

#endif

}  // namespace tessera::detail::cuda
