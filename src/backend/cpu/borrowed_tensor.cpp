// The recycled blocks of borrowed handles (borrowed_tensor.h).
#include "backend/cpu/borrowed_tensor.h"

#include <new>

#include "backend/spin_lock.h"

namespace tessera::detail {
namespace {

// A host thread takes blocks and a queue's thread gives them back, one per tensor of every
// queued kernel. Each thread keeps the blocks it was given in a list of its own and trades
// them with the shared list by whole batches, so that the two threads meet at the shared
// lock once per kBatch kernels' handles rather than for every one.
constexpr std::size_t kBlockBytes = kHandleBlockBytes;
constexpr std::size_t kBatch = 64;
// Batches the shared list keeps (enough for every handle of 256 queued tasks on each of
// several devices); more go back to the heap.
constexpr std::size_t kMostBatches = 128;

struct FreeBlock {
  FreeBlock* next;        // within a thread's list or a batch
  FreeBlock* next_batch;  // the shared list's next batch (on a batch's first block)
};

// Never destroyed (trivially destructible), so a queue's thread that outlives static
// destruction at exit can still give blocks back.
struct SharedBlocks {
  SpinLock lock;
  FreeBlock* batches = nullptr;
  std::size_t kept = 0;
};
constinit SharedBlocks g_shared;

void delete_chain(FreeBlock* block) {
  while (block != nullptr) {
    FreeBlock* next = block->next;
    ::operator delete(static_cast<void*>(block));
    block = next;
  }
}

// Gives the shared list a chain of kBatch blocks (or frees them when it is full).
void share_batch(FreeBlock* batch) {
  g_shared.lock.lock();
  if (g_shared.kept < kMostBatches) {
    batch->next_batch = g_shared.batches;
    g_shared.batches = batch;
    ++g_shared.kept;
    batch = nullptr;
  }
  g_shared.lock.unlock();
  delete_chain(batch);
}

// A chain of kBatch blocks from the shared list, or nullptr.
FreeBlock* take_batch() {
  g_shared.lock.lock();
  FreeBlock* batch = g_shared.batches;
  if (batch != nullptr) {
    g_shared.batches = batch->next_batch;
    --g_shared.kept;
  }
  g_shared.lock.unlock();
  return batch;
}

struct ThreadBlocks {
  FreeBlock* head = nullptr;
  std::size_t count = 0;

  // Detaches the first kBatch blocks (count >= kBatch).
  FreeBlock* detach_batch() {
    FreeBlock* batch = head;
    FreeBlock* last = head;
    for (std::size_t i = 1; i < kBatch; ++i) last = last->next;
    head = last->next;
    last->next = nullptr;
    count -= kBatch;
    return batch;
  }
  ~ThreadBlocks();
};
thread_local ThreadBlocks t_blocks;
// Set when this thread's list is gone (thread exit): a handle released by a later destructor
// on this thread goes straight to the heap. A bool is never destroyed, so it can be read then.
thread_local bool t_blocks_gone = false;

ThreadBlocks::~ThreadBlocks() {
  t_blocks_gone = true;
  while (count >= kBatch) share_batch(detach_batch());
  delete_chain(head);
}

}  // namespace

void* take_handle_block(std::size_t bytes) {
  if (bytes > kBlockBytes) return ::operator new(bytes);
  // This thread's list is gone (it is exiting): still a whole block, since another
  // thread's list may take this one back.
  if (t_blocks_gone) [[unlikely]]
    return ::operator new(kBlockBytes);
  ThreadBlocks& mine = t_blocks;
  if (mine.count == 0) {
    mine.head = take_batch();
    if (mine.head == nullptr) return ::operator new(kBlockBytes);
    mine.count = kBatch;
  }
  FreeBlock* block = mine.head;
  mine.head = block->next;
  --mine.count;
  return block;
}

void give_handle_block(void* block, std::size_t bytes) noexcept {
  if (bytes > kBlockBytes || t_blocks_gone) [[unlikely]]
    return ::operator delete(block);
  ThreadBlocks& mine = t_blocks;
  mine.head = ::new (block) FreeBlock{mine.head, nullptr};
  if (++mine.count == 2 * kBatch) share_batch(mine.detach_batch());
}

}  // namespace tessera::detail
