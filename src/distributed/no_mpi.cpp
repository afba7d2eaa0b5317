// Linked when tessera is built without MPI (TESSERA_MPI=OFF, or AUTO with no MPI found):
// joining the world says how to get MPI; nothing else can be reached before a join.
#include "core/check.h"
#include "distributed/mpi.h"

namespace tessera::distributed {

World mpi_join(int /*lanes*/, bool /*queue_threads*/) {
  TESSERA_CHECK(false, Error,
                "[ProcessGroup::init] tessera was built without MPI, so it has no process "
                "groups. To fix, install Open MPI (scripts/setup installs libopenmpi-dev and "
                "openmpi-bin) and rebuild (cmake finds it; -DTESSERA_MPI=ON requires it)");
  return {};
}

void mpi_leave() {}

void mpi_note_failure(const std::string& /*what*/) {}

void mpi_clear_failure() {}

void mpi_abort(int /*code*/) {}

std::string mpi_library_version() { return "no MPI (tessera was built without it)"; }

// Unreachable without a joined world: the front end joins first.
void mpi_all_reduce(const void*, void*, std::int64_t, Dtype, bool, int) { mpi_join(0, false); }
void mpi_broadcast(void*, std::int64_t, Dtype, int, int) { mpi_join(0, false); }
void mpi_all_gather(const void*, void*, std::int64_t, Dtype, int) { mpi_join(0, false); }
void mpi_barrier() { mpi_join(0, false); }
std::vector<std::int64_t> mpi_exchange(const std::vector<std::int64_t>&) {
  mpi_join(0, false);
  return {};
}
void mpi_broadcast_bytes(void*, std::size_t, int) { mpi_join(0, false); }

}  // namespace tessera::distributed
