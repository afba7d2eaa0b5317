// A stand-in for libcudnn with every entry point tessera resolves, for the loader's tests
// (cudnn_library_test.cpp): cudnnGetVersion reports TESSERA_FAKE_CUDNN_VERSION (a version
// code, e.g. 8907 for cuDNN 8.9.7), the sub-library checks return TESSERA_FAKE_CUDNN_CHECK
// (a status, 0 by default), and every other call fails. Only the C ABI matters here, so the
// arguments are not declared.
#include <cstddef>
#include <cstdlib>

namespace {
constexpr int kInternalError = 4000;

int check_status() {
  const char* v = std::getenv("TESSERA_FAKE_CUDNN_CHECK");
  return v != nullptr ? std::atoi(v) : 0;
}
}  // namespace

extern "C" {

std::size_t cudnnGetVersion() {
  const char* v = std::getenv("TESSERA_FAKE_CUDNN_VERSION");
  return v != nullptr ? static_cast<std::size_t>(std::atol(v)) : 8907;
}
const char* cudnnGetErrorString(int) { return "fake cuDNN"; }
int cudnnGraphVersionCheck() { return check_status(); }
int cudnnOpsVersionCheck() { return check_status(); }
int cudnnCnnVersionCheck() { return check_status(); }

int cudnnCreate() { return kInternalError; }
int cudnnDestroy() { return kInternalError; }
int cudnnSetStream() { return kInternalError; }
int cudnnCreateTensorDescriptor() { return kInternalError; }
int cudnnSetTensor4dDescriptor() { return kInternalError; }
int cudnnDestroyTensorDescriptor() { return kInternalError; }
int cudnnCreateFilterDescriptor() { return kInternalError; }
int cudnnSetFilter4dDescriptor() { return kInternalError; }
int cudnnDestroyFilterDescriptor() { return kInternalError; }
int cudnnCreateConvolutionDescriptor() { return kInternalError; }
int cudnnSetConvolution2dDescriptor() { return kInternalError; }
int cudnnSetConvolutionMathType() { return kInternalError; }
int cudnnDestroyConvolutionDescriptor() { return kInternalError; }
int cudnnGetConvolutionForwardAlgorithmMaxCount() { return kInternalError; }
int cudnnGetConvolutionForwardAlgorithm_v7() { return kInternalError; }
int cudnnGetConvolutionForwardWorkspaceSize() { return kInternalError; }
int cudnnConvolutionForward() { return kInternalError; }
int cudnnGetConvolutionBackwardDataAlgorithmMaxCount() { return kInternalError; }
int cudnnGetConvolutionBackwardDataAlgorithm_v7() { return kInternalError; }
int cudnnGetConvolutionBackwardDataWorkspaceSize() { return kInternalError; }
int cudnnConvolutionBackwardData() { return kInternalError; }
int cudnnGetConvolutionBackwardFilterAlgorithmMaxCount() { return kInternalError; }
int cudnnGetConvolutionBackwardFilterAlgorithm_v7() { return kInternalError; }
int cudnnGetConvolutionBackwardFilterWorkspaceSize() { return kInternalError; }
int cudnnConvolutionBackwardFilter() { return kInternalError; }
int cudnnConvolutionBackwardBias() { return kInternalError; }
int cudnnAddTensor() { return kInternalError; }

}  // extern "C"
