// Front end of process groups: joining the world, the checks on this rank's tensor and
// across ranks, the ledger, then the backend's process collective. See process_group.h.
#include "tessera/process_group.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <limits>
#include <mutex>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "autograd/record.h"
#include "backend/backend.h"
#include "core/check.h"
#include "core/code_names.h"
#include "core/device_registry.h"
#include "core/device_rules.h"
#include "core/tensor_impl.h"
#include "distributed/launcher.h"
#include "distributed/mpi.h"
#include "ops/rank_errors.h"

namespace tessera {
namespace {

using detail::CollectiveKind;

struct Groups {
  std::mutex mutex;
  std::array<ProcessGroup*, 2> by_backend{};  // never destroyed: used until exit
  // Devices that got a process collective: exit waits for their queues before MPI goes.
  std::array<std::array<std::atomic<bool>, detail::kMaxDevicesPerKind>, 2> used{};
};

Groups& groups() {
  static Groups* const g = new Groups();
  return *g;
}

// At exit, after main: queued collectives run before MPI is finalized (a queue thread still
// inside MPI_Allreduce when MPI_Finalize runs would crash). Their errors have no one to go to.
void finish() {
  Groups& g = groups();
  for (int kind = 0; kind < 2; ++kind) {
    for (int i = 0; i < detail::kMaxDevicesPerKind; ++i) {
      if (!g.used[kind][i].load()) continue;
      const Device d(static_cast<DeviceKind>(kind), i);
      try {
        detail::backend_of(d).synchronize(i);
      } catch (...) {  // NOLINT(bugprone-empty-catch): nothing can report it now
      }
    }
  }
  distributed::mpi_leave();
}

// What a rank called, as the cross-rank check exchanges it: a CollectiveKind, or a barrier.
constexpr std::int64_t kBarrier = -1;
constexpr std::int64_t kExchange = -2;  // ProcessGroup::exchange; its `root` is the length

const char* kind_name(std::int64_t kind) {
  if (kind == kBarrier) return "barrier";
  if (kind == kExchange) return "exchange";
  return detail::collective_name(static_cast<CollectiveKind>(kind));
}

// Runs this rank's own checks of a call; the error they throw, if any, for after the
// cross-rank exchange (a rank that threw alone would leave the others waiting there).
template <typename Checks>
std::exception_ptr refusal_of(Checks&& checks) {
  try {
    checks();
    return nullptr;
  } catch (const Error&) {
    return std::current_exception();
  }
}

// This rank's tensor, on its own: defined, on the backend's device kind, contiguous.
void check_tensor(const char* op, ProcessBackend backend, const Tensor& t) {
  detail::check_defined(t, op);
  const bool gpu = t.device().kind() == DeviceKind::kCuda;
  TESSERA_CHECK(backend != ProcessBackend::kMpi || !gpu, DeviceError,
                "[{}] the tensor is on {}, but this process group's backend is MPI, which "
                "moves CPU tensors only. For GPU tensors use "
                "ProcessGroup::init(ProcessBackend::kNccl) (one process per GPU), or move the "
                "tensor with .to(cpu()) first",
                op, t.device().str());
  TESSERA_CHECK(backend != ProcessBackend::kNccl || gpu, DeviceError,
                "[{}] the tensor is on {}, but this process group's backend is NCCL, which "
                "moves GPU tensors only. For CPU tensors use ProcessGroup::init() (MPI), or "
                "move the tensor to this process's GPU with .to(gpu(i)) first",
                op, t.device().str());
  TESSERA_CHECK(t.is_contiguous(), Error,
                "[{}] the tensor is not contiguous (a transposed or sliced view); pass "
                ".contiguous() and use the result",
                op);
}

// Every rank's call must match rank 0's: the kind, root, device (MPI pairs collectives by
// device index), dtype and shape. One short exchange on the host; every rank sees the same
// table, so every rank throws: its own refusal (`refused`, from refusal_of) or, when another
// rank refused its call or the calls differ, an error naming that rank. `t` is null for a
// barrier.
void agree_across_ranks(const char* op, const ProcessGroup& pg, std::int64_t kind, const Tensor* t,
                        int root, const std::exception_ptr& refused) {
  if (pg.size() == 1) {
    if (refused) std::rethrow_exception(refused);
    return;
  }
  constexpr std::size_t kFields = 6 + kMaxDims;
  std::vector<std::int64_t> mine(kFields, 0);
  mine[0] = kind;
  mine[1] = refused ? 1 : 0;
  if (!refused) mine[2] = root;
  if (!refused && t != nullptr) {
    mine[3] = t->device().index();
    mine[4] = static_cast<std::int64_t>(t->dtype());
    mine[5] = t->dim();
    std::copy(t->shape().begin(), t->shape().end(), mine.begin() + 6);
  }
  const std::vector<std::int64_t> all = distributed::mpi_exchange(mine);
  // Every rank saw this table: what it makes one throw, it makes every one throw.
  detail::on_every_rank([&] {
    if (refused) std::rethrow_exception(refused);
    const auto field = [&](int r, std::size_t f) { return all[r * kFields + f]; };
    for (int r = 0; r < pg.size(); ++r) {
      TESSERA_CHECK(field(r, 1) == 0, Error,
                    "[{}] rank {} refused its {} (its own error says why), so every rank stops "
                    "at this collective",
                    op, r, kind_name(field(r, 0)));
    }
    const auto shape = [&](int r) {
      return Shape(all.begin() + r * kFields + 6, all.begin() + r * kFields + 6 + field(r, 5));
    };
    for (int r = 1; r < pg.size(); ++r) {
      TESSERA_CHECK(field(r, 0) == field(0, 0), Error,
                    "[{}] rank {} called {} while rank 0 called {}; every rank must make the "
                    "same collectives in the same order",
                    op, r, kind_name(field(r, 0)), kind_name(field(0, 0)));
      TESSERA_CHECK(kind != kExchange || field(r, 2) == field(0, 2), Error,
                    "[{}] rank {} exchanges {} value(s) but rank 0 exchanges {}; every rank must "
                    "pass as many",
                    op, r, field(r, 2), field(0, 2));
      if (t == nullptr) continue;  // a barrier has nothing more to match
      // An all_reduce's `root` is its ReduceKind: a sum on one rank and a mean on another gave
      // each rank another result, silently.
      const auto reduction = [](std::int64_t k) {
        return static_cast<ReduceKind>(k) == ReduceKind::kMean ? "kMean" : "kSum";
      };
      TESSERA_CHECK(kind != static_cast<std::int64_t>(CollectiveKind::kAllReduce) ||
                        field(r, 2) == field(0, 2),
                    Error,
                    "[{}] rank {} reduces with ReduceKind::{} but rank 0 with ReduceKind::{}; "
                    "every rank must pass the same ReduceKind",
                    op, r, reduction(field(r, 2)), reduction(field(0, 2)));
      TESSERA_CHECK(field(r, 2) == field(0, 2), Error,
                    "[{}] rank {} broadcasts from root {} but rank 0 from root {}; every rank "
                    "must name the same root",
                    op, r, field(r, 2), field(0, 2));
      TESSERA_CHECK(pg.backend() != ProcessBackend::kMpi || field(r, 3) == field(0, 3), DeviceError,
                    "[{}] rank {} passed a tensor on {} but rank 0 one on {}; MPI pairs each "
                    "device's collectives with the same device of the other ranks, so every "
                    "rank must use the same device for a collective",
                    op, r, Device(t->device().kind(), static_cast<int>(field(r, 3))).str(),
                    Device(t->device().kind(), static_cast<int>(field(0, 3))).str());
      const auto dtype = [&](int q) { return dtype_name(static_cast<Dtype>(field(q, 4))); };
      TESSERA_CHECK(field(r, 4) == field(0, 4), DtypeError,
                    "[{}] rank {} passed a {} tensor but rank 0 passed {}; every rank must pass "
                    "the same dtype (convert with .to({}) first)",
                    op, r, dtype(r), dtype(0), detail::dtype_code(static_cast<Dtype>(field(0, 4))));
      TESSERA_CHECK(shape(r) == shape(0), ShapeError,
                    "[{}] rank {} passed shape {} but rank 0 passed {}; every rank must pass the "
                    "same shape",
                    op, r, shape(r).str(), shape(0).str());
    }
  });
  // Every rank is here, making the same call: a failure one noted before was got over.
  distributed::mpi_clear_failure();
}

void run(const ProcessGroup& pg, CollectiveKind kind, const Tensor& in, const Tensor& out,
         bool mean, int root) {
  const Device d = in.device();
  groups().used[static_cast<int>(d.kind())][d.index()].store(true);
  detail::backend_of(d).process_collective({kind, in, out, mean, root, pg.rank(), pg.size()});
}

}  // namespace

const char* process_backend_name(ProcessBackend backend) {
  return backend == ProcessBackend::kMpi ? "mpi" : "nccl";
}

int ProcessGroup::launched_size() {
  const int size = distributed::launcher_size();
  return size == 0 ? 1 : std::max(size, 0);
}

int ProcessGroup::local_rank() { return distributed::launcher_local_rank(); }

void ProcessGroup::abort_world(int code) { distributed::mpi_abort(code); }

namespace {
thread_local std::exception_ptr t_thrown_on_every_rank;
}  // namespace

void detail::mark_thrown_on_every_rank(const std::exception_ptr& error) {
  t_thrown_on_every_rank = error;
}

bool detail::thrown_on_every_rank(const std::exception_ptr& error) {
  return error != nullptr && error == t_thrown_on_every_rank;
}

void ProcessGroup::note_failure(const std::string& what) const {
  if (size_ > 1) distributed::mpi_note_failure(what);
}

ProcessGroup& ProcessGroup::init(ProcessBackend backend) {
  Groups& g = groups();
  std::lock_guard lock(g.mutex);
  ProcessGroup*& slot = g.by_backend[static_cast<int>(backend)];
  if (slot != nullptr) return *slot;
  // Refused before joining: NCCL would start, and fail only at the first collective.
  TESSERA_CHECK(backend != ProcessBackend::kNccl || num_gpus() > 0, DeviceError,
                "[ProcessGroup::init] the NCCL backend moves GPU tensors, but this process "
                "sees no GPU ({}); use ProcessGroup::init() (MPI) for CPU tensors",
                gpu_unavailable_reason());
  // Lanes and queues follow the CPU configuration, which is fixed from here on.
  detail::mark_devices_in_use();
  const CpuDeviceOptions& cpu = detail::cpu_options();
  const bool queues = backend == ProcessBackend::kMpi && cpu.count > 0 && cpu.async_queues;
  // Before joining: a join that throws after MPI_Init must still finalize at exit.
  static std::once_flag at_exit;
  std::call_once(at_exit, [] { std::atexit(finish); });
  const distributed::World w = distributed::mpi_join(std::max(1, cpu.count), queues);
  slot = new ProcessGroup(backend, w.rank, w.size);
  return *slot;
}

ProcessGroup& ProcessGroup::world(ProcessBackend backend) {
  Groups& g = groups();
  std::lock_guard lock(g.mutex);
  ProcessGroup* pg = g.by_backend[static_cast<int>(backend)];
  TESSERA_CHECK(pg != nullptr, Error,
                "[ProcessGroup::world] there is no {} process group yet; call "
                "ProcessGroup::init({}) first, once, early in main",
                process_backend_name(backend),
                backend == ProcessBackend::kMpi ? "" : "ProcessBackend::kNccl");
  return *pg;
}

void ProcessGroup::all_reduce(const Tensor& tensor, ReduceKind op) const {
  constexpr const char* kOp = "ProcessGroup::all_reduce";
  const std::exception_ptr refused = refusal_of([&] {
    check_tensor(kOp, backend_, tensor);
    TESSERA_CHECK(tensor.dtype() != kBool, DtypeError,
                  "[{}] bool tensors cannot be summed; convert them with .to(kInt64) first", kOp);
    TESSERA_CHECK(op != ReduceKind::kMean || is_floating(tensor.dtype()), DtypeError,
                  "[{}] the mean of {} tensors would be rounded and its sum can overflow; "
                  "all_reduce the sum (ReduceKind::kSum) and divide it, or convert with "
                  ".to(kFloat64) first",
                  kOp, dtype_name(tensor.dtype()));
    detail::check_inplace(kOp, {&tensor});
  });
  agree_across_ranks(kOp, *this, static_cast<std::int64_t>(CollectiveKind::kAllReduce), &tensor,
                     static_cast<int>(op), refused);  // the reduction, in the root's place
  // In ring terms a rank receives the other ranks' parts of its chunk, then the other
  // reduced chunks: (k - 1) * c + (n - c) elements (as collectives.cpp counts).
  const std::int64_t n = tensor.numel(), k = size_;
  const std::int64_t c = n / k + (rank_ < n % k ? 1 : 0);
  detail::count_collective(
      tensor.device(), static_cast<std::size_t>((k - 1) * c + (n - c)) * itemsize(tensor.dtype()));
  run(*this, CollectiveKind::kAllReduce, tensor, tensor, op == ReduceKind::kMean, 0);
  detail::mark_written(tensor);  // once nothing refused (record.h)
}

void ProcessGroup::broadcast(const Tensor& tensor, int root) const {
  constexpr const char* kOp = "ProcessGroup::broadcast";
  const std::exception_ptr refused = refusal_of([&] {
    check_tensor(kOp, backend_, tensor);
    TESSERA_CHECK(root >= 0 && root < size_, Error,
                  "[{}] root {} is not a rank of this world of {} (ranks 0 to {})", kOp, root,
                  size_, size_ - 1);
    if (rank_ != root) detail::check_inplace(kOp, {&tensor});
  });
  agree_across_ranks(kOp, *this, static_cast<std::int64_t>(CollectiveKind::kBroadcast), &tensor,
                     root, refused);
  if (rank_ != root) detail::count_collective(tensor.device(), tensor.nbytes());
  run(*this, CollectiveKind::kBroadcast, tensor, tensor, false, root);
  if (rank_ != root) detail::mark_written(tensor);  // once nothing refused (record.h)
}

Tensor ProcessGroup::all_gather(const Tensor& tensor) const {
  constexpr const char* kOp = "ProcessGroup::all_gather";
  const std::exception_ptr refused = refusal_of([&] {
    check_tensor(kOp, backend_, tensor);
    TESSERA_CHECK(tensor.dim() >= 1, ShapeError,
                  "[{}] needs a tensor with at least one dim (it stacks rows), got a 0-dim "
                  "tensor; reshape it with .reshape({{1}})",
                  kOp);
  });
  agree_across_ranks(kOp, *this, static_cast<std::int64_t>(CollectiveKind::kAllGather), &tensor, 0,
                     refused);
  Shape shape = tensor.shape();
  shape[0] *= size_;
  Tensor out = detail::make_tensor(shape, tensor.dtype(), tensor.device(), kOp);
  detail::count_collective(tensor.device(), tensor.nbytes() * static_cast<std::size_t>(size_ - 1));
  run(*this, CollectiveKind::kAllGather, tensor, out, false, 0);
  return out;
}

std::vector<std::int64_t> ProcessGroup::exchange(const std::vector<std::int64_t>& mine) const {
  if (size() == 1) return mine;
  TESSERA_CHECK(mine.size() <= static_cast<std::size_t>(std::numeric_limits<int>::max()), Error,
                "[ProcessGroup::exchange] {} values are more than MPI passes in one call",
                mine.size());
  agree_across_ranks("ProcessGroup::exchange", *this, kExchange, nullptr,
                     static_cast<int>(mine.size()), nullptr);
  return distributed::mpi_exchange(mine);
}

void ProcessGroup::barrier() const {
  // Through the check, so that a barrier met by another rank's collective is refused on both.
  agree_across_ranks("ProcessGroup::barrier", *this, kBarrier, nullptr, 0, nullptr);
  distributed::mpi_barrier();
}

}  // namespace tessera
