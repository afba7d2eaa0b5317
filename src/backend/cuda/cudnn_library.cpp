// Opens libcudnn with dlopen and resolves its entry points, once per process
// (cudnn_library.h, Note [cuDNN at run time] in cudnn_conv.cpp).
#include "backend/cuda/cudnn_library.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend/cuda/shared_library.h"
#include "tessera/error.h"

namespace tessera::detail::cuda {
namespace {

std::atomic<std::uint64_t> runs[4] = {};  // per CudnnPart

}  // namespace

std::vector<std::string> cudnn_candidates(const char* env) {
  // When set, the only library tried: a mistyped path should fail loudly rather than
  // quietly load another cuDNN from the system.
  if (env != nullptr && *env != '\0') return {env};
  return {"libcudnn.so.9"};
}

CudnnRuns cudnn_runs() {
  const auto of = [](CudnnPart p) {
    return runs[static_cast<int>(p)].load(std::memory_order_relaxed);
  };
  return {of(CudnnPart::kForward), of(CudnnPart::kInputGradient), of(CudnnPart::kWeightGradient),
          of(CudnnPart::kBiasGradient)};
}
void count_cudnn_run(CudnnPart part) {
  runs[static_cast<int>(part)].fetch_add(1, std::memory_order_relaxed);
}

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
  // libcudnn.so.9 opens its sub-libraries (libcudnn_cnn.so.9, ...) by name, so the loader's
  // path (LD_LIBRARY_PATH first) decides which copies run, not the directory of the file
  // named: a toolkit's cuDNN on LD_LIBRARY_PATH would run under a pip library's name. Where
  // a name has a directory, the sub-libraries in the directory of the file it leads to
  // (through symbolic links) are opened first, before the library itself; its names then
  // find them loaded. Handles and descriptors made from them live on: never closed.
  for (const std::string& name : names) {
    if (name.find('/') == std::string::npos) continue;
    std::error_code ec;
    const std::filesystem::path real = std::filesystem::canonical(name, ec);
    if (ec) continue;  // not there: open_first_library says so below
    const std::string failed =
        open_beside(real.parent_path().string() + "/",
                    {"libcudnn_graph.so.9", "libcudnn_ops.so.9", "libcudnn_cnn.so.9",
                     "libcudnn_engines_precompiled.so.9", "libcudnn_engines_runtime_compiled.so.9",
                     "libcudnn_heuristic.so.9"});
    if (!failed.empty()) {
      out.error =
          fmt::format("[conv2d] {} is there but its sub-libraries are not usable: {}. To fix, {}",
                      name, failed, kHowToGetCudnn);
      return out;
    }
    break;  // the first such name that exists is the one open_first_library opens
  }
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
  resolve(handle, "cudnnGraphVersionCheck", lib.graph_version_check, missing);
  resolve(handle, "cudnnOpsVersionCheck", lib.ops_version_check, missing);
  resolve(handle, "cudnnCnnVersionCheck", lib.cnn_version_check, missing);
  resolve(handle, "cudnnCreate", lib.create, missing);
  resolve(handle, "cudnnDestroy", lib.destroy, missing);
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
  resolve(handle, "cudnnGetConvolutionForwardAlgorithmMaxCount", lib.forward_algorithm_count,
          missing);
  resolve(handle, "cudnnGetConvolutionForwardAlgorithm_v7", lib.forward_algorithms, missing);
  resolve(handle, "cudnnGetConvolutionForwardWorkspaceSize", lib.forward_workspace, missing);
  resolve(handle, "cudnnConvolutionForward", lib.forward, missing);
  resolve(handle, "cudnnGetConvolutionBackwardDataAlgorithmMaxCount",
          lib.backward_data_algorithm_count, missing);
  resolve(handle, "cudnnGetConvolutionBackwardDataAlgorithm_v7", lib.backward_data_algorithms,
          missing);
  resolve(handle, "cudnnGetConvolutionBackwardDataWorkspaceSize", lib.backward_data_workspace,
          missing);
  resolve(handle, "cudnnConvolutionBackwardData", lib.backward_data, missing);
  resolve(handle, "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount",
          lib.backward_filter_algorithm_count, missing);
  resolve(handle, "cudnnGetConvolutionBackwardFilterAlgorithm_v7", lib.backward_filter_algorithms,
          missing);
  resolve(handle, "cudnnGetConvolutionBackwardFilterWorkspaceSize", lib.backward_filter_workspace,
          missing);
  resolve(handle, "cudnnConvolutionBackwardFilter", lib.backward_filter, missing);
  resolve(handle, "cudnnConvolutionBackwardBias", lib.backward_bias, missing);
  resolve(handle, "cudnnAddTensor", lib.add_tensor, missing);
  if (!missing.empty()) {
    out.error = fmt::format("[conv2d] {} lacks {}: it is not cuDNN {}. To fix, {}", lib.path,
                            fmt::join(missing, ", "), CUDNN_MAJOR, kHowToGetCudnn);
    return out;
  }
  lib.version = lib.get_version();  // needs no GPU
  // Another major has other status codes and structs than the cudnn.h tessera was built with.
  const std::size_t major = lib.version >= 90000 ? lib.version / 10000 : lib.version / 1000;
  if (major != CUDNN_MAJOR) {
    out.error = fmt::format(
        "[conv2d] {} is cuDNN {} (version code {}); this tessera was built against cuDNN {}'s "
        "headers and needs that major version. To fix, {}",
        lib.path, lib.version_string(), lib.version, CUDNN_MAJOR, kHowToGetCudnn);
    return out;
  }
  // cuDNN's own checks that its sub-libraries load and match it (they need no GPU).
  for (const auto& [name, check] : {std::pair{"libcudnn_graph", lib.graph_version_check},
                                    std::pair{"libcudnn_ops", lib.ops_version_check},
                                    std::pair{"libcudnn_cnn", lib.cnn_version_check}}) {
    const cudnnStatus_t status = check();
    if (status != CUDNN_STATUS_SUCCESS) {
      out.error = fmt::format(
          "[conv2d] {}'s sub-library {} does not load or does not match it: {} (cudnnStatus_t "
          "{}). To fix, {}",
          lib.path, name, lib.get_error_string(status), static_cast<int>(status), kHowToGetCudnn);
      return out;
    }
  }
  return out;
}

namespace {

std::atomic<const CudnnLibrary*> loaded_library{nullptr};
std::mutex unusable_mutex;
std::string unusable_reason;  // under unusable_mutex; "" while usable
std::atomic<bool> unusable{false};

// The DeviceError for a library that TESSERA_CUDNN_LIBRARY named, when it is not usable.
void throw_if_named(const std::string& why) {
  const char* named = std::getenv("TESSERA_CUDNN_LIBRARY");
  if (named != nullptr && *named != '\0') throw DeviceError(why);
}

}  // namespace

const CudnnLibrary* cudnn_library() {
  // A function-local static: initialized once, thread-safe, and only when the first GPU
  // convolution asks, so no static initializer ever touches cuDNN.
  static const CudnnLoad* const result = [] {
    if (turned_off()) return new CudnnLoad{{}, "off"};
    auto* load = new CudnnLoad(open_cudnn(cudnn_candidates(std::getenv("TESSERA_CUDNN_LIBRARY"))));
    if (load->error.empty()) loaded_library.store(&load->library, std::memory_order_release);
    return load;
  }();
  if (unusable.load(std::memory_order_acquire)) {
    std::lock_guard lock(unusable_mutex);
    throw_if_named(unusable_reason);
    return nullptr;
  }
  if (result->error.empty()) return &result->library;
  if (result->error != "off") throw_if_named(result->error);
  return nullptr;  // off, or none on the loader's path: im2col
}

const CudnnLibrary* cudnn_library_if_loaded() {
  if (unusable.load(std::memory_order_acquire)) return nullptr;
  return loaded_library.load(std::memory_order_acquire);
}

void cudnn_unusable(const std::string& why) {
  {
    std::lock_guard lock(unusable_mutex);
    if (unusable_reason.empty()) unusable_reason = why;
  }
  unusable.store(true, std::memory_order_release);
  throw_if_named(why);
}

void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* op, const char* file,
                       int line) {
  const CudnnLibrary* lib = loaded_library.load(std::memory_order_acquire);
  const char* found = lib != nullptr ? lib->get_error_string(status) : nullptr;
  const std::string where = lib != nullptr
                                ? fmt::format("{} (cuDNN {})", lib->path, lib->version_string())
                                : std::string("cuDNN");
  if (status == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
      status == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED) {
    throw OutOfMemoryError(fmt::format(
        "[{}] cuDNN could not allocate {} memory ({} at {}:{}, with {}); free tensors or use "
        "smaller batches, or set TESSERA_CUDNN=0 to convolve without cuDNN",
        op, status == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ? "host" : "GPU", call,
        file, line, where));
  }
  throw Error(
      fmt::format("[{}] {} failed: {} (cudnnStatus_t {}) at {}:{}, with {}. Set "
                  "TESSERA_CUDNN=0 to convolve without cuDNN (im2col and cuBLAS)",
                  op, call, found != nullptr ? found : "unknown error", static_cast<int>(status),
                  file, line, where));
}
#endif

}  // namespace tessera::detail::cuda
