// Joining and leaving MPI's world, and the communicators collectives run on.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/check.h"
#include "distributed/launcher.h"
#include "distributed/mpi.h"
#include "distributed/mpi_internal.h"

// Note [MPI communicators]
// MPI pairs the collectives of the ranks on a communicator by their order, so every rank
// must issue them in one order on each. The host communicator serves the calling thread
// (the cross-rank checks, barrier, NCCL's id), in program order. Each device queue has its
// own lane, a duplicate of MPI_COMM_WORLD: a queue runs its collectives in the order they
// were queued, which is program order, but two devices' queues may run theirs in either
// order, so on one shared communicator rank 0's first collective could meet rank 1's
// second. Every communicator is duplicated at join, in one order on every rank
// (MPI_Comm_dup is a collective too), and returns errors instead of aborting.
// Threads: with device queues MPI is called from the queue threads while the caller's
// thread checks the next call, which needs MPI_THREAD_MULTIPLE; without queues only the
// caller's thread calls, one call at a time (MPI_THREAD_SERIALIZED is enough).

// Note [Leaving after an error alone]
// MPI_Finalize waits for every rank. A rank whose Trainer::fit threw an error the others did
// not get (its own disk full, a bad batch of its shard), caught it and returned from main
// would wait there for ranks that wait for it in their next all-reduce: every rank hangs.
// So every rank, leaving, first meets the others at a barrier on a communicator of its own
// (`farewell`: no other call can be matched with it). A healthy rank waits there as long as
// MPI_Finalize would; a rank that noted a failure waits kFarewellWait at most and then
// ends the world (MPI_Abort), saying why. Ranks that all failed together (the same error
// everywhere) meet at once and finalize cleanly. Errors every rank throws at once by design
// (a comparison across ranks found a difference: ops/rank_errors.h) are not noted, and a
// note is dropped when every rank makes a collective call again (the ranks got over it).

namespace tessera::distributed {
namespace {

struct State {
  std::mutex mutex;
  bool joined = false;
  bool initialised_here = false;  // MPI_Init_thread was ours, so MPI_Finalize is too
  World world;
  int provided = MPI_THREAD_SINGLE;
  MPI_Comm host = MPI_COMM_NULL;
  MPI_Comm farewell = MPI_COMM_NULL;  // Note [Leaving after an error alone]
  std::mutex failure_mutex;           // not `mutex`: a join may hold that, waiting for other ranks
  std::string failure;                // mpi_note_failure's first since the last mpi_clear_failure
  std::atomic<bool> failed{false};    // failure is not empty: read without the lock
  std::vector<MPI_Comm> lanes;
  std::string lanes_error;  // the ranks disagree on the lanes: every later join fails too
};

State& state() {
  static State* const s = new State();  // never destroyed: used from atexit handlers
  return *s;
}

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    default:
      return "MPI_THREAD_MULTIPLE";
  }
}

MPI_Comm duplicate_world() {
  MPI_Comm comm = MPI_COMM_NULL;
  TESSERA_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  TESSERA_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  return comm;
}

void check_thread_level(const State& s, bool queue_threads) {
  const int needed = queue_threads ? MPI_THREAD_MULTIPLE : MPI_THREAD_SERIALIZED;
  TESSERA_CHECK(s.provided >= needed, Error,
                "[ProcessGroup::init] {} needs MPI at thread level {}, but {} provides {}{}. {}",
                queue_threads ? "logical CPU devices run each collective on their device's queue "
                                "thread, which"
                              : "tessera",
                thread_level_name(needed), mpi_library_version(), thread_level_name(s.provided),
                s.initialised_here ? "" : " (MPI was initialised before tessera, by the program)",
                queue_threads
                    ? "Initialise MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...) or "
                      "leave it to tessera, use an MPI built with thread support, or run the "
                      "logical devices without queues (TESSERA_CPU_ASYNC=0)"
                    : "Initialise MPI with MPI_Init_thread(..., MPI_THREAD_SERIALIZED, ...) "
                      "or leave it to tessera");
}

// Lanes are duplicated in step on every rank, so every rank must want as many (a rank with
// more would wait in MPI_Comm_dup for ranks that never come).
void check_same_lanes(State& s, int lanes) {
  std::vector<int> all(static_cast<std::size_t>(s.world.size));
  TESSERA_MPI_CHECK(MPI_Allgather(&lanes, 1, MPI_INT, all.data(), 1, MPI_INT, s.host));
  for (int r = 1; r < s.world.size && s.lanes_error.empty(); ++r) {
    if (all[r] == all[0]) continue;
    s.lanes_error = fmt::format(
        "[ProcessGroup::init] rank {} has {} CPU devices but rank 0 has {} "
        "(TESSERA_CPU_DEVICES, 0 counting as 1); every rank must have the same. Give them one "
        "value, e.g. mpirun -x TESSERA_CPU_DEVICES=2",
        r, all[r], all[0]);
  }
}

}  // namespace

World mpi_join(int lanes, bool queue_threads) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (!s.joined) {
    int initialised = 0;
    TESSERA_MPI_CHECK(MPI_Initialized(&initialised));
    if (initialised == 0) {
      // No argv: Open MPI takes what it needs from the launcher's environment.
      TESSERA_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &s.provided));
      s.initialised_here = true;
    } else {
      TESSERA_MPI_CHECK(MPI_Query_thread(&s.provided));
    }
    TESSERA_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &s.world.rank));
    TESSERA_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &s.world.size));
    const int announced = launcher_size();
    TESSERA_CHECK(announced <= 1 || announced == s.world.size, Error,
                  "[ProcessGroup::init] the launcher started {} processes but {} made a world "
                  "of {}: the program runs with another MPI than the mpirun that started it. "
                  "Launch it with the mpirun of the MPI tessera was built with",
                  announced, mpi_library_version(), s.world.size);
    s.host = duplicate_world();
    s.farewell = duplicate_world();
    s.joined = true;
    check_same_lanes(s, lanes);
  }
  if (!s.lanes_error.empty()) throw Error(s.lanes_error);
  TESSERA_INTERNAL_ASSERT(s.lanes.empty() || static_cast<int>(s.lanes.size()) == lanes,
                          "joined with {} lanes, then {}", s.lanes.size(), lanes);
  while (static_cast<int>(s.lanes.size()) < lanes) s.lanes.push_back(duplicate_world());
  check_thread_level(s, queue_threads);
  return s.world;
}

namespace {

constexpr std::chrono::seconds kFarewellWait{10};

// Every rank's barrier on the way out: false when this rank noted a failure and the others
// did not all arrive within kFarewellWait.
bool every_rank_leaves(const State& s, const std::string& failure) {
  MPI_Request request = MPI_REQUEST_NULL;
  if (MPI_Ibarrier(s.farewell, &request) != MPI_SUCCESS) return true;  // let MPI_Finalize try
  if (failure.empty()) {
    MPI_Wait(&request, MPI_STATUS_IGNORE);
    return true;
  }
  const auto deadline = std::chrono::steady_clock::now() + kFarewellWait;
  while (std::chrono::steady_clock::now() < deadline) {
    int done = 0;
    if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done != 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

}  // namespace

void mpi_leave() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!s.initialised_here || finalized != 0) return;
  std::string failure;
  {
    std::lock_guard failure_lock(s.failure_mutex);
    failure = s.failure;
  }
  if (s.joined && s.world.size > 1 && !every_rank_leaves(s, failure)) {
    std::fprintf(stderr,
                 "[ProcessGroup] rank %d is exiting after an error the other ranks did not get "
                 "(%s); they did not reach the exit within %lld s and would wait for this rank "
                 "for ever, so every rank is ended now (MPI_Abort). To end them at once, call "
                 "ProcessGroup::abort_world where the error is caught\n",
                 s.world.rank, failure.c_str(), static_cast<long long>(kFarewellWait.count()));
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
}

void mpi_note_failure(const std::string& what) {
  State& s = state();
  std::lock_guard lock(s.failure_mutex);
  if (s.failure.empty()) s.failure = what.empty() ? "no message" : what;
  s.failed.store(true);
}

void mpi_clear_failure() {
  State& s = state();
  if (!s.failed.load(std::memory_order_relaxed)) return;  // every collective's check calls this
  std::lock_guard lock(s.failure_mutex);
  s.failure.clear();
  s.failed.store(false);
}

void mpi_abort(int code) {
  State& s = state();
  // No lock: another thread may hold it, blocked in a collective with a rank that is gone.
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (s.joined && s.world.size > 1 && finalized == 0) MPI_Abort(MPI_COMM_WORLD, code);
}

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(text, &length);
  std::string version(text, static_cast<std::size_t>(length));
  return version.substr(0, version.find_first_of(",\n"));
}

MPI_Comm host_comm() {
  TESSERA_INTERNAL_ASSERT(state().joined, "MPI used before mpi_join");
  return state().host;
}

MPI_Comm lane_comm(int lane) {
  const State& s = state();
  TESSERA_INTERNAL_ASSERT(lane >= 0 && lane < static_cast<int>(s.lanes.size()), "lane {} of {}",
                          lane, s.lanes.size());
  return s.lanes[static_cast<std::size_t>(lane)];
}

void throw_mpi_error(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
  throw Error(fmt::format("[mpi] {} failed: {} (code {}) at {}:{}, with {}", call,
                          length > 0 ? std::string(text, length) : "unknown error", code, file,
                          line, mpi_library_version()));
}

}  // namespace tessera::distributed
