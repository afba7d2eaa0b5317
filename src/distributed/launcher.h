#pragma once
// What a launcher (Open MPI's mpirun, MPICH's hydra, PMIx) says in the environment about the
// world it started, read without touching MPI.
#include <cstdlib>

namespace tessera::distributed {

// The world size a launcher put in the environment; 0 without one, -1 when launched by a
// PMIx launcher that does not say the size.
inline int launcher_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    if (const char* v = std::getenv(name); v != nullptr) return std::atoi(v);
  }
  return std::getenv("PMIX_RANK") != nullptr ? -1 : 0;
}

// This process's rank among those on its machine (to pick its GPU); 0 without a launcher.
inline int launcher_local_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"}) {
    if (const char* v = std::getenv(name); v != nullptr) return std::atoi(v);
  }
  return 0;
}

}  // namespace tessera::distributed
