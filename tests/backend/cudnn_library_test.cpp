// Opening cuDNN at run time (backend/cuda/cudnn_library.h): the names tried, the library the
// CUDA toolkit ships (which opens and reports its version without a GPU), the errors for a
// missing library and one that is not cuDNN; and, on a GPU, that float32 convolutions run
// on cuDNN where it is loaded (Note [cuDNN at run time] in backend/cuda/cudnn_conv.cpp).
#if TESSERA_TEST_WITH_CUDA

#include "backend/cuda/cudnn_library.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "support/device_test.h"
#include "support/run_time_library.h"
#include "support/temp_dir.h"
#include "tessera/tessera.h"

namespace tessera::detail::cuda {
namespace {

using testing::expect_says;

TEST(CudnnLibrary, TheVariableIsTheOnlyNameTriedWhenSet) {
  EXPECT_EQ(cudnn_candidates("/opt/cudnn/libcudnn.so.9"),
            std::vector<std::string>{"/opt/cudnn/libcudnn.so.9"});
  const std::vector<std::string> search = {"libcudnn.so.9"};
  EXPECT_EQ(cudnn_candidates(nullptr), search);
  EXPECT_EQ(cudnn_candidates(""), search);
}

#if TESSERA_HAVE_CUDNN

TEST(CudnnLibrary, VersionCodesReadAsCudnnWritesThem) {
  CudnnLibrary lib;
  lib.version = 91900;  // from 9 on: X*10000 + Y*100 + Z
  EXPECT_EQ(lib.version_string(), "9.19.0");
  lib.version = 8907;  // before 9: X*1000 + Y*100 + Z
  EXPECT_EQ(lib.version_string(), "8.9.7");
}

TEST(CudnnLibrary, ARealLibraryOpensAndMakesDescriptorsWithoutAGpu) {
  const std::string path =
      testing::existing_library("TESSERA_CUDNN_LIBRARY", TESSERA_TEST_TOOLKIT_CUDNN);
  if (path.empty()) GTEST_SKIP() << "no libcudnn.so.9 on this machine (set TESSERA_CUDNN_LIBRARY)";
  const CudnnLoad load = open_cudnn({"/nonexistent/libcudnn.so.9", path});
  ASSERT_EQ(load.error, "");
  const CudnnLibrary& lib = load.library;
  EXPECT_EQ(lib.path, path);  // the first name that opens
  EXPECT_EQ(lib.version / 10000, static_cast<std::size_t>(CUDNN_MAJOR));
  EXPECT_TRUE(std::regex_match(lib.version_string(), std::regex(R"(9\.\d+\.\d+)")))
      << lib.version_string();
  // cuDNN's own checks of its sub-libraries passed (the load would have failed otherwise),
  // and they pass again.
  EXPECT_EQ(lib.cnn_version_check(), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(lib.get_version(), lib.version);
  EXPECT_NE(lib.get_error_string(CUDNN_STATUS_BAD_PARAM), nullptr);
  // What a plan makes first (cudnn_conv.cpp): descriptors are host objects.
  cudnnTensorDescriptor_t x = nullptr;
  ASSERT_EQ(lib.create_tensor(&x), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(lib.set_tensor_4d(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 3, 5, 7),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(
      CUDNN_STATUS_CATEGORY(lib.set_tensor_4d(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 0, -3, 5, 7)),
      CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(lib.destroy_tensor(x), CUDNN_STATUS_SUCCESS);
  cudnnConvolutionDescriptor_t conv = nullptr;
  ASSERT_EQ(lib.create_convolution(&conv), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(
      lib.set_convolution_2d(conv, 1, 1, 2, 2, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
      CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(lib.set_math_type(conv, CUDNN_FMA_MATH), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(lib.destroy_convolution(conv), CUDNN_STATUS_SUCCESS);
}

// A library named through a symbolic link (as a user's lib/ may hold one) opens, its
// sub-libraries taken from the directory the link leads to.
TEST(CudnnLibrary, ALibraryNamedThroughASymbolicLinkOpens) {
  const std::string path =
      testing::existing_library("TESSERA_CUDNN_LIBRARY", TESSERA_TEST_TOOLKIT_CUDNN);
  if (path.empty()) GTEST_SKIP() << "no libcudnn.so.9 on this machine (set TESSERA_CUDNN_LIBRARY)";
  const testing::TempDir dir("cudnn-link");
  const std::filesystem::path link = dir.path() / "libcudnn.so.9";
  std::filesystem::create_symlink(path, link);
  const CudnnLoad load = open_cudnn({link.string()});
  EXPECT_EQ(load.error, "");
  EXPECT_EQ(load.library.path, link.string());
}

TEST(CudnnLibrary, AMissingLibraryNamesEveryNameTriedAndHowToGetOne) {
  const CudnnLoad load =
      open_cudnn({"/nonexistent/a/libcudnn.so.9", "/nonexistent/b/libcudnn.so.9"});
  expect_says(load.error, {"[conv2d] cuDNN could not be loaded", "/nonexistent/a/libcudnn.so.9 (",
                           "/nonexistent/b/libcudnn.so.9 (", "TESSERA_CUDNN_LIBRARY",
                           "pip install nvidia-cudnn-cu13", "TESSERA_CUDNN=0"});
}

TEST(CudnnLibrary, ALibraryThatIsNotCudnnIsRefusedNamingWhatItLacks) {
  const CudnnLoad load = open_cudnn({"libz.so.1"});  // linked into the tests, so it opens
  expect_says(load.error,
              {"libz.so.1 lacks cudnnGetVersion, cudnnGetErrorString, cudnnGraphVersionCheck",
               "it is not cuDNN 9", "TESSERA_CUDNN_LIBRARY"});
}

// The fake library is built beside the tests; a copy of the test binary elsewhere (the
// GPU bundle of scripts/gpu-bundle) runs without it.
#define SKIP_WITHOUT_THE_FAKE()                          \
  if (!std::filesystem::exists(TESSERA_TEST_FAKE_CUDNN)) \
  GTEST_SKIP() << TESSERA_TEST_FAKE_CUDNN << " is not here (tests copied from their build)"

// The fake cuDNN, opened with this version code and sub-library check status.
CudnnLoad open_fake(const char* version, const char* check) {
  ::setenv("TESSERA_FAKE_CUDNN_VERSION", version, 1);
  ::setenv("TESSERA_FAKE_CUDNN_CHECK", check, 1);
  CudnnLoad load = open_cudnn({TESSERA_TEST_FAKE_CUDNN});
  ::unsetenv("TESSERA_FAKE_CUDNN_VERSION");
  ::unsetenv("TESSERA_FAKE_CUDNN_CHECK");
  return load;
}

TEST(CudnnLibrary, AnotherMajorVersionIsRefusedNamingBoth) {
  SKIP_WITHOUT_THE_FAKE();
  expect_says(
      open_fake("8907", "0").error,
      {TESSERA_TEST_FAKE_CUDNN, "is cuDNN 8.9.7 (version code 8907)",
       "built against cuDNN 9's headers and needs that major version", "TESSERA_CUDNN_LIBRARY"});
  expect_says(open_fake("100100", "0").error, {"is cuDNN 10.1.0 (version code 100100)"});
}

TEST(CudnnLibrary, ASubLibraryThatFailsItsCheckIsNamed) {
  SKIP_WITHOUT_THE_FAKE();
  expect_says(open_fake("91900", "1008").error,
              {TESSERA_TEST_FAKE_CUDNN,
               "sub-library libcudnn_graph does not load or does not "
               "match it: fake cuDNN (cudnnStatus_t 1008)",
               "TESSERA_CUDNN=0"});
  const CudnnLoad good = open_fake("91900", "0");
  EXPECT_EQ(good.error, "");
  EXPECT_EQ(good.library.version_string(), "9.19.0");
}

// On a GPU: a float32 convolution and its gradients run on cuDNN where it loads (and match
// the CPU's), float64 stays on im2col. Skipped without a GPU, and where cuDNN is off or
// absent (the convolution tests then check im2col).
TEST(CudnnLibrary, Float32ConvolutionsOnAGpuRunOnCudnn) {
  if (num_gpus() == 0) GTEST_SKIP() << "no GPU";
  const CudnnLibrary* lib = cudnn_library();
  if (lib == nullptr) GTEST_SKIP() << "cuDNN is off (TESSERA_CUDNN=0) or not on the loader's path";
  const Tensor x_cpu = randn({4, 5, 9, 11});
  const Tensor w_cpu = randn({7, 5, 3, 3});
  const Tensor b_cpu = randn({7});
  const Conv2dOptions options{.stride = {2, 1}, .padding = {1, 0}};
  Tensor x = x_cpu.to(gpu(0)).requires_grad_();
  Tensor w = w_cpu.to(gpu(0)).requires_grad_();
  Tensor b = b_cpu.to(gpu(0)).requires_grad_();
  const CudnnRuns before = cudnn_runs();
  const Tensor y = conv2d(x, w, b, options);
  y.sum().backward();
  const CudnnRuns ran = cudnn_runs();
  // Each part on cuDNN (TESSERA_CUDNN_LOG=1 prints what the plan chose where one is not).
  EXPECT_EQ(ran.forward, before.forward + 1) << lib->path;
  EXPECT_EQ(ran.input_gradient, before.input_gradient + 1) << lib->path;
  EXPECT_EQ(ran.weight_gradient, before.weight_gradient + 1) << lib->path;
  EXPECT_EQ(ran.bias_gradient, before.bias_gradient + 1) << lib->path;
  Tensor xc = x_cpu.detach().requires_grad_();
  Tensor wc = w_cpu.detach().requires_grad_();
  Tensor bc = b_cpu.detach().requires_grad_();
  const Tensor yc = conv2d(xc, wc, bc, options);
  yc.sum().backward();
  const auto same = [](const Tensor& gpu_value, const Tensor& cpu_value, const char* what) {
    testing::expect_close(gpu_value.to(cpu()), cpu_value.to_vector<double>(), 1e-4, 1e-4, what);
  };
  same(y, yc, "y");
  same(x.grad(), xc.grad(), "dx");
  same(w.grad(), wc.grad(), "dw");
  same(b.grad(), bc.grad(), "db");
  (void)conv2d(x.detach().to(kFloat64), w.detach().to(kFloat64), Tensor(), options);
  EXPECT_EQ(cudnn_runs().forward, ran.forward) << "float64 takes im2col";
}

// On a GPU: convolutions captured into a graph run on cuDNN too, one of a shape that ran
// before and one whose plan is made inside the capture (descriptors and rankings are host
// work), and replay to the eager results bit for bit (the same plans, so the same
// deterministic algorithms).
TEST(CudnnLibrary, CapturedConvolutionsRunOnCudnnAndReplayTheEagerResults) {
  if (num_gpus() == 0) GTEST_SKIP() << "no GPU";
  if (cudnn_library() == nullptr) GTEST_SKIP() << "cuDNN is off or not on the loader's path";
  const Tensor x = randn({3, 4, 10, 10}).to(gpu(0));
  const Tensor w = randn({6, 4, 3, 3}).to(gpu(0));
  const Tensor b = randn({6}).to(gpu(0));
  const Tensor seen_eager = conv2d(x, w, b, {.padding = {1, 1}});
  // A shape no other test convolves: its plan is made while capturing.
  const Tensor x2 = randn({2, 3, 7, 9}).to(gpu(0));
  const Tensor w2 = randn({5, 3, 2, 2}).to(gpu(0));
  const Conv2dOptions new_shape{.stride = {1, 2}, .padding = {0, 1}};
  Tensor seen = zeros({3, 6, 10, 10}, {kFloat32, gpu(0)});
  Tensor fresh = zeros({2, 5, 6, 5}, {kFloat32, gpu(0)});
  const CudnnRuns before = cudnn_runs();
  const Graph graph = Graph::capture(gpu(0), [&] {
    seen.copy_(conv2d(x, w, b, {.padding = {1, 1}}));
    fresh.copy_(conv2d(x2, w2, Tensor(), new_shape));
  });
  EXPECT_EQ(cudnn_runs().forward, before.forward + 2) << "both captured on cuDNN";
  graph.replay();
  EXPECT_EQ(seen.to_vector<float>(), seen_eager.to_vector<float>());
  EXPECT_EQ(fresh.to_vector<float>(), conv2d(x2, w2, Tensor(), new_shape).to_vector<float>());
}

#endif  // TESSERA_HAVE_CUDNN

}  // namespace
}  // namespace tessera::detail::cuda

#endif  // TESSERA_TEST_WITH_CUDA
