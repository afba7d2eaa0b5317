// Asks for a process group where that must fail, and prints the error for CTest to match:
//   init_check --mpi-single   the program initialises MPI itself at MPI_THREAD_SINGLE, while
//                             logical CPU devices with queues need MPI_THREAD_MULTIPLE
//   init_check                (under mpirun, with TESSERA_CPU_DEVICES differing by rank)
// Exits 0 when init threw tessera::Error, 1 when it did not.
#include <mpi.h>

#include <iostream>
#include <string>

#include "tessera/tessera.h"

int main(int argc, char** argv) {
  const bool own_mpi = argc > 1 && std::string(argv[1]) == "--mpi-single";
  if (own_mpi) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SINGLE, &provided);
  }
  int status = 1;
  try {
    tessera::ProcessGroup::init();
    std::cout << "no error\n";
  } catch (const tessera::Error& e) {
    std::cout << e.what() << "\n";
    status = 0;
  }
  if (own_mpi) MPI_Finalize();  // the program's MPI; otherwise tessera finalizes at exit
  return status;
}
