// Streams on every device: CPU devices refuse side streams with a message that says what
// to do instead; on a GPU, work on two side streams gives the results of the default
// stream, and memory freed while side streams run is never handed out too early.
#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_throw_with;

class Streams : public DeviceTest {};

TEST_P(Streams, DefaultStreamIsCurrentAndPrintable) {
  const Stream s = default_stream(device());
  EXPECT_TRUE(s.is_default());
  EXPECT_EQ(s.device(), device());
  EXPECT_EQ(current_stream(device()), s);
  EXPECT_EQ(s.str(), device().str());
  {
    StreamGuard guard(s);  // entering the default stream is allowed everywhere
    EXPECT_EQ(current_stream(device()), s);
    EXPECT_DOUBLE_EQ(sum(ones({3}, device()) * 2.0).item<double>(), 6.0);
  }
  synchronize(s);
}

TEST_P(Streams, CpuDevicesHaveNoSideStreams) {
  if (!device().is_cpu()) GTEST_SKIP() << "a GPU has side streams";
  expect_throw_with<DeviceError>([&] { new_stream(device()); },
                                 {"[new_stream] " + device().str(), "single in-order queue",
                                  "TESSERA_CPU_DEVICES=2"});
}

TEST_P(Streams, TwoSideStreamsComputeWhatTheDefaultStreamDoes) {
  if (!device().is_cuda()) GTEST_SKIP() << "side streams exist on GPUs only";
  const Stream s1 = new_stream(device()), s2 = new_stream(device());
  EXPECT_NE(s1, s2);
  EXPECT_FALSE(s1.is_default());
  EXPECT_NE(s1.str().find("/stream "), std::string::npos) << s1.str();
  manual_seed(1);
  const Tensor a = randn({256, 256}, device()), b = randn({256, 256}, device());
  const Tensor expected1 = matmul(a, b), expected2 = matmul(b, a);
  Tensor c1, c2;
  {
    StreamGuard g(s1);
    EXPECT_EQ(current_stream(device()), s1);
    c1 = matmul(a, b);  // reads a and b made on the default stream
  }
  {
    StreamGuard g(s2);
    c2 = matmul(b, a);
  }
  EXPECT_EQ(current_stream(device()), default_stream(device()));
  // Queued on the default stream after both guards: it sees their results without a wait.
  EXPECT_DOUBLE_EQ(max(abs(c1 - expected1)).item<double>(), 0.0);
  EXPECT_DOUBLE_EQ(max(abs(c2 - expected2)).item<double>(), 0.0);
}

TEST_P(Streams, MemoryFreedUnderGuardsIsNotReusedTooEarly) {
  if (!device().is_cuda()) GTEST_SKIP() << "side streams exist on GPUs only";
  const Stream s1 = new_stream(device()), s2 = new_stream(device());
  // Each round frees temporaries on one stream while the other may still run; a block
  // handed out too early would be overwritten and show up as a wrong sum.
  Tensor total1 = zeros({1 << 16}, device()), total2 = zeros({1 << 16}, device());
  for (int round = 0; round < 20; ++round) {
    {
      StreamGuard g(s1);
      Tensor t = full({1 << 16}, 1.0, device());
      for (int k = 0; k < 5; ++k) t = t + 1.0;  // 6, through temporaries freed at once
      total1.add_(t);
    }
    {
      StreamGuard g(s2);
      Tensor t = full({1 << 16}, 2.0, device());
      for (int k = 0; k < 5; ++k) t = t * 1.0 + 0.0;
      total2.add_(t);
    }
  }
  EXPECT_DOUBLE_EQ(min(total1).item<double>(), 20 * 6.0);
  EXPECT_DOUBLE_EQ(max(total1).item<double>(), 20 * 6.0);
  EXPECT_DOUBLE_EQ(min(total2).item<double>(), 20 * 2.0);
  EXPECT_DOUBLE_EQ(max(total2).item<double>(), 20 * 2.0);
  synchronize(s1);
  synchronize(device());
}

TEST_P(Streams, NestedGuardsSeeEachOthersWork) {
  if (!device().is_cuda()) GTEST_SKIP() << "side streams exist on GPUs only";
  const Stream s1 = new_stream(device()), s2 = new_stream(device());
  Tensor x = zeros({1024}, device());
  {
    StreamGuard outer(s1);
    x.add_(1.0);
    {
      StreamGuard inner(s2);
      x.add_(2.0);  // after the outer stream's add
      EXPECT_EQ(current_stream(device()), s2);
    }
    EXPECT_EQ(current_stream(device()), s1);
    x.mul_(10.0);  // after the inner stream's add
  }
  EXPECT_DOUBLE_EQ(min(x).item<double>(), 30.0);
  EXPECT_DOUBLE_EQ(max(x).item<double>(), 30.0);
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Streams);

}  // namespace
}  // namespace tessera
