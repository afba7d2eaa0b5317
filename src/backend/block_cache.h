#pragma once
// Freed blocks kept by (rounded) size for reuse: the free lists of the CPU allocator and of
// the CUDA backend's pinned host memory. Not thread-safe: its owner locks around it.
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace tessera::detail {

class BlockCache {
 public:
  // A kept block of exactly `size` bytes, or nullptr.
  void* take(std::size_t size) {
    auto it = blocks_.find(size);
    if (it == blocks_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    cached_ -= size;
    return p;
  }
  // Keeps `ptr` unless the cache would then hold more than `cap` bytes; false then, and the
  // caller frees the block.
  bool put(void* ptr, std::size_t size, std::size_t cap = SIZE_MAX) {
    if (cached_ + size > cap) return false;
    blocks_[size].push_back(ptr);
    cached_ += size;
    return true;
  }
  // Hands every kept block to release(ptr, size) and forgets them all.
  template <typename F>
  void drain(F&& release) {
    for (auto& [size, list] : blocks_) {
      for (void* p : list) release(p, size);
    }
    blocks_.clear();
    cached_ = 0;
  }
  std::size_t cached_bytes() const { return cached_; }
  // The largest kept block (0 when none): what an out-of-memory report can offer.
  std::size_t largest_block() const {
    std::size_t largest = 0;
    for (const auto& [size, list] : blocks_) {
      if (!list.empty() && size > largest) largest = size;
    }
    return largest;
  }

 private:
  std::unordered_map<std::size_t, std::vector<void*>> blocks_;
  std::size_t cached_ = 0;
};

}  // namespace tessera::detail
