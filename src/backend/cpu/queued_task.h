#pragma once
// A kernel queued on a CPU device's work queue: a move-only void() callable kept inside the
// object when it fits, as every kernel tessera queues does. See Note [Queueing allocates
// nothing] in work_queue.cpp.
#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace tessera::detail {

class QueuedTask {
 public:
  // Room for a kernel's lambda and the handles of the tensors it reads and writes.
  static constexpr std::size_t kInlineBytes = 112;

  QueuedTask() = default;
  template <typename F, typename D = std::decay_t<F>>
    requires(!std::is_same_v<D, QueuedTask> && std::is_invocable_v<D&>)
  QueuedTask(F&& f) {  // NOLINT(google-explicit-constructor): lambdas convert, as to std::function
    if constexpr (kFitsInline<D>) {
      ::new (static_cast<void*>(buffer_)) D(std::forward<F>(f));
      ops_ = &kInlineOps<D>;
    } else {
      *reinterpret_cast<D**>(buffer_) = new D(std::forward<F>(f));
      ops_ = &kHeapOps<D>;
    }
  }
  QueuedTask(QueuedTask&& other) noexcept { take(other); }
  QueuedTask& operator=(QueuedTask&& other) noexcept {
    if (this != &other) {
      reset();
      take(other);
    }
    return *this;
  }
  QueuedTask(const QueuedTask&) = delete;
  QueuedTask& operator=(const QueuedTask&) = delete;
  ~QueuedTask() { reset(); }

  explicit operator bool() const { return ops_ != nullptr; }
  void operator()() { ops_->invoke(buffer_); }
  // Destroys the callable (and the handles it holds) now.
  void reset() noexcept {
    // Empty first, so a callable whose destructor reaches this task sees it empty.
    if (const Ops* ops = std::exchange(ops_, nullptr)) ops->destroy(buffer_);
  }

 private:
  struct Ops {
    void (*invoke)(void* buffer);
    // Moves the callable from one buffer into the other (raw) one and ends it in the first.
    void (*relocate)(void* from, void* to) noexcept;
    void (*destroy)(void* buffer) noexcept;
  };

  template <typename D>
  static constexpr bool kFitsInline =
      sizeof(D) <= kInlineBytes && alignof(D) <= alignof(std::max_align_t) &&
      std::is_nothrow_move_constructible_v<D>;

  // Named templates rather than lambdas: a kernel built for one instruction-set level
  // (Note [CPU kernel variants]) must give functions whose names carry its level's namespace
  // (scripts/check-isa), as D's does.
  template <typename D>
  static void invoke_inline(void* b) {
    (*static_cast<D*>(b))();
  }
  template <typename D>
  static void relocate_inline(void* from, void* to) noexcept {
    D* f = static_cast<D*>(from);
    ::new (to) D(std::move(*f));
    f->~D();
  }
  template <typename D>
  static void destroy_inline(void* b) noexcept {
    static_cast<D*>(b)->~D();
  }
  template <typename D>
  static void invoke_heap(void* b) {
    (**static_cast<D**>(b))();
  }
  template <typename D>
  static void relocate_heap(void* from, void* to) noexcept {
    *static_cast<D**>(to) = *static_cast<D**>(from);
  }
  template <typename D>
  static void destroy_heap(void* b) noexcept {
    delete *static_cast<D**>(b);
  }
  template <typename D>
  static constexpr Ops kInlineOps{&invoke_inline<D>, &relocate_inline<D>, &destroy_inline<D>};
  template <typename D>
  static constexpr Ops kHeapOps{&invoke_heap<D>, &relocate_heap<D>, &destroy_heap<D>};

  void take(QueuedTask& other) noexcept {
    if (other.ops_ == nullptr) return;
    other.ops_->relocate(other.buffer_, buffer_);
    ops_ = std::exchange(other.ops_, nullptr);
  }

  alignas(std::max_align_t) unsigned char buffer_[kInlineBytes];
  const Ops* ops_ = nullptr;
};

}  // namespace tessera::detail
