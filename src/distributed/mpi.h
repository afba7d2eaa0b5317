#pragma once
// The MPI transport under process groups (process_group.h): joining and leaving MPI's world,
// and collectives on host memory. It sits below the backends: the CPU backend runs its
// collectives on a device's queue, the CUDA backend broadcasts NCCL's id with it; only
// src/ops and src/backend include it. mpi_world.cpp and mpi_collectives.cpp implement it
// with MPI; no_mpi.cpp, linked when tessera is built without MPI, throws from join.
// See Note [MPI communicators] in mpi_world.cpp.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/dtype.h"

namespace tessera::distributed {

struct World {
  int rank = 0;
  int size = 1;
};

// Joins MPI's world once per process (thread-safe; later calls return the same world): MPI
// is initialised unless something already did. `lanes` communicators are made for device
// queues (lane i for device index i). `queue_threads`: collectives will be called from
// threads other than the caller's, which needs MPI_THREAD_MULTIPLE. Throws Error naming the
// fix when MPI is missing or cannot serve that.
World mpi_join(int lanes, bool queue_threads);
// Finalizes MPI when mpi_join initialised it and nothing has finalized it yet; every
// collective must have returned. Never throws. After mpi_note_failure it first waits a
// bounded time for every rank, then ends the world: Note [Leaving after an error alone].
void mpi_leave();
// This rank had an error (`what`) that the other ranks may not have had: they may be waiting
// for it in a collective, so mpi_leave must not wait for them for ever. The first is kept.
void mpi_note_failure(const std::string& what);
// Every rank made the same call since: the failure noted (if any) was got over.
void mpi_clear_failure();
// After an error on this rank, ends every rank of the world (MPI_Abort) so that none waits
// for this one forever; returns when no world of two or more was joined.
void mpi_abort(int code);
// "Open MPI v4.1.4, ..." (MPI_Get_library_version's first line).
std::string mpi_library_version();

// Host-memory collectives on lane `lane`'s communicator; blocking. `in` may equal `out`.
void mpi_all_reduce(const void* in, void* out, std::int64_t count, Dtype dtype, bool mean,
                    int lane);
void mpi_broadcast(void* buffer, std::int64_t count, Dtype dtype, int root, int lane);
void mpi_all_gather(const void* in, void* out, std::int64_t count, Dtype dtype, int lane);

// On the host communicator, for the callers' own thread (program order):
void mpi_barrier();
// Every rank's `mine` (all of one length), rank after rank.
std::vector<std::int64_t> mpi_exchange(const std::vector<std::int64_t>& mine);
// Rank `root`'s `bytes` bytes at `buffer` into every rank's.
void mpi_broadcast_bytes(void* buffer, std::size_t bytes, int root);

}  // namespace tessera::distributed
