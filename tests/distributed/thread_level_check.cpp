// A program that initialises MPI itself at MPI_THREAD_SINGLE, then asks for a process group
// while logical CPU devices with queues are on (TESSERA_CPU_DEVICES=2): tessera must refuse
// with an Error naming the thread level it needs. CTest matches the printed message.
#include <mpi.h>

#include <iostream>

#include "tessera/tessera.h"

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SINGLE, &provided);
  int status = 1;
  try {
    tessera::ProcessGroup::init();
    std::cout << "no error (MPI provides level " << provided << ")\n";
  } catch (const tessera::Error& e) {
    std::cout << e.what() << "\n";
    status = 0;
  }
  MPI_Finalize();  // the program's, not tessera's: tessera did not initialise MPI
  return status;
}
