#pragma once
// cuDNN, opened with dlopen on the first convolution and never linked (Note [cuDNN at run
// time] in cudnn_conv.cpp). Its types come from <cudnn.h>; a toolkit without that header
// builds tessera without the cuDNN path (TESSERA_HAVE_CUDNN 0: every GPU convolution is
// im2col + cuBLAS).
#include <cstdint>
#include <string>
#include <vector>

#if __has_include(<cudnn.h>)
#include <cudnn.h>
#define TESSERA_HAVE_CUDNN 1
#else
#define TESSERA_HAVE_CUDNN 0
#endif

namespace tessera::detail::cuda {

#if TESSERA_HAVE_CUDNN
// The entry points of the loaded libcudnn (the "legacy" convolution API, which cuDNN 9 keeps in
// libcudnn_cnn and its libcudnn.so.9 exports), resolved with dlsym. The pointer types are
// cudnn.h's own declarations, and the library must have cudnn.h's major version: the status
// codes and structs differ between majors.
struct CudnnLibrary {
  decltype(&::cudnnGetVersion) get_version = nullptr;
  decltype(&::cudnnGetErrorString) get_error_string = nullptr;
  decltype(&::cudnnGraphVersionCheck) graph_version_check = nullptr;
  decltype(&::cudnnOpsVersionCheck) ops_version_check = nullptr;
  decltype(&::cudnnCnnVersionCheck) cnn_version_check = nullptr;
  decltype(&::cudnnCreate) create = nullptr;
  decltype(&::cudnnDestroy) destroy = nullptr;
  decltype(&::cudnnSetStream) set_stream = nullptr;
  decltype(&::cudnnCreateTensorDescriptor) create_tensor = nullptr;
  decltype(&::cudnnSetTensor4dDescriptor) set_tensor_4d = nullptr;
  decltype(&::cudnnDestroyTensorDescriptor) destroy_tensor = nullptr;
  decltype(&::cudnnCreateFilterDescriptor) create_filter = nullptr;
  decltype(&::cudnnSetFilter4dDescriptor) set_filter_4d = nullptr;
  decltype(&::cudnnDestroyFilterDescriptor) destroy_filter = nullptr;
  decltype(&::cudnnCreateConvolutionDescriptor) create_convolution = nullptr;
  decltype(&::cudnnSetConvolution2dDescriptor) set_convolution_2d = nullptr;
  decltype(&::cudnnSetConvolutionMathType) set_math_type = nullptr;
  decltype(&::cudnnDestroyConvolutionDescriptor) destroy_convolution = nullptr;
  decltype(&::cudnnGetConvolutionForwardAlgorithmMaxCount) forward_algorithm_count = nullptr;
  decltype(&::cudnnGetConvolutionForwardAlgorithm_v7) forward_algorithms = nullptr;
  decltype(&::cudnnGetConvolutionForwardWorkspaceSize) forward_workspace = nullptr;
  decltype(&::cudnnConvolutionForward) forward = nullptr;
  decltype(&::cudnnGetConvolutionBackwardDataAlgorithmMaxCount) backward_data_algorithm_count =
      nullptr;
  decltype(&::cudnnGetConvolutionBackwardDataAlgorithm_v7) backward_data_algorithms = nullptr;
  decltype(&::cudnnGetConvolutionBackwardDataWorkspaceSize) backward_data_workspace = nullptr;
  decltype(&::cudnnConvolutionBackwardData) backward_data = nullptr;
  decltype(&::cudnnGetConvolutionBackwardFilterAlgorithmMaxCount) backward_filter_algorithm_count =
      nullptr;
  decltype(&::cudnnGetConvolutionBackwardFilterAlgorithm_v7) backward_filter_algorithms = nullptr;
  decltype(&::cudnnGetConvolutionBackwardFilterWorkspaceSize) backward_filter_workspace = nullptr;
  decltype(&::cudnnConvolutionBackwardFilter) backward_filter = nullptr;
  decltype(&::cudnnConvolutionBackwardBias) backward_bias = nullptr;
  decltype(&::cudnnAddTensor) add_tensor = nullptr;

  std::string path;         // what dlopen was given
  std::size_t version = 0;  // cudnnGetVersion's code: 91900 for 9.19.0 (8907 for 8.9.7)

  // "9.19.0"
  std::string version_string() const;
};

// What opening cuDNN gave: the library, or why there is no usable one.
struct CudnnLoad {
  CudnnLibrary library;
  std::string error;  // "" when the library is usable
};

// Tries each name with dlopen in turn, resolves the entry points from the first that opens
// and checks its version (cudnn.h's major) and its sub-libraries' (cuDNN's own checks, which
// load them); a name with a directory has its sub-libraries loaded from that directory
// first. Never throws; cudnn_library() calls it once with cudnn_candidates(), tests with
// names of their own.
CudnnLoad open_cudnn(const std::vector<std::string>& names);

// The library for convolutions, loaded on the first call (thread-safe; the outcome is kept
// for the process), or nullptr where GPU convolutions go without it: TESSERA_CUDNN=0, or no
// libcudnn on the loader's path. Throws DeviceError, naming the file and how to fix it, when
// TESSERA_CUDNN_LIBRARY names a library that does not load or is not cuDNN of cudnn.h's
// major version: a path the user gave fails loudly rather than quietly running another
// algorithm. After cudnn_unusable(), nullptr (or that DeviceError) too.
const CudnnLibrary* cudnn_library();

// cudnn_library() where a call to it has loaded the library already, else nullptr (loads
// nothing: for making handles ahead of a graph capture only where cuDNN is in use).
const CudnnLibrary* cudnn_library_if_loaded();

// The library loaded but cannot run here (its first handle could not be made: `why`): from
// now on GPU convolutions go without it, or, where TESSERA_CUDNN_LIBRARY named it, fail with
// a DeviceError saying why (thrown here too).
void cudnn_unusable(const std::string& why);

[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* op,
                                    const char* file, int line);
#endif

// The names to try: `tessera_cudnn_library` (TESSERA_CUDNN_LIBRARY's value, may be null)
// alone when it is set, else libcudnn.so.9 from the loader's search path (cuDNN 9 is the one
// built for CUDA 13).
std::vector<std::string> cudnn_candidates(const char* tessera_cudnn_library);

// How many times cuDNN has run each part of a convolution in this process (queued it, or
// recorded it into a graph): lets the GPU tests check that the path they meant to test is
// the one that ran.
struct CudnnRuns {
  std::uint64_t forward = 0, input_gradient = 0, weight_gradient = 0, bias_gradient = 0;
};
CudnnRuns cudnn_runs();
enum class CudnnPart { kForward, kInputGradient, kWeightGradient, kBiasGradient };
void count_cudnn_run(CudnnPart part);

}  // namespace tessera::detail::cuda

#if TESSERA_HAVE_CUDNN
// Every cuDNN call goes through this; `op` names the tessera op in the message.
#define TESSERA_CUDNN_CHECK(call, op)                                                             \
  do {                                                                                            \
    const cudnnStatus_t tessera_status_ = (call);                                                 \
    if (tessera_status_ != CUDNN_STATUS_SUCCESS) [[unlikely]] {                                   \
      ::tessera::detail::cuda::throw_cudnn_error(tessera_status_, #call, op, __FILE__, __LINE__); \
    }                                                                                             \
  } while (false)
#endif
