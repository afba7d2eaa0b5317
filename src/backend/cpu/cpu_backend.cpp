#include "backend/cpu/cpu_backend.h"

#include <omp.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "backend/cpu/copy_kernel.h"
#include "tessera/graph.h"
#include "tessera/memory.h"
#include "backend/cpu/cpu_threads.h"
#include "core/tensor_impl.h"

namespace tessera::detail {

CpuBackend& cpu_backend_impl() {
  // Never destroyed: tensors in static storage may be freed after main returns.
  static CpuBackend* backend = new CpuBackend();
  return *backend;
}

Backend& cpu_backend() { return cpu_backend_impl(); }

CpuBackend::CpuBackend() {
  for (auto& a : allocators_) a = std::make_unique<CpuAllocator>();
}

int CpuBackend::device_count() const { return num_cpu_devices(); }

WorkQueue* CpuBackend::queue(int index) {
  const CpuDeviceOptions& options = cpu_options();
  if (options.count == 0 || !options.async_queues) return nullptr;
  std::call_once(queues_once_, [&] {
    const int threads = kernel_threads();
    const std::vector<int> cores = allowed_cores();
    for (int i = 0; i < options.count; ++i) {
      queues_[i] = std::make_unique<WorkQueue>(
          [own = cores_of_device(cores, i, options.count, threads), threads] {
            enter_device_thread(own, threads);
          });
    }
  });
  return queues_[index].get();
}

std::uint64_t CpuBackend::run_ahead(int index) {
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

int CpuBackend::kernel_threads() {
  std::call_once(threads_once_, [&] {
    const CpuDeviceOptions& options = cpu_options();
    if (options.count == 0) return;
    kernel_threads_ = threads_per_device(static_cast<int>(allowed_cores().size()),
                                         options.count, options.threads_per_device);
  });
  return kernel_threads_;
}

CpuBackend::InlineThreads::InlineThreads(int threads) {
  if (threads == 0) return;
  before_ = omp_get_max_threads();
  if (before_ != threads) omp_set_num_threads(threads);
}

CpuBackend::InlineThreads::~InlineThreads() {
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

DeviceInfo CpuBackend::info(int index) const {
  DeviceInfo info;
  info.name = cpu_model_name();
  info.cores = static_cast<int>(std::thread::hardware_concurrency());
  info.total_memory = static_cast<std::size_t>(sysconf(_SC_PHYS_PAGES)) *
                      static_cast<std::size_t>(sysconf(_SC_PAGE_SIZE));
  const CpuDeviceOptions& options = cpu_options();
  if (options.count > 0) {
    const int threads = cpu_backend_impl().kernel_threads();
    const std::vector<int> own =
        cores_of_device(allowed_cores(), index, options.count, threads);
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

void* CpuBackend::allocate(int index, std::size_t bytes) {
  return allocators_[index]->allocate(bytes);
}

void CpuBackend::deallocate(int index, void* ptr, std::size_t bytes) {
  allocators_[index]->deallocate(ptr, bytes);
}

std::size_t CpuBackend::reserved(int index) const { return allocators_[index]->reserved(); }

void CpuBackend::empty_cache(int index) { allocators_[index]->empty_cache(); }

std::string CpuBackend::memory_report(int index) const {
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

void CpuBackend::copy_from_host(const void* src, const Tensor& dst) {
  refuse_while_capturing(dst.device().index(), "a copy from the host");
  const std::size_t bytes = dst.nbytes();
  if (bytes == 0) return;  // memcpy's pointers must be valid even for 0 bytes
  if (WorkQueue* q = queue(dst.device().index())) {
    // The caller's buffer may be gone before the queue reaches this copy: stage it.
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                      static_cast<const char*>(src) + bytes);
    q->submit([dst, staged] { std::memcpy(impl_of(dst).data(), staged->data(), staged->size()); });
    return;
  }
  std::memcpy(impl_of(dst).data(), src, bytes);
}

void CpuBackend::copy_to_host(const Tensor& src, void* dst) {
  refuse_while_capturing(src.device().index(), "a read on the host");
  if (WorkQueue* q = queue(src.device().index())) q->synchronize();
  if (src.nbytes() > 0) std::memcpy(dst, impl_of(src).data(), src.nbytes());
}

void CpuBackend::copy(const Tensor& src, const Tensor& dst) {
  const int s = src.device().index(), d = dst.device().index();
  WorkQueue* qs = queue(s);
  WorkQueue* qd = queue(d);
  if (s == d || qs == nullptr || qd == nullptr) {
    launch(d, [src, dst] { copy_kernel(src, dst); });
    return;
  }
  // Its order comes from tickets of this moment, which a replay would not repeat.
  refuse_while_capturing(s, "a copy between two queued devices");
  refuse_while_capturing(d, "a copy between two queued devices");
  // Two queues: run the copy on the source's queue once the destination's earlier work is
  // done (it may still read dst), and hold the destination's queue until the copy is done.
  const std::uint64_t dst_ready = qd->last_ticket();
  const std::uint64_t copied = qs->submit([src, dst, qd, dst_ready] {
    qd->wait(dst_ready);
    copy_kernel(src, dst);
  });
  qd->submit([qs, copied] { qs->wait(copied); });
}

void CpuBackend::copy_from_cpu(const Tensor& src, const Tensor& dst) {
  launch(dst.device().index(), [src, dst] { copy_kernel(src, dst); });
}

void CpuBackend::synchronize(int index) {
  refuse_while_capturing(index, "a host wait");
  if (WorkQueue* q = queue(index)) q->synchronize();
}

}  // namespace tessera::detail
