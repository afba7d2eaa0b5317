#pragma once
// Opening a shared library at run time, as the CUDA backend does for NCCL (nccl_library.h)
// and cuDNN (cudnn_library.h): the first of several names that opens, and its entry points.
#include <string>
#include <vector>

namespace tessera::detail::cuda {

struct OpenedLibrary {
  void* handle = nullptr;          // nullptr when no name opened
  std::string path;                // the name that opened
  std::vector<std::string> tried;  // "name (dlerror's words)" for each that did not
};

// dlopen(RTLD_NOW | RTLD_LOCAL: the library's symbols stay out of the global namespace, where
// PyTorch may have brought its own copy) of each name in turn, up to the first that opens.
// The handle is never closed: what is made from the library lives until the process ends.
OpenedLibrary open_first_library(const std::vector<std::string>& names);

// Opens each of `files` that exists in `directory` (which ends in '/'), as open_first_library
// opens, so that a library loading them later by name finds these: "" when every one that
// exists opened, else the first failure's "file (dlerror's words)".
std::string open_beside(const std::string& directory, const std::vector<std::string>& files);

// dlsym(handle, name), or nullptr; POSIX guarantees the result converts to a function pointer.
void* find_symbol(void* handle, const char* name);

// Sets fn to the entry point `name`, adding the name to `missing` where there is none.
template <typename Fn>
void resolve(void* handle, const char* name, Fn& fn, std::vector<std::string>& missing) {
  fn = reinterpret_cast<Fn>(find_symbol(handle, name));
  if (fn == nullptr) missing.emplace_back(name);
}

}  // namespace tessera::detail::cuda
