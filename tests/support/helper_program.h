#pragma once
// The path of a helper program a test runs (built beside tessera_tests): the copy next to the
// running test binary when there is one, so a build moved elsewhere (scripts/gpu-bundle
// packs tessera_tests and its helpers into one bin/) finds its own helpers, else the path
// CMake compiled in.
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace tessera::testing {

inline std::string helper_program(const char* built_path) {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    const std::filesystem::path beside =
        self.parent_path() / std::filesystem::path(built_path).filename();
    if (::access(beside.c_str(), X_OK) == 0) return beside.string();
  }
  return built_path;
}

}  // namespace tessera::testing
