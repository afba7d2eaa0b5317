// The sync guard finds host waits the code did not ask for; the ledger counts every wait.
#include <thread>

#include <sstream>

#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_throw_with;

class SyncGuardTest : public DeviceTest {
 protected:
  // Reads of the host's own memory never wait, so only devices apart from the host count.
  bool waits() const { return has_logical_cpu_devices() || device().is_cuda(); }
};

TEST_P(SyncGuardTest, ErrorScopeRejectsImplicitReadsWithTheCallersLine) {
  const Tensor loss = sum(ones({4}, device()));
  SyncGuard guard(SyncMode::kError);
  if (!waits()) {
    EXPECT_EQ(loss.item<float>(), 4.0f);  // the host reads its own memory: no wait
    return;
  }
  reset_transfer_stats();
  const int line = __LINE__ + 1;  // the line of the item() call
  expect_throw_with<SyncError>([&] { (void)loss.item<float>(); },
                               {"[item] the host waits for " + device().str(),
                                "sync_guard_test.cpp:" + std::to_string(line), "AllowSync"});
  expect_throw_with<SyncError>([&] { (void)loss.to_vector<float>(); }, {"[to_vector]"});
  const int str_line = __LINE__ + 1;
  expect_throw_with<SyncError>([&] { (void)loss.str(); },
                               {"[print]", "sync_guard_test.cpp:" + std::to_string(str_line)});
  expect_throw_with<SyncError>(
      [&] {
        std::ostringstream os;
        os << loss;
      },
      {"[print]", "std::cout << tensor", "t.str() reports its caller"});
  // Nothing waited, so nothing was counted.
  EXPECT_EQ(transfer_stats(device()).host_waits, 0u);
  // Deliberate reads and explicit synchronization are allowed.
  {
    AllowSync allow;
    EXPECT_EQ(loss.item<float>(), 4.0f);
  }
  synchronize(device());
  EXPECT_EQ(transfer_stats(device()).host_waits, 2u);
}

TEST_P(SyncGuardTest, DeviceWorkInsideTheScopeIsFine) {
  SyncGuard guard(SyncMode::kError);
  Tensor log = zeros({10}, device());
  for (int step = 0; step < 10; ++step) {
    log.narrow(0, step, 1).copy_(sum(ones({3}, device()) * double(step)).view({1}));
  }
  AllowSync allow;
  EXPECT_EQ(log.to_vector<float>()[9], 27.0f);
}

TEST_P(SyncGuardTest, ScopesNestAndRestore) {
  EXPECT_EQ(sync_mode(), SyncMode::kOff);
  {
    SyncGuard outer(SyncMode::kError);
    EXPECT_EQ(sync_mode(), SyncMode::kError);
    {
      SyncGuard inner(SyncMode::kWarn);
      EXPECT_EQ(sync_mode(), SyncMode::kWarn);
      AllowSync allow;
      EXPECT_EQ(sync_mode(), SyncMode::kOff);
    }
    EXPECT_EQ(sync_mode(), SyncMode::kError);
  }
  EXPECT_EQ(sync_mode(), SyncMode::kOff);
}

TEST_P(SyncGuardTest, WarnScopeReportsAndGoesOn) {
  const Tensor t = ones({2}, device());
  SyncGuard guard(SyncMode::kWarn);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(2, 1.0f));
  const std::string err = ::testing::internal::GetCapturedStderr();
  if (waits()) {
    EXPECT_NE(err.find("tessera warning: [to_vector] the host waits for"), std::string::npos)
        << err;
  } else {
    EXPECT_EQ(err, "");
  }
}

TEST_P(SyncGuardTest, OtherThreadsAreNotAffected) {
  SyncGuard guard(SyncMode::kError);
  const Tensor t = ones({2}, device());
  float value = 0;
  std::thread reader([&] { value = t.to_vector<float>()[0]; });
  reader.join();
  EXPECT_EQ(value, 1.0f);
}

TESSERA_INSTANTIATE_DEVICE_SUITE(SyncGuardTest);

TEST(PinMemory, NeedsAGpu) {
  if (num_gpus() > 0) GTEST_SKIP() << "a GPU is present";
  expect_throw_with<DeviceError>([] { ones({2}).pin_memory(); },
                                 {"[pin_memory]", "no GPU is available"});
  EXPECT_FALSE(ones({2}).is_pinned());
}

}  // namespace
}  // namespace tessera
