// Writing a file atomically: Note [Saving atomically].
#include "io/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "io/files.h"
#include "io/printable.h"
#include "tessera/error.h"

namespace tessera::io {
namespace {

std::string system_reason() { return std::strerror(errno); }

[[noreturn]] void fail(const char* op, const std::filesystem::path& path, const std::string& what) {
  throw IOError(fmt::format("[{}] '{}': {}", op, printable(path.string()), what));
}

}  // namespace

// Note [Saving atomically]
// The data goes to a file with no name (O_TMPFILE) in the target's directory: a process
// killed while writing leaves nothing behind. Once written and fsynced, the file is linked
// in under a temporary name (linkat through /proc/self/fd, as linkat cannot replace a file)
// and renamed over the target (rename is atomic), then the directory is fsynced. Only a kill
// in the microseconds between linkat and rename can leave a "*.tmp-XXXXXX" file. Where
// O_TMPFILE is unsupported (some file systems, kernels before 3.11) or /proc is absent, the
// file is written under a temporary name from the start (mkstemp) and removed on any error.
// A new file gets the mode of any created file (0666 & ~umask); a file replaced keeps its
// mode. A symbolic link is followed: the file it points to is replaced, the link stays.

// The file that `path` names after following symbolic links (the link itself is kept);
// `path` itself when it is no link or does not exist.
std::filesystem::path follow_links(const std::filesystem::path& path, const char* op) {
  std::filesystem::path p = path;
  for (int hops = 0; hops < 40; ++hops) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    std::error_code ec;
    const std::filesystem::path next = std::filesystem::read_symlink(p, ec);
    if (ec) fail(op, path, "cannot read the symbolic link '" + p.string() + "': " + ec.message());
    p = next.is_absolute() ? next : p.parent_path() / next;
  }
  fail(op, path, "too many levels of symbolic links; point it at a file");
}

namespace {

// A temporary name beside `target`: its name, cut to leave room for `suffix` within a
// directory entry's 255 bytes (a legal name of 250 bytes could not be saved).
std::string temporary_name(const std::filesystem::path& target, const std::string& suffix) {
  constexpr std::size_t kNameMax = 255;
  std::string base = target.filename().string();
  if (base.size() + suffix.size() > kNameMax) base.resize(kNameMax - suffix.size());
  return (target.parent_path() / (base + suffix)).string();
}

mode_t current_umask() {
  // Linux (4.7 on) shows it in /proc: setting it to read it, the portable way, changed it for
  // the whole process for a moment, under files other threads were creating.
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Umask:", 0) == 0)
      return static_cast<mode_t>(std::stoul(line.substr(6), nullptr, 8));
  }
  const mode_t mask = ::umask(0);  // set back at once
  ::umask(mask);
  return mask;
}

}  // namespace

TempFile::TempFile(const std::filesystem::path& target, const char* op) : target_(target), op_(op) {
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";
  struct stat st {};
  const bool replaces = ::stat(target.c_str(), &st) == 0;
  if (replaces && !S_ISREG(st.st_mode)) {
    fail(op_, target,
         "it is " + io::file_kind(st.st_mode) +
             ", not a regular file; "
             "choose the path of a file to write");
  }
  // The rename would replace a file its mode protects from this user, as a plain write
  // (torch.save's) would not.
  if (replaces && ::access(target.c_str(), W_OK) != 0) {
    fail(op_, target,
         "cannot write it: " + system_reason() + "; change its mode (chmod u+w) or save elsewhere");
  }
#ifdef O_TMPFILE
  fd_ = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);  // 0666 & ~umask
  if (fd_ >= 0 && ::access("/proc/self/fd", X_OK) != 0) {             // no way to link it in
    ::close(fd_);
    fd_ = -1;
  }
#endif
  if (fd_ < 0) {
    std::string pattern = temporary_name(target, ".tmp-XXXXXX");
    name_.assign(pattern.begin(), pattern.end());
    name_.push_back('\0');
    fd_ = ::mkstemp(name_.data());  // mode 0600: set below
    if (fd_ < 0) fail(op_, target, "cannot create a temporary file beside it: " + system_reason());
    named_ = true;
  }
  const mode_t mode = replaces ? (st.st_mode & 07777) : (0666 & ~current_umask());
  if ((replaces || named_) && ::fchmod(fd_, mode) != 0) {
    const std::string reason = system_reason();
    // A throwing constructor runs no destructor: close and remove what it made here.
    ::close(fd_);
    fd_ = -1;
    if (named_) ::unlink(name_.data());
    fail(op_, target, "cannot set the file's mode: " + reason);
  }
}
TempFile::~TempFile() {
  if (fd_ >= 0) ::close(fd_);
  if (named_ && !committed_) ::unlink(name_.data());
}

void TempFile::write(const void* data, std::size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(op_, target_, "write failed: " + system_reason());
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}
void TempFile::commit() {
  if (::fsync(fd_) != 0) fail(op_, target_, "fsync failed: " + system_reason());
  if (!named_) link_in();
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail(op_, target_, "close failed: " + system_reason());
  if (std::rename(name_.data(), target_.c_str()) != 0) {
    fail(op_, target_, "cannot rename the temporary file over it: " + system_reason());
  }
  committed_ = true;
  const std::filesystem::path dir = target_.has_parent_path() ? target_.parent_path() : ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // best effort: some file systems refuse fsync on directories
    ::close(dfd);
  }
}

void TempFile::link_in() {
  const std::string proc = fmt::format("/proc/self/fd/{}", fd_);
  static std::atomic<unsigned> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    const unsigned salt =
        static_cast<unsigned>(::getpid()) * 2654435761u ^ counter.fetch_add(1) * 40503u ^
        static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count());
    const std::string name = temporary_name(target_, fmt::format(".tmp-{:06x}", salt & 0xffffff));
    if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW) == 0) {
      name_.assign(name.begin(), name.end());
      name_.push_back('\0');
      named_ = true;
      return;
    }
    if (errno != EEXIST) break;
  }
  fail(op_, target_, "cannot link the written file in beside it: " + system_reason());
}

std::string reason_of(const IOError& e, const char* op, const std::filesystem::path& path) {
  const std::string what = e.what();
  const std::string head = fmt::format("[{}] '{}': ", op, printable(path.string()));
  return what.rfind(head, 0) == 0 ? what.substr(head.size()) : what;
}

void write_file_atomically(const std::filesystem::path& path, std::string_view bytes,
                           const char* op) {
  TempFile file(follow_links(path, op), op);
  file.write(bytes.data(), bytes.size());
  file.commit();
}

}  // namespace tessera::io
