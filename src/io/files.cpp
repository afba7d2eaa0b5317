#include "io/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "tessera/error.h"

namespace tessera::io {

std::string file_kind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

void require_regular_file(const std::filesystem::path& path, const char* op) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw IOError(
        fmt::format("[{}] '{}': cannot open it: {}", op, path.string(), std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    throw IOError(fmt::format("[{}] '{}' is {}, not a regular file; give the path of a data file",
                              op, path.string(), file_kind(st.st_mode)));
  }
}

int open_for_reading(const std::filesystem::path& path, const char* op) {
  require_regular_file(path, op);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw IOError(
        fmt::format("[{}] '{}': cannot open it: {}", op, path.string(), std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string kind = st.st_mode != 0 ? file_kind(st.st_mode) : std::strerror(errno);
    ::close(fd);
    throw IOError(fmt::format("[{}] '{}' is {}, not a regular file; give the path of a data file",
                              op, path.string(), kind));
  }
  return fd;
}

bool exists(const std::filesystem::path& path, const char* op) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return true;
  if (errno == ENOENT) return false;
  throw IOError(
      fmt::format("[{}] '{}': cannot look it up: {}", op, path.string(), std::strerror(errno)));
}

}  // namespace tessera::io
