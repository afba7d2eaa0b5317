// See shared_library.h.
#include "backend/cuda/shared_library.h"

#include <dlfcn.h>

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

void* find_symbol(void* handle, const char* name) { return dlsym(handle, name); }

}  // namespace tessera::detail::cuda
