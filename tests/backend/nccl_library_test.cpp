// Opening NCCL at run time (backend/cuda/nccl_library.h): the names tried, the library the
// CUDA toolkit ships (which opens, reports its version and makes a unique id without a
// GPU), and the errors for a missing library, one that is not NCCL and one too old
// (fake_nccl.cpp). These are the steps every GPU collective and NCCL process group takes
// first, so they are checked on machines without a GPU too.
#if TESSERA_TEST_WITH_CUDA

#include "backend/cuda/nccl_library.h"
#include "tessera/error.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "support/device_test.h"
#include "support/run_time_library.h"

namespace tessera::detail::cuda {
namespace {

using testing::expect_says;

// The fake library is built beside the tests; a copy of the test binary elsewhere (the
// GPU bundle of scripts/gpu-bundle) runs without it.
#define SKIP_WITHOUT_THE_FAKE()                         \
  if (!std::filesystem::exists(TESSERA_TEST_FAKE_NCCL)) \
  GTEST_SKIP() << TESSERA_TEST_FAKE_NCCL << " is not here (tests copied from their build)"

TEST(NcclLibrary, TheVariableIsTheOnlyNameTriedWhenSet) {
  EXPECT_EQ(nccl_candidates("/opt/nccl/libnccl.so.2"),
            std::vector<std::string>{"/opt/nccl/libnccl.so.2"});
  const std::vector<std::string> search = {"libnccl.so.2", "libnccl.so"};
  EXPECT_EQ(nccl_candidates(nullptr), search);
  EXPECT_EQ(nccl_candidates(""), search);
}

TEST(NcclLibrary, VersionCodesReadAsNcclWritesThem) {
  NcclLibrary lib;
  lib.version = 22809;  // from 2.9 on: X*10000 + Y*100 + Z
  EXPECT_EQ(lib.version_string(), "2.28.9");
  EXPECT_TRUE(lib.has_avg());
  lib.version = 2805;  // before 2.9: X*1000 + Y*100 + Z
  EXPECT_EQ(lib.version_string(), "2.8.5");
  EXPECT_FALSE(lib.has_avg());
}

TEST(NcclLibrary, HalfTypesMapToNcclsAndNeedVersion2Point10) {
  NcclLibrary lib;
  lib.path = "/opt/nccl/libnccl.so.2";
  lib.version = 21003;
  EXPECT_EQ(nccl_data_type(kBFloat16, lib, "all_reduce"), ncclBfloat16);
  EXPECT_EQ(nccl_data_type(kFloat16, lib, "all_reduce"), ncclFloat16);
  EXPECT_EQ(nccl_data_type(kFloat32, lib, "all_reduce"), ncclFloat32);
  lib.version = 20907;  // 2.9.7
  EXPECT_EQ(nccl_data_type(kFloat64, lib, "all_reduce"), ncclFloat64);
  for (Dtype dtype : {kBFloat16, kFloat16}) {
    try {
      (void)nccl_data_type(dtype, lib, "ProcessGroup::all_reduce");
      ADD_FAILURE() << "no error for " << dtype_name(dtype);
    } catch (const DtypeError& e) {
      expect_says(e.what(), {"[ProcessGroup::all_reduce]", std::string(dtype_name(dtype)),
                             "need NCCL 2.10 or newer", "/opt/nccl/libnccl.so.2 is NCCL 2.9.7",
                             ".to(kFloat32) first"});
    }
  }
}

TEST(NcclLibrary, ARealLibraryOpensAndMakesAnIdWithoutAGpu) {
  const std::string path =
      testing::existing_library("TESSERA_NCCL_LIBRARY", TESSERA_TEST_TOOLKIT_NCCL);
  if (path.empty()) GTEST_SKIP() << "no libnccl.so.2 on this machine (set TESSERA_NCCL_LIBRARY)";
  const NcclLoad load = open_nccl({"/nonexistent/libnccl.so.2", path});
  ASSERT_EQ(load.error, "");
  const NcclLibrary& nccl = load.library;
  EXPECT_EQ(nccl.path, path);  // the first name that opens
  EXPECT_GE(nccl.version, 2000);
  EXPECT_TRUE(std::regex_match(nccl.version_string(), std::regex(R"(2\.\d+\.\d+)")))
      << nccl.version_string();
  int version = 0;
  ASSERT_EQ(nccl.get_version(&version), ncclSuccess);
  EXPECT_EQ(version, nccl.version);
  // What rank 0 of an NCCL process group does first (Note [NCCL across processes]).
  ncclUniqueId a{}, b{};
  ASSERT_EQ(nccl.get_unique_id(&a), ncclSuccess) << nccl.get_error_string(ncclSystemError);
  ASSERT_EQ(nccl.get_unique_id(&b), ncclSuccess);
  EXPECT_NE(std::string(a.internal, sizeof a.internal), std::string(b.internal, sizeof b.internal));
  EXPECT_NE(nccl.get_error_string(ncclInvalidArgument), nullptr);
}

TEST(NcclLibrary, AMissingLibraryNamesEveryNameTriedAndHowToGetOne) {
  const NcclLoad load = open_nccl({"/nonexistent/a/libnccl.so.2", "/nonexistent/b/libnccl.so"});
  expect_says(load.error, {"GPU collectives need NCCL, which could not be loaded",
                           "/nonexistent/a/libnccl.so.2 (", "/nonexistent/b/libnccl.so (",
                           "TESSERA_NCCL_LIBRARY", "pip install nvidia-nccl-cu13"});
}

TEST(NcclLibrary, ALibraryThatIsNotNcclIsRefusedNamingWhatItLacks) {
  const NcclLoad load = open_nccl({"libz.so.1"});  // linked into the tests, so it opens
  expect_says(load.error, {"libz.so.1 lacks ncclGetVersion, ncclCommInitAll",
                           "it is not NCCL 2 or is too old", "TESSERA_NCCL_LIBRARY"});
}

TEST(NcclLibrary, NcclOneIsRefusedWithItsVersionCode) {
  SKIP_WITHOUT_THE_FAKE();
  ::setenv("TESSERA_FAKE_NCCL_VERSION", "1000", 1);
  const NcclLoad load = open_nccl({TESSERA_TEST_FAKE_NCCL});
  ::unsetenv("TESSERA_FAKE_NCCL_VERSION");
  expect_says(load.error, {TESSERA_TEST_FAKE_NCCL, "reports version code 1000",
                           "tessera needs NCCL 2 or later"});
}

TEST(NcclLibrary, ALibraryWithoutTheOptionalEntryPointStillLoads) {
  SKIP_WITHOUT_THE_FAKE();
  // The fake has no ncclCommGetAsyncError (NCCL < 2.4); collectives then skip that check.
  ::setenv("TESSERA_FAKE_NCCL_VERSION", "2304", 1);
  const NcclLoad load = open_nccl({TESSERA_TEST_FAKE_NCCL});
  ::unsetenv("TESSERA_FAKE_NCCL_VERSION");
  ASSERT_EQ(load.error, "");
  EXPECT_EQ(load.library.version_string(), "2.3.4");
  EXPECT_EQ(load.library.comm_get_async_error, nullptr);
  EXPECT_FALSE(load.library.has_avg());
}

}  // namespace
}  // namespace tessera::detail::cuda

#endif  // TESSERA_TEST_WITH_CUDA
