// CUDA optimizer steps and gradient unscaling: one grid-stride kernel for up to 16 parameters
// (Note [One kernel for the parameters]), with the math of optimizer_math.h, which the CPU
// runs too. Tensors are contiguous, so indices are plain 64-bit offsets. A set found_inf makes
// every thread return before writing (GradScaler's skip, no host read).
#include "backend/cuda/kernel_utils.cuh"
#include "backend/optimizer_math.h"
#include "core/dispatch.h"

namespace tessera::detail::cuda {
namespace {

// Note [One kernel for the parameters]
// An optimizer step updates every parameter with a grad; one kernel per parameter made a
// recorded MLP step hold 4 optimizer nodes and LeNet's 10, each a few microseconds of a GPU
// that the small ones leave nearly idle. One launch steps up to kMaxStepsPerLaunch tensors
// (more take several): the kernel's parameters hold each tensor's pointers, size, flags and
// update, and a table of the blocks each tensor gets, in order (first_block), as PyTorch's
// multi_tensor_apply does. A block finds its tensor by a scan of that table and runs a
// grid-stride loop over it with the tensor's share of the blocks, so each tensor's elements
// see the math of a one-tensor kernel. Everything is in the kernel's parameter space (at
// most 4 KB on every architecture: static_assert below), nothing is copied to the device
// first, so a launch is legal inside a graph capture and replays with the same pointers.
// Two parameters over the same memory (two leaves made from one tensor) would race within a
// launch, as they do in PyTorch's multi-tensor steps; the CPU steps them one after the other.
constexpr int kMaxStepsPerLaunch = 16;

// Blocks of each tensor: [first_block[k], first_block[k + 1]).
struct BlockTable {
  std::uint32_t first_block[kMaxStepsPerLaunch + 1];
  int count;

  // The tensor that block `b` works on.
  __device__ int tensor_of(std::uint32_t b) const {
    int k = 0;
    while (k + 1 < count && b >= first_block[k + 1]) ++k;
    return k;
  }
};

template <typename T>
struct SgdList {
  T* w[kMaxStepsPerLaunch];
  const T* g[kMaxStepsPerLaunch];
  T* buf[kMaxStepsPerLaunch];  // nullptr without momentum
  std::int64_t n[kMaxStepsPerLaunch];
  StepFlags flags[kMaxStepsPerLaunch];
  bool first_step[kMaxStepsPerLaunch];
  SgdUpdate<T> update;
  BlockTable blocks;
};

template <typename T>
__global__ void sgd_kernel(SgdList<T> a) {
  const int k = a.blocks.tensor_of(blockIdx.x);
  const StepFlags flags = a.flags[k];
  if (flags.found_inf != nullptr && *flags.found_inf != 0) return;
  const bool first_step =
      a.first_step[k] || (flags.first_step != nullptr && *flags.first_step != 0);
  T* w = a.w[k];
  const T* g = a.g[k];
  T* buf = a.buf[k];
  const std::int64_t n = a.n[k], first = a.blocks.first_block[k];
  const std::int64_t stride = (a.blocks.first_block[k + 1] - first) * blockDim.x;
  for (std::int64_t i = (blockIdx.x - first) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if (buf != nullptr) {
      a.update(w[i], g[i], buf[i], first_step);
    } else {
      a.update(w[i], g[i]);
    }
  }
}

template <typename T>
struct AdamList {
  T* w[kMaxStepsPerLaunch];
  const T* g[kMaxStepsPerLaunch];
  T* m[kMaxStepsPerLaunch];
  T* v[kMaxStepsPerLaunch];
  std::int64_t n[kMaxStepsPerLaunch];
  StepFlags flags[kMaxStepsPerLaunch];  // flags.step: the device's count, or nullptr
  AdamUpdate<T> update[kMaxStepsPerLaunch];
  AdamParams params;  // lr and betas, for a recorded step's corrections (the same for all)
  BlockTable blocks;
};

template <typename T>
__global__ void adam_kernel(AdamList<T> a) {
  const int k = a.blocks.tensor_of(blockIdx.x);
  const StepFlags flags = a.flags[k];
  if (flags.found_inf != nullptr && *flags.found_inf != 0) return;
  AdamUpdate<T> update = a.update[k];
  if (flags.step != nullptr) update.at_step(a.params, *flags.step);  // a recorded step
  T* w = a.w[k];
  const T* g = a.g[k];
  T* m = a.m[k];
  T* v = a.v[k];
  const std::int64_t n = a.n[k], first = a.blocks.first_block[k];
  const std::int64_t stride = (a.blocks.first_block[k + 1] - first) * blockDim.x;
  for (std::int64_t i = (blockIdx.x - first) * blockDim.x + threadIdx.x; i < n; i += stride) {
    update(w[i], g[i], m[i], v[i]);
  }
}

static_assert(sizeof(SgdList<double>) <= 4096 && sizeof(AdamList<double>) <= 4096,
              "a kernel's parameters must fit in 4 KB on every architecture");

// Appends a tensor of n elements (n > 0) to the table; its blocks as a one-tensor launch of
// `Kernel` would have.
template <auto Kernel>
void add_blocks(BlockTable& t, std::int64_t n) {
  t.first_block[t.count + 1] =
      t.first_block[t.count] + static_cast<std::uint32_t>(grid_for<Kernel>(n));
  ++t.count;
}

// g *= inv_scale; any non-finite element sets found_inf (racing threads all write 1).
template <typename T>
__global__ void unscale_kernel(T* g, std::int64_t n, const float* inv_scale, float* found_inf) {
  const T inv = static_cast<T>(*inv_scale);
  bool bad = false;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    bad |= unscale_element(g[i], inv);
  }
  if (bad) *found_inf = 1.0f;
}

}  // namespace

namespace {

// Every operand checked before the first launch: a list refused half-way would leave some
// parameters stepped and the optimizer's state not knowing which.
template <typename StepArg>
void expect_one_dtype(std::span<const StepArg> steps, const char* what) {
  for (const StepArg& step : steps) {
    TESSERA_CUDA_EXPECT(step.param.dtype == steps.front().param.dtype &&
                            step.grad.dtype == step.param.dtype &&
                            step.grad.numel == step.param.numel,
                        what);
  }
}

}  // namespace

void launch_sgd_steps(StreamHandle s, std::span<const SgdStepArg> steps, const SgdParams& p) {
  if (steps.empty()) return;
  expect_one_dtype(steps, "sgd_step operands differ in dtype or size");
  const auto stream = static_cast<cudaStream_t>(s);
  dispatch_floating(steps.front().param.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    SgdList<T> a{};
    a.update = SgdUpdate<T>(p);
    const auto launch = [&] {
      if (a.blocks.count == 0) return;
      sgd_kernel<T><<<a.blocks.first_block[a.blocks.count], kThreads, 0, stream>>>(a);
      TESSERA_CUDA_CHECK_LAUNCH(stream, "sgd_step");
      a.blocks.count = 0;
    };
    for (const SgdStepArg& step : steps) {
      if (step.param.numel == 0) continue;
      const int k = a.blocks.count;
      a.w[k] = static_cast<T*>(step.param.data);
      a.g[k] = static_cast<const T*>(step.grad.data);
      a.buf[k] = static_cast<T*>(step.momentum_buf.data);
      a.n[k] = step.param.numel;
      a.flags[k] = step.flags;
      a.first_step[k] = step.first_step;
      add_blocks<sgd_kernel<T>>(a.blocks, step.param.numel);
      if (a.blocks.count == kMaxStepsPerLaunch) launch();
    }
    launch();
  });
}

void launch_adam_steps(StreamHandle s, std::span<const AdamStepArg> steps) {
  if (steps.empty()) return;
  expect_one_dtype(steps, "adam_step operands differ in dtype or size");
  const auto stream = static_cast<cudaStream_t>(s);
  dispatch_floating(steps.front().param.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    AdamList<T> a{};
    const auto launch = [&] {
      if (a.blocks.count == 0) return;
      adam_kernel<T><<<a.blocks.first_block[a.blocks.count], kThreads, 0, stream>>>(a);
      TESSERA_CUDA_CHECK_LAUNCH(stream, "adam_step");
      a.blocks.count = 0;
    };
    for (const AdamStepArg& step : steps) {
      if (step.param.numel == 0) continue;
      // A recorded step's corrections come from the launch's one lr and betas.
      if (a.blocks.count > 0 && (step.p.lr != a.params.lr || step.p.beta1 != a.params.beta1 ||
                                 step.p.beta2 != a.params.beta2)) {
        launch();
      }
      const int k = a.blocks.count;
      a.w[k] = static_cast<T*>(step.param.data);
      a.g[k] = static_cast<const T*>(step.grad.data);
      a.m[k] = static_cast<T*>(step.m.data);
      a.v[k] = static_cast<T*>(step.v.data);
      a.n[k] = step.param.numel;
      a.flags[k] = step.flags;
      a.update[k] = AdamUpdate<T>(step.p);
      a.params = step.p;
      add_blocks<adam_kernel<T>>(a.blocks, step.param.numel);
      if (a.blocks.count == kMaxStepsPerLaunch) launch();
    }
    launch();
  });
}

void launch_unscale_grad(StreamHandle s, const KernelArg& grad, const float* inv_scale,
                         float* found_inf) {
  if (grad.numel == 0) return;
  const auto stream = static_cast<cudaStream_t>(s);
  dispatch_floating(grad.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto* g = static_cast<T*>(grad.data);
    unscale_kernel<T><<<grid_for<unscale_kernel<T>>(grad.numel), kThreads, 0, stream>>>(
        g, grad.numel, inv_scale, found_inf);
  });
  TESSERA_CUDA_CHECK_LAUNCH(stream, "unscale_grad");
}

}  // namespace tessera::detail::cuda
