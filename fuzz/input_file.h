#pragma once
// A fuzzer's input as a file: the parsers read paths, so each input is written into one
// memory-backed file (memfd_create) and read back through /proc/self/fd/N. No disk traffic,
// nothing to clean up, and the file is a regular file as the readers require.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

namespace tessera::fuzz {

class InputFile {
 public:
  InputFile() : fd_(::memfd_create("tessera-fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0) die("memfd_create");
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~InputFile() { ::close(fd_); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  // Makes `parts`, one after the other, the whole file; returns its path.
  template <typename... Parts>
  const std::filesystem::path& write(const Parts&... parts) {
    if (::ftruncate(fd_, 0) != 0) die("ftruncate");
    off_t at = 0;
    (append(std::string_view(parts), at), ...);
    return path_;
  }

 private:
  void append(std::string_view bytes, off_t& at) {
    while (!bytes.empty()) {
      const ssize_t n = ::pwrite(fd_, bytes.data(), bytes.size(), at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) die("pwrite");
      bytes.remove_prefix(static_cast<std::size_t>(n));
      at += n;
    }
  }
  // A harness failure, not a finding: say so and stop.
  [[noreturn]] static void die(const char* call) {
    std::perror(call);
    std::abort();
  }

  int fd_;
  std::filesystem::path path_;
};

}  // namespace tessera::fuzz
