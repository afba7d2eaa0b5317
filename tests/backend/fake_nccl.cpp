// A stand-in for libnccl with every entry point tessera resolves, for the loader's tests
// (nccl_library_test.cpp): ncclGetVersion reports TESSERA_FAKE_NCCL_VERSION (a version
// code, e.g. 1000 for NCCL 1.0) and every other call fails. Only the C ABI matters here, so
// the arguments are not declared.
#include <cstdlib>

namespace {
constexpr int kNcclInternalError = 3;
}  // namespace

extern "C" {

int ncclGetVersion(int* version) {
  const char* v = std::getenv("TESSERA_FAKE_NCCL_VERSION");
  *version = v != nullptr ? std::atoi(v) : 1000;
  return 0;
}

int ncclCommInitAll() { return kNcclInternalError; }
int ncclCommDestroy() { return kNcclInternalError; }
int ncclGetUniqueId() { return kNcclInternalError; }
int ncclCommInitRank() { return kNcclInternalError; }
int ncclGroupStart() { return kNcclInternalError; }
int ncclGroupEnd() { return kNcclInternalError; }
int ncclAllReduce() { return kNcclInternalError; }
int ncclBroadcast() { return kNcclInternalError; }
int ncclAllGather() { return kNcclInternalError; }
int ncclReduceScatter() { return kNcclInternalError; }
const char* ncclGetErrorString(int) { return "fake NCCL"; }

}  // extern "C"
