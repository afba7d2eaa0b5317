// See shared_library.h.
#include "backend/cuda/shared_library.h"

#include <dlfcn.h>

#include <filesystem>

#include <fmt/format.h>

namespace tessera::detail::cuda {

OpenedLibrary open_first_library(const std::vector<std::string>& names) {
  OpenedLibrary out;
  for (const std::string& name : names) {
    out.handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (out.handle != nullptr) {
      out.path = name;
      return out;
    }
    const char* e = dlerror();
    out.tried.push_back(fmt::format("{} ({})", name, e != nullptr ? e : "unknown dlopen error"));
  }
  return out;
}

std::string open_beside(const std::string& directory, const std::vector<std::string>& files) {
  for (const std::string& file : files) {
    const std::string path = directory + file;
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) continue;              // never throws
    if (dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL) == nullptr) {  // kept open, as above
      const char* e = dlerror();
      return fmt::format("{} ({})", path, e != nullptr ? e : "unknown dlopen error");
    }
  }
  return "";
}

void* find_symbol(void* handle, const char* name) { return dlsym(handle, name); }

}  // namespace tessera::detail::cuda
