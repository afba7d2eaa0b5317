// Device handles, the seed's cpu()/gpu()/try_gpu()/try_all_gpus(), the default-device scope,
// and the errors for devices that do not exist.
#include <sstream>
#include <unordered_set>

#include "support/device_test.h"

namespace tessera {
namespace {

using testing::expect_throw_with;

TEST(Device, PrintsAndParses) {
  EXPECT_EQ(Device::parse("cuda:0"), gpu(0));
  EXPECT_EQ(Device::parse("gpu:1"), gpu(1));
  EXPECT_EQ(Device::parse("cuda"), gpu(0));
  EXPECT_EQ(Device::parse("cpu:1"), cpu(1));
  EXPECT_EQ(Device::parse("cpu"), cpu());
  EXPECT_EQ(gpu(1).str(), "cuda:1");
  EXPECT_EQ(cpu(1).str(), "cpu:1");
  EXPECT_EQ(cpu().str(), has_logical_cpu_devices() ? "cpu:0" : "cpu");
  std::ostringstream os;
  os << gpu(3);
  EXPECT_EQ(os.str(), "cuda:3");
  EXPECT_EQ(Device::parse(gpu(7).str()), gpu(7));
}

TEST(Device, ComparesKindAndIndex) {
  // MXNet compares only the kind; gpu(0) and gpu(1) must differ here.
  EXPECT_NE(gpu(0), gpu(1));
  EXPECT_NE(cpu(0), gpu(0));
  EXPECT_EQ(gpu(), gpu(0));
  std::unordered_set<Device> set{cpu(), gpu(0), gpu(1), gpu(0)};
  EXPECT_EQ(set.size(), 3u);
}

TEST(Device, ParseErrorsNameTheInput) {
  expect_throw_with<DeviceError>([] { Device::parse("tpu:0"); },
                                 {"[Device::parse]", "unknown device 'tpu:0'", "'cuda:N'"});
  expect_throw_with<DeviceError>([] { Device::parse("cuda:x"); }, {"'cuda:x'", "index"});
  expect_throw_with<DeviceError>([] { Device::parse("cuda:"); }, {"'cuda:'"});
  // Indices are plain decimal, and one out of range is named with the text it came from.
  for (const char* text : {"cuda:-1", "cpu:-0", "cuda:01", "cpu:+1"}) {
    expect_throw_with<DeviceError>([&] { Device::parse(text); },
                                   {"[Device::parse] '" + std::string(text) +
                                        "' has no valid "
                                        "index after ':'",
                                    "0 to 63, in decimal digits"});
  }
  expect_throw_with<DeviceError>([] { Device::parse("cuda:99999"); },
                                 {"[Device::parse] 'cuda:99999' names device 99999",
                                  "past the last one tessera can address (63)"});
  EXPECT_EQ(Device::parse("cpu:0"), cpu(0));
  EXPECT_EQ(Device::parse("cuda:63"), gpu(63));
  expect_throw_with<DeviceError>([] { gpu(-1); }, {"[Device]", "index -1"});
}

TEST(Device, HandlesNeedNoDevice) {
  // Like torch.device('cuda:1'): building the handle is fine, using it for data is not.
  const Device d = gpu(5);
  EXPECT_TRUE(d.is_cuda());
  EXPECT_EQ(d.index(), 5);
  EXPECT_FALSE(is_available(d));
}

TEST(Device, TryGpuFallsBackToCpu) {
  EXPECT_EQ(try_gpu(10), cpu());
  if (num_gpus() == 0) {
    EXPECT_EQ(try_gpu(), cpu());
    // The book's docstring promises [cpu()] when there is no GPU (its code returns []).
    EXPECT_EQ(try_all_gpus(), std::vector<Device>{cpu()});
  } else {
    EXPECT_EQ(try_gpu(), gpu(0));
    EXPECT_EQ(static_cast<int>(try_all_gpus().size()), num_gpus());
  }
}

TEST(Device, MissingGpuErrorSaysWhy) {
  if (num_gpus() > 0) GTEST_SKIP() << "a GPU is present";
  // Built without CUDA, or with it but no driver or no GPU: the reason says which.
  const std::string reason = gpu_unavailable_reason();
  EXPECT_FALSE(reason.empty());
  expect_throw_with<DeviceError>(
      [] {
        ones({2, 3}, gpu(0));
      },
      {"[ones]", "cuda:0 is not available", reason, "Available devices: ", "try_gpu(0)",
       "on the command line: leave --device out, or pass --device cpu"});
#if !TESSERA_TEST_WITH_CUDA
  EXPECT_NE(reason.find("without CUDA"), std::string::npos);
#endif
}

// A copy to a device that is not there is blamed on the call the user made.
TEST(Device, CopyErrorsNameTheCallTheUserMade) {
  const Tensor t = ones({2});
  const Device missing = cpu(num_cpu_devices());
  expect_throw_with<DeviceError>([&] { (void)t.to(missing); }, {"[to] device cpu:"});
  expect_throw_with<DeviceError>([&] { (void)t.copy_to(missing); }, {"[copy_to] device cpu:"});
  if (num_gpus() == 0) {
    expect_throw_with<DeviceError>([&] { (void)t.cuda(0); }, {"[cuda] device cuda:0"});
    expect_throw_with<DeviceError>([&] { (void)t.to(gpu(0)); }, {"[to] device cuda:0"});
  }
}

TEST(Device, MissingCpuDeviceErrorSaysHowToSplit) {
  const int n = num_cpu_devices();
  if (has_logical_cpu_devices()) {
    expect_throw_with<DeviceError>(
        [n] { zeros({1}, cpu(n)); },
        {"[zeros]", "does not exist", "logical CPU devices are configured"});
  } else {
    expect_throw_with<DeviceError>([] { zeros({1}, cpu(1)); },
                                   {"[zeros]", "cpu:1 does not exist", "TESSERA_CPU_DEVICES"});
  }
}

TEST(Device, ConfigureAfterFirstUseIsRefused) {
  (void)zeros({1});
  expect_throw_with<Error>([] { configure_cpu_devices({.count = 2}); },
                           {"[configure_cpu_devices]", "after the first tensor"});
  expect_throw_with<Error>([] { configure_cpu_devices({.count = -1}); }, {"out of range"});
  expect_throw_with<Error>(
      [] { configure_cpu_devices({.count = 2, .threads_per_device = -1}); },
      {"[configure_cpu_devices]", "threads_per_device -1 is out of range", "0 (an equal share"});
}

TEST(Device, AvailableDevicesListsCpusThenGpus) {
  const auto devices = available_devices();
  ASSERT_EQ(static_cast<int>(devices.size()), num_cpu_devices() + num_gpus());
  for (int i = 0; i < num_cpu_devices(); ++i) EXPECT_EQ(devices[i], cpu(i));
}

TEST(DeviceScope, SetsTheDefaultForFactoriesAndNests) {
  EXPECT_EQ(default_device(), cpu());
  const Device last = available_devices().back();
  {
    DeviceScope outer(last);
    EXPECT_EQ(zeros({2}).device(), last);
    {
      DeviceScope inner(cpu());
      EXPECT_EQ(ones({2}).device(), cpu());
    }
    EXPECT_EQ(rand({2}).device(), last);
    // An explicit device wins over the scope.
    EXPECT_EQ(zeros({2}, cpu()).device(), cpu());
  }
  EXPECT_EQ(default_device(), cpu());
}

TEST(DeviceScope, MissingDeviceFailsAtFirstUse) {
  if (num_gpus() > 0) GTEST_SKIP() << "a GPU is present";
  DeviceScope scope(gpu(3));  // fine: only a handle
  expect_throw_with<DeviceError>([] { zeros({1}); }, {"cuda:3"});
}

}  // namespace
}  // namespace tessera
