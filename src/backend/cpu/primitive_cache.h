#pragma once
// oneDNN primitives kept per layout (a bfloat16 product's, a convolution's): creating one
// costs far more than running it on small data (JIT compilation, a few milliseconds).
#include <cstddef>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

namespace tessera::detail {

// The most recently used `kept` values by key; safe from every device's thread. Keeping every
// layout ever seen grew without bound when shapes vary (8,000 batch sizes of bfloat16
// products took 900 MB). A value is made outside the lock (a few milliseconds of JIT
// compilation that every device's work would wait behind), so two threads may make one at
// once: the first stored is kept and returned to both.
template <typename Key, typename Value>
class PrimitiveCache {
 public:
  explicit PrimitiveCache(std::size_t kept) : kept_(kept) {}

  // The value of `key`, made by `make()` (which may throw) on first use.
  template <typename Make>
  std::shared_ptr<const Value> get(const Key& key, Make&& make) {
    {
      const std::lock_guard lock(mutex_);
      auto it = made_.find(key);
      if (it != made_.end()) {
        recent_.splice(recent_.begin(), recent_, it->second.second);
        return it->second.first;
      }
    }
    auto value = std::make_shared<const Value>(make());
    const std::lock_guard lock(mutex_);
    auto it = made_.find(key);
    if (it != made_.end()) return it->second.first;  // another thread made it meanwhile
    recent_.push_front(key);
    made_.emplace(key, std::pair{value, recent_.begin()});
    while (made_.size() > kept_) {  // a call still running one keeps it alive
      made_.erase(recent_.back());
      recent_.pop_back();
    }
    return value;
  }

 private:
  const std::size_t kept_;
  std::mutex mutex_;
  std::list<Key> recent_;  // most recently used first
  std::map<Key, std::pair<std::shared_ptr<const Value>, typename std::list<Key>::iterator>> made_;
};

}  // namespace tessera::detail
