#pragma once
// What mpi_world.cpp shares with mpi_collectives.cpp: the communicators and the check macro.
// Every MPI call goes through TESSERA_MPI_CHECK, like CUDA calls through TESSERA_CUDA_CHECK;
// tessera's communicators return errors (MPI_ERRORS_RETURN) instead of aborting.
#include <mpi.h>

namespace tessera::distributed {

[[noreturn]] void throw_mpi_error(int code, const char* call, const char* file, int line);

// The communicators made at join (Note [MPI communicators]); the world must be joined.
MPI_Comm host_comm();
MPI_Comm lane_comm(int lane);

}  // namespace tessera::distributed

#define TESSERA_MPI_CHECK(call)                                                              \
  do {                                                                                       \
    const int tessera_mpi_code_ = (call);                                                    \
    if (tessera_mpi_code_ != MPI_SUCCESS) [[unlikely]] {                                     \
      ::tessera::distributed::throw_mpi_error(tessera_mpi_code_, #call, __FILE__, __LINE__); \
    }                                                                                        \
  } while (false)
