# MPI for process groups (process_group.h): built when TESSERA_MPI is ON, or AUTO and an MPI
# usable from C++ is found (its C API: the deprecated C++ bindings are skipped) (Debian: libopenmpi-dev, which scripts/setup installs). Sets
# TESSERA_WITH_MPI. Without it, src/distributed/no_mpi.cpp says how to get it.
set(TESSERA_MPI "AUTO" CACHE STRING
  "Build process groups on MPI: AUTO (when MPI is found), ON (required) or OFF")
set_property(CACHE TESSERA_MPI PROPERTY STRINGS AUTO ON OFF)
set(TESSERA_WITH_MPI OFF)
if(NOT TESSERA_MPI STREQUAL "OFF")
  set(MPI_CXX_SKIP_MPICXX ON)
  find_package(MPI COMPONENTS CXX)
  if(MPI_CXX_FOUND)
    set(TESSERA_WITH_MPI ON)
  elseif(TESSERA_MPI STREQUAL "ON")
    message(FATAL_ERROR "TESSERA_MPI=ON but no MPI was found: run scripts/setup "
                        "(apt-get install libopenmpi-dev openmpi-bin)")
  endif()
endif()
if(TESSERA_WITH_MPI)
  message(STATUS "tessera: MPI process groups ON (${MPI_CXX_LIBRARIES}; mpirun: ${MPIEXEC_EXECUTABLE})")
else()
  message(STATUS "tessera: MPI process groups OFF (TESSERA_MPI=${TESSERA_MPI})")
endif()
