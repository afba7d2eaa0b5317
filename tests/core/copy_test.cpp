// Explicit copies: to() is a no-op on the same device, copy_to() always copies, copy_()
// crosses devices, and every crossing is counted in the transfer ledger. Memory accounting
// proves what allocates.
#include <fmt/format.h>

#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_throw_with;

class Copy : public DeviceTest {};

// Two distinct devices, the second being this test's device when possible.
std::pair<Device, Device> two_devices(Device mine) {
  for (Device d : available_devices()) {
    if (d != mine) return {d, mine};
  }
  return {mine, mine};
}

TEST_P(Copy, ToSameDeviceIsTheSameTensorAndAllocatesNothing) {
  const Tensor z = rand({2, 3}, device());
  synchronize(device());
  const auto before = memory_stats(device());
  reset_transfer_stats();
  const Tensor same = z.to(device());
  EXPECT_TRUE(same.is_same(z));  // the seed's `Z.cuda(1) is Z`
  EXPECT_TRUE(z.to(kFloat32).is_same(z));
  EXPECT_EQ(memory_stats(device()).allocations, before.allocations);
  EXPECT_EQ(memory_stats(device()).in_use, before.in_use);
  EXPECT_EQ(transfer_stats(), TransferStats{});
}

// A transposed matrix made contiguous, copied in tiles on the CPU (Note [Transposed copies
// in tiles]): every dtype size, sizes that are no multiple of the tile, a view of a wider
// matrix (leading dimension past its rows), and sizes that split over threads.
TEST_P(Copy, TransposedMatricesCopyElementForElement) {
  for (const Dtype dtype : {kFloat32, kFloat64, kBFloat16, kUInt8, kInt64}) {
    for (const auto& [rows, cols] :
         {std::pair<std::int64_t, std::int64_t>{16, 16}, {37, 100}, {300, 129}, {1024, 64}}) {
      // m [cols, rows + 3] cut to [cols, rows]: its transpose is [rows, cols] with strides
      // (1, rows + 3), a leading dimension past its rows.
      const std::int64_t ld = rows + 3;
      std::vector<double> v(static_cast<std::size_t>(cols * ld));
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i % 251);
      const Tensor m = from_vector(v, {cols, ld}, {dtype, device()}).slice(1, 0, rows);
      const Tensor src = m.t();
      const Tensor out = src.contiguous();
      ASSERT_TRUE(out.is_contiguous());
      const std::vector<double> got = out.to_vector<double>();
      for (std::int64_t i = 0; i < rows; ++i) {
        for (std::int64_t j = 0; j < cols; ++j) {
          const double want = v[static_cast<std::size_t>(j * ld + i)];
          ASSERT_EQ(got[static_cast<std::size_t>(i * cols + j)], want)
              << dtype_name(dtype) << " " << rows << "x" << cols << " at " << i << "," << j;
        }
      }
    }
  }
}

TEST_P(Copy, CopyToAlwaysAllocates) {
  const Tensor z = rand({2, 3}, device());
  synchronize(device());  // let the queue free earlier tests' tensors first
  const auto before = memory_stats(device());
  const Tensor c = z.copy_to(device());
  EXPECT_FALSE(c.is_same(z));
  EXPECT_FALSE(c.shares_storage(z));
  EXPECT_EQ(c.to_vector<float>(), z.to_vector<float>());
  EXPECT_EQ(memory_stats(device()).allocations, before.allocations + 1);
  EXPECT_EQ(memory_stats(device()).in_use, before.in_use + 24);
}

TEST_P(Copy, AcrossDevicesCopiesAndCounts) {
  TESSERA_REQUIRE_TWO_DEVICES();
  const auto [from, to] = two_devices(device());
  const Tensor x = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}, {from});
  synchronize(from);
  reset_transfer_stats();
  const Tensor y = x.to(to);
  EXPECT_EQ(y.device(), to);
  EXPECT_FALSE(y.is_same(x));
  // One copy of 24 bytes: d2d between two devices, h2d or d2h when one end is the host.
  const TransferStats s = transfer_stats();
  EXPECT_EQ(s.copies(), 1u) << s;
  EXPECT_EQ(s.h2d_bytes + s.d2h_bytes + s.d2d_bytes, 24u) << s;
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  // A non-contiguous source, another dtype, into an existing tensor.
  Tensor dst = zeros({3, 2}, {kFloat64, to});
  dst.copy_(x.t());
  EXPECT_EQ(dst.to_vector<double>(), (std::vector<double>{1, 4, 2, 5, 3, 6}));
  // Broadcasting source.
  Tensor row = zeros({2, 3}, {to});
  row.copy_(from_vector(std::vector<float>{7, 8, 9}, {3}, {from}));
  EXPECT_EQ(row.to_vector<float>(), (std::vector<float>{7, 8, 9, 7, 8, 9}));
}

TEST_P(Copy, OrderingAcrossDeviceQueues) {
  TESSERA_REQUIRE_TWO_DEVICES();
  const auto [from, to] = two_devices(device());
  // Work queued on `from` must finish before the copy reads it, and the copy must finish
  // before `to` reads the result; with async queues a missing edge shows up as wrong sums.
  Tensor acc = zeros({1000}, from);
  for (int i = 0; i < 50; ++i) acc.add_(1.0);
  Tensor dst = full({1000}, -1.0, to);
  dst.mul_(3.0);
  dst.copy_(acc);
  acc.add_(1000.0);  // must not leak into dst
  dst.add_(1.0);
  for (float v : dst.to_vector<float>()) ASSERT_EQ(v, 51.0f);
  for (float v : acc.to_vector<float>()) ASSERT_EQ(v, 1050.0f);
}

TEST_P(Copy, CopyIntoItselfReadsTheSourceBeforeWriting) {
  // Overlapping views (a transpose in place, a row shifted by one) read every element before
  // any is written, as PyTorch's copy_ does; an expanded destination is refused as any
  // in-place write to one is.
  Tensor y = arange(9, {device(), kFloat32}).view({3, 3});
  y.copy_(y.t());
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{0, 3, 6, 1, 4, 7, 2, 5, 8}));
  Tensor x = arange(12, {device(), kFloat32}).view({3, 4});
  x.slice(1, 1, 4).copy_(x.slice(1, 0, 3));
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{0, 0, 1, 2, 4, 4, 5, 6, 8, 8, 9, 10}));
  Tensor flat = arange(8, {device(), kFloat32});
  flat.narrow(0, 1, 7).copy_(flat.narrow(0, 0, 7));  // the same layout, shifted
  EXPECT_EQ(flat.to_vector<float>(), (std::vector<float>{0, 0, 1, 2, 3, 4, 5, 6}));
  Tensor same = arange(4, {device(), kFloat32});
  same.copy_(same);
  EXPECT_EQ(same.to_vector<float>(), (std::vector<float>{0, 1, 2, 3}));
  Tensor base = zeros({4}, device());
  expect_throw_with<Error>(
      [&] {
        base.expand({3, 4}).copy_(ones({3, 4}, device()));
      },
      {"[copy_]", "expanded"});
}

TEST_P(Copy, DeviceLocalLoopRecordsNoTransfer) {
  Tensor w = rand({16, 16}, device());
  Tensor log = zeros({100}, device());
  reset_transfer_stats();
  for (int step = 0; step < 100; ++step) {
    Tensor update = w * 0.5 + 1.0;
    w.copy_(update / 2.0);
    log.narrow(0, step, 1).copy_(abs(w - update).view({256}).narrow(0, 0, 1));
  }
  EXPECT_EQ(transfer_stats(), TransferStats{}) << transfer_stats();
  // Reading the log once is one device-to-host copy and one host wait, on a device; none on
  // the plain host.
  (void)log.to_vector<float>();
  const TransferStats s = transfer_stats(device());
  if (has_logical_cpu_devices() || device().is_cuda()) {
    EXPECT_EQ(s.d2h_count, 1u);
    EXPECT_EQ(s.d2h_bytes, 400u);
    EXPECT_EQ(s.host_waits, 1u);
    // The bytes that cross are the tensor's own, whatever type the host asks for.
    reset_transfer_stats();
    (void)log.to_vector<double>();
    EXPECT_EQ(transfer_stats(device()).d2h_bytes, 400u);
  } else {
    EXPECT_EQ(s, TransferStats{});
  }
}

TEST_P(Copy, HostReadsWorkFromEveryDevice) {
  const Tensor t = tensor({{1.5, 2.0}, {3.0, 4.0}}, device());
  EXPECT_EQ(t.to_vector<double>(), (std::vector<double>{1.5, 2, 3, 4}));
  EXPECT_EQ(t.to_vector<int>(), (std::vector<int>{1, 2, 3, 4}));
  EXPECT_EQ(t[0][0].item<float>(), 1.5f);
  EXPECT_EQ(sum(t).item<double>(), 10.5);
  expect_throw_with<ShapeError>([&] { t.item(); }, {"[item]", "exactly one element", "[2, 2]"});
  if (device().is_cpu()) {
    reset_transfer_stats();
    EXPECT_EQ(t.data<float>()[3], 4.0f);
    // A logical device's memory handed to the host is a read, as docs/device_model.md says.
    const TransferStats read = transfer_stats(device());
    EXPECT_EQ(read.d2h_bytes, has_logical_cpu_devices() ? 16u : 0u) << read;
    EXPECT_EQ(read.host_waits, has_logical_cpu_devices() ? 1u : 0u) << read;
    expect_throw_with<DtypeError>([&] { t.data<double>(); }, {"[data]", "float32, not float64"});
  }
}

TEST_P(Copy, DtypeConversionStaysOnTheDevice) {
  const Tensor t = tensor({-1.7, 0.0, 2.5}, device());
  reset_transfer_stats();
  const Tensor i = t.to(kInt32);
  const Tensor b = t.to(kBool);
  EXPECT_EQ(i.device(), device());
  EXPECT_EQ(transfer_stats(), TransferStats{});
  EXPECT_EQ(i.to_vector<int>(), (std::vector<int>{-1, 0, 2}));
  EXPECT_EQ(b.to_vector<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(t.to(device(), kFloat64).dtype(), kFloat64);
}

TEST_P(Copy, MemoryIsReturnedWhenTensorsDie) {
  synchronize(device());
  const auto before = memory_stats(device());
  reset_peak_memory(device());
  {
    const Tensor big = empty({1024, 1024}, device());
    EXPECT_EQ(memory_stats(device()).in_use, before.in_use + 4u * 1024 * 1024);
  }
  synchronize(device());
  EXPECT_EQ(memory_stats(device()).in_use, before.in_use);
  EXPECT_GE(memory_stats(device()).peak, before.in_use + 4u * 1024 * 1024);
  EXPECT_GE(memory_stats(device()).reserved, 4u * 1024 * 1024);
  empty_cache(device());
}

TEST_P(Copy, MemoryLimitGivesAClearOutOfMemoryError) {
  synchronize(device());
  const std::size_t in_use = memory_stats(device()).in_use;
  set_memory_limit(device(), in_use + 1000);
  const Tensor small = empty({100}, device());  // fits
  expect_throw_with<OutOfMemoryError>(
      [&] { empty({1000}, device()); },
      {"[empty] out of memory on " + device().str(), "tried to allocate 3.91 KiB (4000 bytes)",
       "limit", "reserved by tessera", "largest",
       // As code: set_memory_limit(cpu:1, bytes) did not compile.
       device().is_cuda() ? fmt::format("set_memory_limit(gpu({}), bytes)", device().index())
       : device().index() == 0
           ? std::string("set_memory_limit(cpu(), bytes)")
           : fmt::format("set_memory_limit(cpu({}), bytes)", device().index())});
  // Existing tensors are intact and the device keeps working after the throw.
  set_memory_limit(device(), SIZE_MAX);
  EXPECT_EQ(sum(ones({3}, device())).item<float>(), 3.0f);
  EXPECT_EQ(small.numel(), 100);
}

TEST_P(Copy, ImpossibleAllocationThrowsInsteadOfCrashing) {
  expect_throw_with<OutOfMemoryError>(
      [&] {
        empty({1ll << 40, 1ll << 20}, device());
      },
      {"[empty]", "out of memory on " + device().str(), "reserved by tessera", "largest",
       "available of"});
  expect_throw_with<OutOfMemoryError>(
      [&] {
        empty({1ll << 62, 1ll << 62}, device());
      },
      {"[empty]", "address space"});
  EXPECT_EQ(sum(ones({2}, device())).item<float>(), 2.0f);
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Copy);

}  // namespace
}  // namespace tessera
