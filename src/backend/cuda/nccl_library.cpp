// Opens libnccl with dlopen and resolves its entry points, once per process (nccl_library.h,
// Note [NCCL at run time] in nccl_collectives.cpp).
#include "backend/cuda/nccl_library.h"

#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend/cuda/shared_library.h"
#include "core/code_names.h"
#include "tessera/error.h"

namespace tessera::detail::cuda {
namespace {

#ifdef TESSERA_HAVE_NCCL_H
// The pointer types we call through are nccl.h's own declarations, checked where we have it.
static_assert(std::is_same_v<NcclLibrary::GetVersionFn, decltype(&::ncclGetVersion)>);
static_assert(std::is_same_v<NcclLibrary::CommInitAllFn, decltype(&::ncclCommInitAll)>);
static_assert(std::is_same_v<NcclLibrary::CommDestroyFn, decltype(&::ncclCommDestroy)>);
static_assert(std::is_same_v<NcclLibrary::GetUniqueIdFn, decltype(&::ncclGetUniqueId)>);
static_assert(std::is_same_v<NcclLibrary::CommInitRankFn, decltype(&::ncclCommInitRank)>);
static_assert(std::is_same_v<NcclLibrary::GroupFn, decltype(&::ncclGroupStart)>);
static_assert(std::is_same_v<NcclLibrary::GroupFn, decltype(&::ncclGroupEnd)>);
static_assert(std::is_same_v<NcclLibrary::AllReduceFn, decltype(&::ncclAllReduce)>);
static_assert(std::is_same_v<NcclLibrary::BroadcastFn, decltype(&::ncclBroadcast)>);
static_assert(std::is_same_v<NcclLibrary::AllGatherFn, decltype(&::ncclAllGather)>);
static_assert(std::is_same_v<NcclLibrary::ReduceScatterFn, decltype(&::ncclReduceScatter)>);
static_assert(std::is_same_v<NcclLibrary::GetErrorStringFn, decltype(&::ncclGetErrorString)>);
static_assert(std::is_same_v<NcclLibrary::CommGetAsyncErrorFn, decltype(&::ncclCommGetAsyncError)>);
#endif

constexpr const char* kHowToGetNccl =
    "install NCCL 2 and put libnccl.so.2 on LD_LIBRARY_PATH, or point TESSERA_NCCL_LIBRARY at "
    "one (e.g. after `pip install nvidia-nccl-cu13`: "
    "TESSERA_NCCL_LIBRARY=$(find <site-packages>/nvidia -name libnccl.so.2))";

}  // namespace

std::vector<std::string> nccl_candidates(const char* env) {
  // When set, the only library tried: a mistyped path should fail loudly rather than
  // quietly load another NCCL from the system.
  if (env != nullptr && *env != '\0') return {env};
  return {"libnccl.so.2", "libnccl.so"};
}

NcclLoad open_nccl(const std::vector<std::string>& names) {
  NcclLoad out;
  NcclLibrary& lib = out.library;
  const OpenedLibrary opened = open_first_library(names);  // communicators live on
  void* const handle = opened.handle;
  if (handle == nullptr) {
    out.error = fmt::format(
        "[collective] GPU collectives need NCCL, which could not be loaded: "
        "tried {}. To fix, {}",
        fmt::join(opened.tried, "; "), kHowToGetNccl);
    return out;
  }
  lib.path = opened.path;
  std::vector<std::string> missing;
  resolve(handle, "ncclGetVersion", lib.get_version, missing);
  resolve(handle, "ncclCommInitAll", lib.comm_init_all, missing);
  resolve(handle, "ncclCommDestroy", lib.comm_destroy, missing);
  resolve(handle, "ncclGetUniqueId", lib.get_unique_id, missing);
  resolve(handle, "ncclCommInitRank", lib.comm_init_rank, missing);
  resolve(handle, "ncclGroupStart", lib.group_start, missing);
  resolve(handle, "ncclGroupEnd", lib.group_end, missing);
  resolve(handle, "ncclAllReduce", lib.all_reduce, missing);
  resolve(handle, "ncclBroadcast", lib.broadcast, missing);
  resolve(handle, "ncclAllGather", lib.all_gather, missing);
  resolve(handle, "ncclReduceScatter", lib.reduce_scatter, missing);
  resolve(handle, "ncclGetErrorString", lib.get_error_string, missing);
  std::vector<std::string> optional;  // NCCL >= 2.4; checked only when present
  resolve(handle, "ncclCommGetAsyncError", lib.comm_get_async_error, optional);
  if (!missing.empty()) {
    out.error = fmt::format("[collective] {} lacks {}: it is not NCCL 2 or is too old. To fix, {}",
                            lib.path, fmt::join(missing, ", "), kHowToGetNccl);
    return out;
  }
  // Not through TESSERA_NCCL_CHECK: its message would ask for this library while it loads.
  const ncclResult_t status = lib.get_version(&lib.version);
  if (status != ncclSuccess || lib.version < 2000) {
    out.error = fmt::format(
        "[collective] {} reports version code {} (ncclGetVersion status {}); "
        "tessera needs NCCL 2 or later. To fix, {}",
        lib.path, lib.version, static_cast<int>(status), kHowToGetNccl);
  }
  return out;
}

namespace {

const NcclLoad& loaded() {
  // A function-local static: initialized once, thread-safe (the language's call_once), and
  // only when the first collective asks, so no static initializer ever touches NCCL.
  static const NcclLoad* const result =
      new NcclLoad(open_nccl(nccl_candidates(std::getenv("TESSERA_NCCL_LIBRARY"))));
  return *result;
}

}  // namespace

std::string NcclLibrary::version_string() const {
  // Codes below 2.9 are X*1000 + Y*100 + Z, from 2.9 on X*10000 + Y*100 + Z (nccl.h).
  if (version >= 10000) {
    return fmt::format("{}.{}.{}", version / 10000, version / 100 % 100, version % 100);
  }
  return fmt::format("{}.{}.{}", version / 1000, version / 100 % 10, version % 100);
}

const NcclLibrary& nccl_library() {
  const NcclLoad& l = loaded();
  if (!l.error.empty()) throw DeviceError(l.error);
  return l.library;
}

void throw_nccl_error(ncclResult_t status, const char* call, const char* file, int line) {
  const NcclLibrary& lib = loaded().library;
  const char* found = lib.get_error_string != nullptr ? lib.get_error_string(status) : nullptr;
  const std::string text = found != nullptr ? found : "unknown error";
  // Recent NCCLs say in the text how to get details; older ones do not.
  const char* hint = text.find("NCCL_DEBUG") == std::string::npos
                         ? ". Run with NCCL_DEBUG=WARN for NCCL's own account of the failure"
                         : "";
  throw Error(fmt::format("[nccl] {} failed: {} (ncclResult_t {}) at {}:{}, with {} (NCCL {}){}",
                          call, text, static_cast<int>(status), file, line, lib.path,
                          lib.version_string(), hint));
}

ncclDataType_t nccl_data_type(Dtype dtype, const NcclLibrary& lib, const char* op) {
  switch (dtype) {
    case kFloat32:
      return ncclFloat32;
    case kFloat64:
      return ncclFloat64;
    case kInt32:
      return ncclInt32;
    case kInt64:
      return ncclInt64;
    case kUInt8:
    case kBool:
      return ncclUint8;
    case kFloat16:
    case kBFloat16:
      // One rule for both: a float16 mean would also need ncclAvg (2.10), as the division
      // after a sum has no half kernel here. Every NCCL built for CUDA 12 or 13 is newer.
      if (!lib.has_half()) {
        throw DtypeError(fmt::format(
            "[{}] {} tensors need NCCL 2.10 or newer, and {} is NCCL {}; install a newer "
            "NCCL (TESSERA_NCCL_LIBRARY names the one to load), or convert the tensors with "
            ".to(kFloat32) first and back with .to({}) after",
            op, dtype_name(dtype), lib.path, lib.version_string(), detail::dtype_code(dtype)));
      }
      return dtype == kFloat16 ? ncclFloat16 : ncclBfloat16;
  }
  throw Error(fmt::format("[nccl] internal error: unknown dtype {}", static_cast<int>(dtype)));
}

}  // namespace tessera::detail::cuda
