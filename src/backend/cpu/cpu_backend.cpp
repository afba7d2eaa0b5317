#include "backend/cpu/cpu_backend.h"

#include <omp.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "backend/cpu/copy_kernel.h"
#include "backend/cpu/cpu_threads.h"
#include "backend/cpu/scratch_memory.h"
#include "core/check.h"
#include "core/tensor_impl.h"
#include "tessera/graph.h"
#include "tessera/memory.h"

namespace tessera::detail {

// Note [CPU kernel variants]
// An installed tessera runs on any x86-64 CPU, yet its kernels use the widest vectors the
// CPU has. The files that hold kernel loops (those that define CpuBackend's methods, and
// their kernel-only headers) are compiled once per instruction-set level of the x86-64 psABI
// -- x86-64 (SSE2), x86-64-v3 (AVX2, FMA) and x86-64-v4 (AVX-512) -- each into its own
// namespace (TESSERA_CPU_ISA: cpu_x86_64, cpu_x86_64_v3, cpu_x86_64_v4), and the rest of
// the library once, for any x86-64. The first use of the CPU backend asks the CPU what it
// runs (__builtin_cpu_supports) and makes the CpuBackend of the highest level it supports;
// TESSERA_CPU_ISA=<level> picks a lower one, so the tests run every level on one machine.
//
// Inline functions and templates that the levels share (the standard library's, tessera's
// core headers) are emitted once per object file, and the linker keeps the first copy it
// meets. The objects are linked lowest level first (src/CMakeLists.txt), so the copy kept
// is the one every CPU runs; scripts/check-isa checks the built library for wide registers
// outside the functions of their level. A build for this machine only
// (-DTESSERA_CPU_DISPATCH=OFF) compiles everything once with -march=native, as before.

#if TESSERA_CPU_DISPATCH
namespace cpu_x86_64 {
CpuBackendBase* make_cpu_backend();
}
namespace cpu_x86_64_v3 {
CpuBackendBase* make_cpu_backend();
}
namespace cpu_x86_64_v4 {
CpuBackendBase* make_cpu_backend();
}
#endif

namespace {

struct KernelLevel {
  const char* name;
  CpuBackendBase* (*make)();
  bool supported;
};

// The levels this build has, lowest first.
std::vector<KernelLevel> kernel_levels() {
#if TESSERA_CPU_DISPATCH
  __builtin_cpu_init();
  return {
      {"x86-64", &cpu_x86_64::make_cpu_backend, true},
      {"x86-64-v3", &cpu_x86_64_v3::make_cpu_backend, __builtin_cpu_supports("x86-64-v3") != 0},
      {"x86-64-v4", &cpu_x86_64_v4::make_cpu_backend, __builtin_cpu_supports("x86-64-v4") != 0}};
#else
  return {{"native", &TESSERA_CPU_ISA::make_cpu_backend, true}};
#endif
}

// The highest level the CPU runs, or the one TESSERA_CPU_ISA names.
const KernelLevel& chosen_level() {
  static const std::vector<KernelLevel> levels = kernel_levels();
  static const KernelLevel* chosen = [] {
    const char* env = std::getenv("TESSERA_CPU_ISA");
    std::string names;
    for (const KernelLevel& l : levels)
      names += fmt::format("{}{}", names.empty() ? "" : ", ", l.name);
    if (env == nullptr || *env == '\0') {
      const KernelLevel* best = &levels.front();
      for (const KernelLevel& l : levels) {
        if (l.supported) best = &l;
      }
      return best;
    }
    for (const KernelLevel& l : levels) {
      if (l.name != std::string(env)) continue;
      TESSERA_CHECK(l.supported, Error,
                    "[cpu] TESSERA_CPU_ISA={} names kernels this CPU cannot run (it lacks "
                    "instructions of that level); unset it, or name a lower level ({})",
                    env, names);
      return &l;
    }
    throw Error(
        fmt::format("[cpu] TESSERA_CPU_ISA='{}' is not a kernel level of this build; "
                    "use one of: {}",
                    env, names));
  }();
  return *chosen;
}

}  // namespace

const char* cpu_kernel_isa() { return chosen_level().name; }

namespace {
// The backend once made, for the exit drain, which must not make one (Note [Exit with work
// queued]).
std::atomic<CpuBackendBase*> g_made{nullptr};
}  // namespace

CpuBackendBase& cpu_backend_impl() {
  // Never destroyed: tensors in static storage may be freed after main returns.
  static CpuBackendBase* backend = [] {
    CpuBackendBase* made = chosen_level().make();
    g_made.store(made, std::memory_order_release);
    return made;
  }();
  return *backend;
}

Backend& cpu_backend() { return cpu_backend_impl(); }

CpuBackendBase::CpuBackendBase() {
  for (auto& a : allocators_) a = std::make_unique<CpuAllocator>();
}

int CpuBackendBase::device_count() const { return num_cpu_devices(); }

WorkQueue* CpuBackendBase::queue(int index) {
  const CpuDeviceOptions& options = cpu_options();
  if (options.count == 0 || !options.async_queues) return nullptr;
  std::call_once(queues_once_, [&] {
    const int threads = kernel_threads();
    const std::vector<int> cores = allowed_cores();
    for (int i = 0; i < options.count; ++i) {
      queues_[i] =
          std::make_unique<WorkQueue>([own = cores_of_device(cores, i, options.count, threads),
                                       threads] { enter_device_thread(own, threads); });
    }
    queues_made_.store(true, std::memory_order_release);
  });
  return queues_[index].get();
}

// Note [Exit with work queued]
// A program may return from main with kernels still queued (a result it never read). exit
// then destroys the libraries' static objects (oneDNN's JIT kernels, OpenBLAS's buffers)
// while a queue thread may still run a kernel in them: SIGSEGV, one run in four. An atexit
// handler cannot wait for the queues first: those statics are made on a queue thread's
// first call into the library, after any handler of ours, so their destructors run before
// it. glibc's exit runs the exiting thread's thread_local destructors before every atexit
// handler, so the main thread, on its first launch or its first entry into a side stream,
// makes one whose destructor waits for every queue, side streams' too (the atexit handler of
// Note [CPU side streams] came too late when a side stream made the first oneDNN call: a
// program that left matmuls queued there crashed at exit). The main thread also makes it
// when the library is loaded, before main: a program whose main thread queued nothing
// itself, but joined a thread that left work queued, crashed at exit two runs in three.
// Every device's queues are drained, whichever thread queued the work, but for queues made
// before a fork in a forked child (their threads are not there: the wait never ended). Not
// when another thread calls exit(): only the main thread's return is seen (synchronize()
// before such an exit).
struct DrainWhenMainReturns {
  ~DrainWhenMainReturns() {
    if (::gettid() != ::getpid()) return;
    if (CpuBackendBase* backend = g_made.load(std::memory_order_acquire)) backend->drain_queues();
  }
};

void CpuBackendBase::drain_when_main_returns() {
  thread_local const DrainWhenMainReturns drain_at_exit;
  (void)drain_at_exit;
}

namespace {
// Loaded with the program (not dlopen'ed from another thread): armed on the main thread.
[[maybe_unused]] const bool g_drain_armed_at_load = [] {
  if (::gettid() == ::getpid()) CpuBackendBase::drain_when_main_returns();
  return true;
}();
}  // namespace

std::uint64_t CpuBackendBase::run_ahead(int index) {
  drain_when_main_returns();  // Note [Exit with work queued]
  // This thread's launches, and the launch at which it last fed each device: a device fed
  // within the last kWindow launches counts as one it is feeding.
  constexpr std::uint64_t kWindow = 1024;
  thread_local std::uint64_t launches = 0;
  thread_local std::array<std::uint64_t, kMaxDevicesPerKind> last_fed{};
  const std::uint64_t now = ++launches;
  last_fed[index] = now;
  const int count = cpu_options().count;
  for (int i = 0; i < count; ++i) {
    if (i != index && last_fed[i] != 0 && now - last_fed[i] < kWindow) {
      return WorkQueue::kMaxPending;
    }
  }
  return WorkQueue::kMaxPendingAlone;
}

int CpuBackendBase::kernel_threads() {
  std::call_once(threads_once_, [&] {
    const CpuDeviceOptions& options = cpu_options();
    if (options.count == 0) return;
    kernel_threads_ = threads_per_device(static_cast<int>(allowed_cores().size()), options.count,
                                         options.threads_per_device);
  });
  return kernel_threads_;
}

CpuBackendBase::InlineThreads::InlineThreads(int threads) {
  if (threads == 0) return;
  before_ = omp_get_max_threads();
  if (before_ != threads) omp_set_num_threads(threads);
}

CpuBackendBase::InlineThreads::~InlineThreads() {
  if (before_ != 0 && before_ != omp_get_max_threads()) omp_set_num_threads(before_);
}

namespace {

std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown CPU";
}

}  // namespace

DeviceInfo CpuBackendBase::info(int index) const {
  DeviceInfo info;
  info.name = cpu_model_name();
  info.cores = static_cast<int>(std::thread::hardware_concurrency());
  info.total_memory = static_cast<std::size_t>(sysconf(_SC_PHYS_PAGES)) *
                      static_cast<std::size_t>(sysconf(_SC_PAGE_SIZE));
  info.kernel_isa = cpu_kernel_isa();
  const CpuDeviceOptions& options = cpu_options();
  if (options.count > 0) {
    const int threads = cpu_backend_impl().kernel_threads();
    const std::vector<int> own = cores_of_device(allowed_cores(), index, options.count, threads);
    info.details = fmt::format(
        "logical device {} of {}, {} kernel thread(s), {}", index, options.count, threads,
        !options.async_queues ? "runs on the calling thread"
        : own.empty()         ? "own in-order work queue, unpinned (threads outnumber cores)"
        : own.size() == 1     ? fmt::format("own in-order work queue pinned to core {}", own[0])
                              : fmt::format("own in-order work queue pinned to cores {}-{}",
                                            own.front(), own.back()));
  }
  return info;
}

void* CpuBackendBase::allocate(int index, std::size_t bytes, FirstWriter first) {
  if (capturing_[index].load(std::memory_order_relaxed) && records_here(index)) [[unlikely]] {
    return allocators_[index]->allocate_for_graph(bytes);  // Note [Memory of CPU graphs]
  }
  // Note [Memory freed in queue order]: an op's output is written first by a kernel this
  // thread queues next on its current stream's queue; a queue's own thread is never after
  // its queued work.
  const WorkQueue* next = first == FirstWriter::kQueue && !WorkQueue::on_queue_thread()
                              ? current_queue(index)
                              : nullptr;
  return allocators_[index]->allocate(bytes, next);
}

QueueUses CpuBackendBase::queue_uses(int index) const {
  // Every queue of the device may hold borrowed handles to a block
  // (Note [Memory freed in queue order]).
  static_assert(kSideStreams + 1 <= QueueUses::kMax);
  QueueUses uses;
  if (queues_made_.load(std::memory_order_acquire) && queues_[index] != nullptr) {
    uses.add(queues_[index].get());
  }
  const SideStreams& side = side_[index];
  if (side.any.load(std::memory_order_acquire)) {
    for (int id = 1; id <= kSideStreams; ++id) {
      if (WorkQueue* q = side.made[id].load(std::memory_order_acquire)) uses.add(q);
    }
  }
  return uses;
}

void CpuBackendBase::deallocate(int index, void* ptr, std::size_t bytes) {
  allocators_[index]->deallocate(ptr, bytes, queue_uses(index));
}

Backend::StillRead CpuBackendBase::queued_readers(int index) {
  const QueueUses uses = queue_uses(index);
  if (uses.count == 0) return {};
  return [uses] { return !uses.over_for(nullptr); };
}

std::size_t CpuBackendBase::reserved(int index) const { return allocators_[index]->reserved(); }

void CpuBackendBase::empty_cache(int index) { allocators_[index]->empty_cache(); }

std::string CpuBackendBase::memory_report(int index) const {
  const CpuAllocator& a = *allocators_[index];
  // MemAvailable: what the kernel could hand out now without swapping.
  std::size_t available = 0;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    if (line.rfind("MemAvailable:", 0) == 0) {
      available = static_cast<std::size_t>(std::stoull(line.substr(13))) * 1024;
      break;
    }
  }
  return fmt::format(
      "reserved by tessera {} (of which {} in free cached blocks, the largest {}), the system "
      "reports {} available of {}",
      format_bytes(a.reserved()), format_bytes(a.cached()), format_bytes(a.largest_cached_block()),
      format_bytes(available), format_bytes(info(index).total_memory));
}

void CpuBackendBase::copy_from_host(const void* src, const Tensor& dst) {
  refuse_while_capturing(dst.device().index(), "a copy from the host");
  const std::size_t bytes = dst.nbytes();
  if (bytes == 0) return;  // memcpy's pointers must be valid even for 0 bytes
  if (WorkQueue* q = stream_queue(dst.device().index())) {
    // The caller's buffer may be gone before the queue reaches this copy: stage it.
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                      static_cast<const char*>(src) + bytes);
    q->submit([dst, staged] { std::memcpy(impl_of(dst).data(), staged->data(), staged->size()); });
    return;
  }
  std::memcpy(impl_of(dst).data(), src, bytes);
}

void CpuBackendBase::copy_to_host(const Tensor& src, void* dst) {
  refuse_while_capturing(src.device().index(), "a read on the host");
  // The current stream's work (on the default stream, after its joins), as on a GPU.
  if (WorkQueue* q = stream_queue(src.device().index())) q->synchronize();
  if (src.nbytes() > 0) std::memcpy(dst, impl_of(src).data(), src.nbytes());
}

void CpuBackendBase::copy(const Tensor& src, const Tensor& dst) {
  const int s = src.device().index(), d = dst.device().index();
  const bool inline_devices = queue(s) == nullptr;  // logical devices: all queued or none
  const auto copy_on = [&](int device) {            // queued, run, or recorded
    launch_with(
        device, [](const Tensor& from, const Tensor& to) { copy_kernel(from, to); }, src, dst);
  };
  if (s == d || (inline_devices && capturing(d))) {
    copy_on(d);
    return;
  }
  if (inline_devices && capturing(s)) {
    // The source's recording: at capture time src holds nothing yet, and a replay must copy
    // what the replay wrote there.
    copy_on(s);
    return;
  }
  if (inline_devices) {
    // Devices whose default streams run on the calling thread: so does a copy between them,
    // once both devices' current streams (side streams, perhaps) are done with src and dst.
    wait_for_current_stream(s);
    wait_for_current_stream(d);
    const InlineThreads threads(kernel_threads());
    copy_kernel(src, dst);
    return;
  }
  // Its order comes from tickets of this moment, which a replay would not repeat.
  refuse_while_capturing(s, "a copy between two queued devices");
  refuse_while_capturing(d, "a copy between two queued devices");
  // Two queues (each device's current stream): run the copy on the source's once the
  // destination's earlier work is done (it may still read dst), and hold the destination's
  // queue until the copy is done; both queued as one step (Note [Cross-device submissions]).
  const auto lock = hold_cross_device_submissions();
  WorkQueue* qs = stream_queue(s);
  WorkQueue* qd = stream_queue(d);
  const std::uint64_t dst_ready = qd->last_ticket();
  const std::uint64_t copied = qs->submit([src, dst, qd, dst_ready] {
    qd->wait(dst_ready);
    copy_kernel(src, dst);
  });
  qd->submit([qs, copied] { qs->wait_in_task(copied); });  // Note [Errors follow the work]
}

void CpuBackendBase::copy_from_cpu(const Tensor& src, const Tensor& dst) {
  const int s = src.device().index(), d = dst.device().index();
  WorkQueue* qs = s != d ? stream_queue(s) : nullptr;
  WorkQueue* qd = stream_queue(d);
  if (qs == nullptr || qd == nullptr || capturing(d)) {
    launch(d, [src, dst] { copy_kernel(src, dst); });
    return;
  }
  // dst's queue reads src, which nothing queued wrote. Later writes to src are ordered on
  // src's device (its ops, or the host after waiting for it: data(), copy_ from the host),
  // so src's queue waits for the read: a write the user makes to a batch after to_device()
  // no longer lands under the copy (Note [Cross-device submissions]).
  const auto lock = hold_cross_device_submissions();
  const std::uint64_t read = qd->submit([src, dst] { copy_kernel(src, dst); }, run_ahead(d));
  qs->submit([qd, read] { qd->wait(read); });
}

void CpuBackendBase::fill_from_host(int index, std::vector<Tensor> outputs, HostFill fill) {
  // Borrowed, as launch_with's kernels hold theirs: a queued fill that owned its outputs gave
  // their memory back only when it ran, with every task queued by then as the block's uses,
  // so a host running far ahead made each gathered batch land in memory unused (and out of
  // the caches) since that many steps. Borrowed, the host's next batch of the same size
  // reuses the block the step before it read, in queue order (Note [Gathering on the
  // devices] in loader.cpp).
  if (WorkQueue* q = stream_queue(index)) {
    for (Tensor& t : outputs) t = borrow(t);
    q->submit([fill = std::move(fill), outputs = std::move(outputs)] { fill(outputs); },
              run_ahead(index));
  } else {
    const InlineThreads threads(kernel_threads());
    fill(outputs);
  }
}

void throw_scratch_out_of_memory(const char* op, Device device) {
  throw OutOfMemoryError(fmt::format(
      "[{}] out of memory on {}: the kernel could not allocate its scratch memory on the host "
      "(about the size of its input or output, per thread for some). Free tensors you no "
      "longer need, use smaller batches, or use fewer threads (TESSERA_CPU_THREADS)",
      op, device.str()));
}

}  // namespace tessera::detail
