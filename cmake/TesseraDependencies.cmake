# Third-party libraries, all from Debian's archive (scripts/setup installs them).
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(fmt REQUIRED)
# JSON for the safetensors header (header-only, private to the library).
find_package(nlohmann_json 3.10 REQUIRED)
# zlib reads the gzipped IDX files of Fashion-MNIST.
find_package(ZLIB REQUIRED)
# Cairo draws the training chart (SVG and PNG).
find_package(PkgConfig REQUIRED)
pkg_check_modules(CAIRO REQUIRED IMPORTED_TARGET cairo)

# OpenBLAS's OpenMP build shares libgomp's thread pool with tessera's own kernels (two
# pools on two cores fight). oneDNN's sgemm is faster for float32 (docs/benchmarks.md).
find_path(TESSERA_CBLAS_INCLUDE_DIR cblas.h
  PATHS /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/openblas
  NO_DEFAULT_PATH)
find_library(TESSERA_OPENBLAS_LIBRARY NAMES openblas
  PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp NO_DEFAULT_PATH)
if(NOT TESSERA_CBLAS_INCLUDE_DIR OR NOT TESSERA_OPENBLAS_LIBRARY)
  message(FATAL_ERROR "OpenBLAS (OpenMP build) not found: run scripts/setup "
                      "(apt-get install libopenblas-openmp-dev)")
endif()
find_path(TESSERA_DNNL_INCLUDE_DIR dnnl.h)
find_library(TESSERA_DNNL_LIBRARY NAMES dnnl)
if(NOT TESSERA_DNNL_INCLUDE_DIR OR NOT TESSERA_DNNL_LIBRARY)
  message(FATAL_ERROR "oneDNN not found: run scripts/setup (apt-get install libdnnl-dev)")
endif()
