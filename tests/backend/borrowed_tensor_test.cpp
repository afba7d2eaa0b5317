// Borrowed handles (backend/cpu/borrowed_tensor.h): they see their tensor's data without
// owning it, and their memory moves between threads in recycled batches (Note [Queueing
// allocates nothing] in backend/cpu/work_queue.cpp), including across a thread's exit.
#include "backend/cpu/borrowed_tensor.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "tessera/tessera.h"

namespace tessera::detail {
namespace {

TEST(BorrowedTensor, SeesItsTensorWithoutOwningIt) {
  const Tensor owner = arange(0, 6).reshape({2, 3});
  const Tensor borrowed = borrow(owner);
  EXPECT_EQ(borrowed.shape(), owner.shape());
  EXPECT_EQ(impl_of(borrowed).data(), impl_of(owner).data());
  EXPECT_EQ(owner.impl()->storage.use_count(), 1) << "the borrowed handle owns no share";
  EXPECT_EQ(borrowed.to_vector<double>(), owner.to_vector<double>());
}

// Handles made on one thread and dropped on another, in more than two batches each way, with
// the making thread gone before the last are dropped: every handle still sees its tensor.
TEST(BorrowedTensor, HandlesMadeAndDroppedOnDifferentThreadsAcrossThreadExits) {
  const Tensor owner = arange(0, 4);
  for (int round = 0; round < 3; ++round) {
    std::vector<Tensor> handles;
    std::thread maker([&] {
      for (int i = 0; i < 300; ++i) handles.push_back(borrow(owner));
    });
    maker.join();  // its own list of blocks is gone now
    std::thread dropper([&] {
      for (const Tensor& h : handles) EXPECT_EQ(impl_of(h).data(), impl_of(owner).data());
      handles.clear();  // 300 blocks back through this thread's list and the shared one
    });
    dropper.join();
    std::vector<Tensor> again;
    for (int i = 0; i < 300; ++i) again.push_back(borrow(owner));
    for (const Tensor& h : again) EXPECT_EQ(h.to_vector<double>(), owner.to_vector<double>());
  }
}

}  // namespace
}  // namespace tessera::detail
