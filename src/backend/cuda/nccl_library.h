#pragma once
// NCCL, opened with dlopen on first use and never linked (Note [NCCL at run time] in
// nccl_collectives.cpp). Only the types and enums come from <nccl.h>; where a toolkit lacks
// it, the few this backend uses are declared below with NCCL 2's values (its stable ABI).
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "tessera/dtype.h"

#if __has_include(<nccl.h>)
#include <nccl.h>
#define TESSERA_HAVE_NCCL_H 1
#else
extern "C" {
typedef struct ncclComm* ncclComm_t;
typedef struct {
  char internal[128];  // NCCL_UNIQUE_ID_BYTES
} ncclUniqueId;
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7
} ncclResult_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;
typedef enum {
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt64 = 4,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9
} ncclDataType_t;
}
#endif

namespace tessera::detail::cuda {

// The entry points of the loaded libnccl, resolved with dlsym.
struct NcclLibrary {
  using GetVersionFn = ncclResult_t (*)(int*);
  using CommInitAllFn = ncclResult_t (*)(ncclComm_t*, int, const int*);
  using CommDestroyFn = ncclResult_t (*)(ncclComm_t);
  using GetUniqueIdFn = ncclResult_t (*)(ncclUniqueId*);
  using CommInitRankFn = ncclResult_t (*)(ncclComm_t*, int, ncclUniqueId, int);
  using GroupFn = ncclResult_t (*)();
  using AllReduceFn = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
                                       ncclComm_t, cudaStream_t);
  using BroadcastFn = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                                       cudaStream_t);
  using AllGatherFn = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclComm_t,
                                       cudaStream_t);
  using ReduceScatterFn = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
                                           ncclComm_t, cudaStream_t);
  using GetErrorStringFn = const char* (*)(ncclResult_t);
  using CommGetAsyncErrorFn = ncclResult_t (*)(ncclComm_t, ncclResult_t*);

  GetVersionFn get_version = nullptr;
  CommInitAllFn comm_init_all = nullptr;
  CommDestroyFn comm_destroy = nullptr;  // unused while communicators live for the process
  // Process groups: rank 0 makes the id, every rank joins with it.
  GetUniqueIdFn get_unique_id = nullptr;
  CommInitRankFn comm_init_rank = nullptr;
  GroupFn group_start = nullptr;
  GroupFn group_end = nullptr;
  AllReduceFn all_reduce = nullptr;
  BroadcastFn broadcast = nullptr;
  AllGatherFn all_gather = nullptr;
  ReduceScatterFn reduce_scatter = nullptr;
  GetErrorStringFn get_error_string = nullptr;
  CommGetAsyncErrorFn comm_get_async_error = nullptr;  // optional: nullptr when absent

  std::string path;  // what dlopen was given
  int version = 0;   // ncclGetVersion's code: 22809 for 2.28.9 (2805 for 2.8.5)

  // ncclAvg and ncclBfloat16 came with NCCL 2.10 (version code 21000); tessera's half
  // collectives need both.
  bool has_avg() const { return version >= 21000; }
  bool has_half() const { return version >= 21000; }
  // "2.28.9"
  std::string version_string() const;
};

// What opening NCCL gave: the library, or why there is no usable one.
struct NcclLoad {
  NcclLibrary library;
  std::string error;  // "" when the library is usable
};

// Tries each name with dlopen in turn, resolves the entry points from the first that opens
// and checks its version. Never throws; nccl_library() calls it once with nccl_candidates(),
// tests with names of their own.
NcclLoad open_nccl(const std::vector<std::string>& names);

// The names to try: `tessera_nccl_library` (TESSERA_NCCL_LIBRARY's value, may be null) alone
// when it is set, else libnccl.so.2 and libnccl.so from the loader's search path.
std::vector<std::string> nccl_candidates(const char* tessera_nccl_library);

// The library, loaded on the first call (thread-safe; the outcome is cached for the
// process). Throws DeviceError, naming what was tried and how to install NCCL, when no
// libnccl can be opened, a symbol is missing or the version is older than 2.0.
const NcclLibrary& nccl_library();

// NCCL's type for a tessera dtype; bool moves as bytes (callers refuse to reduce bools).
// Throws DtypeError, naming `op`, for the half types when `lib` is older than NCCL 2.10.
ncclDataType_t nccl_data_type(Dtype dtype, const NcclLibrary& lib, const char* op);

// Makes the device that was current at construction current again. NCCL switches devices
// inside its calls, and CudaBackend::activate assumes the device it set last is current.
class DeviceRestore {
 public:
  DeviceRestore() { TESSERA_CUDA_CHECK(cudaGetDevice(&device_)); }
  ~DeviceRestore() {
    // A destructor must not throw; making a device current that just was cannot fail.
    if (cudaSetDevice(device_) != cudaSuccess) (void)cudaGetLastError();
  }
  DeviceRestore(const DeviceRestore&) = delete;
  DeviceRestore& operator=(const DeviceRestore&) = delete;

 private:
  int device_ = 0;
};

[[noreturn]] void throw_nccl_error(ncclResult_t status, const char* call, const char* file,
                                   int line);

}  // namespace tessera::detail::cuda

// Every NCCL call goes through this, like CUDA calls through TESSERA_CUDA_CHECK.
#define TESSERA_NCCL_CHECK(call)                                                             \
  do {                                                                                       \
    const ncclResult_t tessera_status_ = (call);                                             \
    if (tessera_status_ != ncclSuccess) [[unlikely]] {                                       \
      ::tessera::detail::cuda::throw_nccl_error(tessera_status_, #call, __FILE__, __LINE__); \
    }                                                                                        \
  } while (false)
