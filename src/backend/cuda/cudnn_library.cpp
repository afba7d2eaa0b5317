// Opens libcudnn with dlopen and resolves its entry points, once per process
// (cudnn_library.h, Note [cuDNN at run time] in cudnn_conv.cpp).
#include "backend/cuda/cudnn_library.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend/cuda/shared_library.h"
#include "tessera/error.h"

namespace tessera::detail::cuda {
namespace {

std::atomic<std::uint64_t> convolutions{0};

}  // namespace

std::vector<std::string> cudnn_candidates(const char* env) {
  // When set, the only library tried: a mistyped path should fail loudly rather than
  // quietly load another cuDNN from the system.
  if (env != nullptr && *env != '\0') return {env};
  return {"libcudnn.so.9"};
}

std::uint64_t cudnn_convolutions() { return convolutions.load(std::memory_order_relaxed); }
void count_cudnn_convolution() { convolutions.fetch_add(1, std::memory_order_relaxed); }

#if TESSERA_HAVE_CUDNN
namespace {

constexpr const char* kHowToGetCudnn =
    "install cuDNN 9 for CUDA 13 and put libcudnn.so.9 on LD_LIBRARY_PATH, or point "
    "TESSERA_CUDNN_LIBRARY at one (e.g. after `pip install nvidia-cudnn-cu13`: "
    "TESSERA_CUDNN_LIBRARY=<site-packages>/nvidia/cudnn/lib/libcudnn.so.9); or set "
    "TESSERA_CUDNN=0 to run GPU convolutions without cuDNN (im2col and cuBLAS)";

// Whether TESSERA_CUDNN=0 turned cuDNN off.
bool turned_off() {
  const char* env = std::getenv("TESSERA_CUDNN");
  return env != nullptr && std::strcmp(env, "0") == 0;
}

}  // namespace

std::string CudnnLibrary::version_string() const {
  // From cuDNN 9 on the code is X*10000 + Y*100 + Z, before it X*1000 + Y*100 + Z.
  if (version >= 90000) {
    return fmt::format("{}.{}.{}", version / 10000, version / 100 % 100, version % 100);
  }
  return fmt::format("{}.{}.{}", version / 1000, version / 100 % 10, version % 100);
}

CudnnLoad open_cudnn(const std::vector<std::string>& names) {
  CudnnLoad out;
  CudnnLibrary& lib = out.library;
  // libcudnn.so.9 opens its sub-libraries (libcudnn_cnn.so.9, ...) from its own directory
  // (its RUNPATH is $ORIGIN). Handles and descriptors made from it live on.
  const OpenedLibrary opened = open_first_library(names);
  void* const handle = opened.handle;
  if (handle == nullptr) {
    out.error = fmt::format("[conv2d] cuDNN could not be loaded: tried {}. To fix, {}",
                            fmt::join(opened.tried, "; "), kHowToGetCudnn);
    return out;
  }
  lib.path = opened.path;
  std::vector<std::string> missing;
  resolve(handle, "cudnnGetVersion", lib.get_version, missing);
  resolve(handle, "cudnnGetErrorString", lib.get_error_string, missing);
  resolve(handle, "cudnnCreate", lib.create, missing);
  resolve(handle, "cudnnSetStream", lib.set_stream, missing);
  resolve(handle, "cudnnCreateTensorDescriptor", lib.create_tensor, missing);
  resolve(handle, "cudnnSetTensor4dDescriptor", lib.set_tensor_4d, missing);
  resolve(handle, "cudnnDestroyTensorDescriptor", lib.destroy_tensor, missing);
  resolve(handle, "cudnnCreateFilterDescriptor", lib.create_filter, missing);
  resolve(handle, "cudnnSetFilter4dDescriptor", lib.set_filter_4d, missing);
  resolve(handle, "cudnnDestroyFilterDescriptor", lib.destroy_filter, missing);
  resolve(handle, "cudnnCreateConvolutionDescriptor", lib.create_convolution, missing);
  resolve(handle, "cudnnSetConvolution2dDescriptor", lib.set_convolution_2d, missing);
  resolve(handle, "cudnnSetConvolutionMathType", lib.set_math_type, missing);
  resolve(handle, "cudnnDestroyConvolutionDescriptor", lib.destroy_convolution, missing);
  resolve(handle, "cudnnGetConvolutionForwardAlgorithm_v7", lib.forward_algorithms, missing);
  resolve(handle, "cudnnGetConvolutionForwardWorkspaceSize", lib.forward_workspace, missing);
  resolve(handle, "cudnnConvolutionForward", lib.forward, missing);
  resolve(handle, "cudnnGetConvolutionBackwardDataAlgorithm_v7", lib.backward_data_algorithms,
          missing);
  resolve(handle, "cudnnGetConvolutionBackwardDataWorkspaceSize", lib.backward_data_workspace,
          missing);
  resolve(handle, "cudnnConvolutionBackwardData", lib.backward_data, missing);
  resolve(handle, "cudnnGetConvolutionBackwardFilterAlgorithm_v7", lib.backward_filter_algorithms,
          missing);
  resolve(handle, "cudnnGetConvolutionBackwardFilterWorkspaceSize", lib.backward_filter_workspace,
          missing);
  resolve(handle, "cudnnConvolutionBackwardFilter", lib.backward_filter, missing);
  resolve(handle, "cudnnConvolutionBackwardBias", lib.backward_bias, missing);
  resolve(handle, "cudnnAddTensor", lib.add_tensor, missing);
  if (!missing.empty()) {
    out.error = fmt::format("[conv2d] {} lacks {}: it is not cuDNN 8 or 9. To fix, {}", lib.path,
                            fmt::join(missing, ", "), kHowToGetCudnn);
    return out;
  }
  lib.version = lib.get_version();  // needs no GPU
  if (lib.version < 8000) {
    out.error = fmt::format(
        "[conv2d] {} reports version code {}; tessera needs cuDNN 8 or later. To fix, {}", lib.path,
        lib.version, kHowToGetCudnn);
  }
  return out;
}

const CudnnLibrary* cudnn_library() {
  // A function-local static: initialized once, thread-safe, and only when the first GPU
  // convolution asks, so no static initializer ever touches cuDNN.
  static const CudnnLoad* const result = [] {
    if (turned_off()) return new CudnnLoad{{}, "off"};
    return new CudnnLoad(open_cudnn(cudnn_candidates(std::getenv("TESSERA_CUDNN_LIBRARY"))));
  }();
  if (result->error.empty()) return &result->library;
  const char* named = std::getenv("TESSERA_CUDNN_LIBRARY");
  if (result->error != "off" && named != nullptr && *named != '\0') {
    throw DeviceError(result->error);
  }
  return nullptr;  // off, or none on the loader's path: im2col
}

void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* op, const char* file,
                       int line) {
  const CudnnLibrary* lib = cudnn_library();
  const char* found = lib != nullptr ? lib->get_error_string(status) : nullptr;
  const std::string where = lib != nullptr
                                ? fmt::format("{} (cuDNN {})", lib->path, lib->version_string())
                                : std::string("cuDNN");
  if (status == CUDNN_STATUS_ALLOC_FAILED) {
    throw OutOfMemoryError(fmt::format(
        "[{}] cuDNN could not allocate memory on the GPU ({} at {}:{}, with {}); free tensors "
        "or use smaller batches, or set TESSERA_CUDNN=0 to convolve without cuDNN",
        op, call, file, line, where));
  }
  throw Error(
      fmt::format("[{}] {} failed: {} (cudnnStatus_t {}) at {}:{}, with {}. Set "
                  "TESSERA_CUDNN=0 to convolve without cuDNN (im2col and cuBLAS)",
                  op, call, found != nullptr ? found : "unknown error", static_cast<int>(status),
                  file, line, where));
}
#endif

}  // namespace tessera::detail::cuda
