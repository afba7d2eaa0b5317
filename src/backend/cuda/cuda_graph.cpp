// CUDA graph capture: the default stream records in relaxed mode (so the caching allocator
// may still cudaMalloc), allocations go to the graph's pool, and the executable graph keeps
// that pool until it is destroyed. See Note [CUDA caching allocator].
#include <fmt/format.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cudnn_conv.h"
#include "core/device_rules.h"
#include "tessera/graph.h"

namespace tessera::detail {

class CudaGraph final : public CapturedWork {
 public:
  CudaGraph(CudaBackend& backend, int index, cudaGraph_t graph, cudaGraphExec_t exec,
            std::shared_ptr<GraphPool> pool)
      : backend_(backend), index_(index), graph_(graph), exec_(exec), pool_(std::move(pool)) {}

  ~CudaGraph() override {
    // A launch still in flight is freed when it completes (cudaGraphExecDestroy), and
    // the pool's blocks are reused only by work queued after it on the same device, or
    // after the events of the side streams in use (a replay may have run on one).
    // A destructor does not throw: a GPU that cannot be made current has a broken context,
    // and its graph and memory are left as they are.
    try {
      backend_.activate(index_);
    } catch (...) {
      return;
    }
    (void)cudaGraphExecDestroy(exec_);
    (void)cudaGraphDestroy(graph_);
    backend_.release_pool(index_, pool_);
  }

  void replay() override { TESSERA_CUDA_CHECK(cudaGraphLaunch(exec_, backend_.activate(index_))); }

  std::size_t node_count() const override {
    std::size_t n = 0;
    TESSERA_CUDA_CHECK(cudaGraphGetNodes(graph_, nullptr, &n));
    return n;
  }

 private:
  CudaBackend& backend_;
  int index_;
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
  std::shared_ptr<GraphPool> pool_;
};

void CudaBackend::release_pool(int index, const std::shared_ptr<GraphPool>& pool) {
  PerDevice& d = devices_[index];
  cudaStream_t buf[1 + kExtraStreams];
  d.allocator->release(pool, streams_in_use(d, buf));
}

bool CudaBackend::capturing(int index) const {
  return devices_[index].capturing.load(std::memory_order_acquire);
}

void CudaBackend::begin_capture(const std::vector<int>& indices) {
  const int index = indices.front();
  const cudaStream_t stream = activate(index);  // the default stream, joins applied
  // cuBLAS's handle and workspace, cuBLASLt's handle and a cuDNN handle are made now, not
  // inside the recording.
  cublas(index);
  gemm_plans(index).create_handle();
  cuda::cudnn_prepare_capture(stream);  // and cuDNN's, where convolutions use it
  PerDevice& d = devices_[index];
  d.capture_pool = std::make_shared<GraphPool>();
  d.allocator->begin_capture(d.capture_pool);
  const cudaError_t status = cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed);
  if (status != cudaSuccess) {
    d.allocator->end_capture();
    d.capture_pool.reset();
    TESSERA_CUDA_CHECK(status);
  }
  d.capturing.store(true, std::memory_order_release);
}

namespace {

// Ends the recording on `stream`; the graph, or nullptr with `status` saying why not.
cudaGraph_t stop_recording(cudaStream_t stream, cudaError_t& status) {
  cudaGraph_t graph = nullptr;
  status = cudaStreamEndCapture(stream, &graph);
  if (status != cudaSuccess) (void)cudaGetLastError();
  return graph;
}

}  // namespace

std::unique_ptr<CapturedWork> CudaBackend::end_capture(const std::vector<int>& indices) {
  const int index = indices.front();
  PerDevice& d = devices_[index];
  cudaError_t status;
  cudaGraph_t graph = stop_recording(d.streams[0].stream, status);
  d.capturing.store(false, std::memory_order_release);
  d.allocator->end_capture();
  std::shared_ptr<GraphPool> pool = std::move(d.capture_pool);
  if (status != cudaSuccess || graph == nullptr) {
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    release_pool(index, pool);
    throw GraphCaptureError(fmt::format(
        "[Graph::capture] the recording on cuda:{} broke: {} ({}). Something in the captured "
        "code used the device in a way a graph cannot record (for example another thread "
        "queued work on it meanwhile)",
        index, cudaGetErrorString(status), cudaGetErrorName(status)));
  }
  cudaGraphExec_t exec = nullptr;
  status = cudaGraphInstantiate(&exec, graph, 0);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    (void)cudaGraphDestroy(graph);
    release_pool(index, pool);
    throw GraphCaptureError(
        fmt::format("[Graph::capture] cuda:{} could not instantiate the "
                    "recorded graph: {} ({})",
                    index, cudaGetErrorString(status), cudaGetErrorName(status)));
  }
  return std::make_unique<CudaGraph>(*this, index, graph, exec, std::move(pool));
}

void CudaBackend::abort_capture(const std::vector<int>& indices) {
  const int index = indices.front();
  PerDevice& d = devices_[index];
  cudaError_t status;
  if (cudaGraph_t graph = stop_recording(d.streams[0].stream, status)) {
    (void)cudaGraphDestroy(graph);
  }
  d.capturing.store(false, std::memory_order_release);
  d.allocator->end_capture();
  // Nothing recorded ever ran, so the pool's memory is free for any later work (blocks freed
  // during the capture wait for the streams in use, as any freed block).
  release_pool(index, d.capture_pool);
  d.capture_pool.reset();
}

}  // namespace tessera::detail
