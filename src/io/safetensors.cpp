// The safetensors format: writing atomically, and reading with every check done on the
// header before any data is read. Format: https://github.com/huggingface/safetensors
#include "tessera/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <source_location>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/copy.h"
#include "core/device_registry.h"
#include "core/half.h"
#include "core/tensor_impl.h"
#include "io/files.h"
#include "io/printable.h"
#include "io/safetensors_header.h"
#include "io/safetensors_reader.h"
#include "io/safetensors_writer.h"

namespace tessera {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; tessera writes host memory as it is");

using Json = nlohmann::json;

const char* safetensors_name(Dtype dtype) {
  for (const auto& d : io::kSafetensorsDtypes) {
    if (d.dtype == dtype) return d.name;
  }
  return "?";
}

std::string system_reason() { return std::strerror(errno); }

[[noreturn]] void fail(const char* op, const std::filesystem::path& path, const std::string& what) {
  throw IOError(fmt::format("[{}] '{}': {}", op, io::printable(path.string()), what));
}

// ---- writing ----

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
std::filesystem::path follow_links(const std::filesystem::path& path) {
  std::filesystem::path p = path;
  for (int hops = 0; hops < 40; ++hops) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    std::error_code ec;
    const std::filesystem::path next = std::filesystem::read_symlink(p, ec);
    if (ec)
      fail("save_safetensors", path,
           "cannot read the symbolic link '" + p.string() + "': " + ec.message());
    p = next.is_absolute() ? next : p.parent_path() / next;
  }
  fail("save_safetensors", path, "too many levels of symbolic links; point it at a file");
}

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

// A file descriptor closed on every path, and a named temporary file removed unless
// committed (Note [Saving atomically]).
class TempFile {
 public:
  // `target` has its links followed already.
  explicit TempFile(const std::filesystem::path& target) : target_(target) {
    const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";
    struct stat st {};
    const bool replaces = ::stat(target.c_str(), &st) == 0;
    if (replaces && !S_ISREG(st.st_mode)) {
      fail("save_safetensors", target,
           "it is " + io::file_kind(st.st_mode) +
               ", not a regular file; "
               "choose the path of a file to write");
    }
    // The rename would replace a file its mode protects from this user, as a plain write
    // (torch.save's) would not.
    if (replaces && ::access(target.c_str(), W_OK) != 0) {
      fail("save_safetensors", target,
           "cannot write it: " + system_reason() +
               "; change its mode (chmod u+w) or save elsewhere");
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
      if (fd_ < 0)
        fail("save_safetensors", target,
             "cannot create a temporary file beside it: " + system_reason());
      named_ = true;
    }
    const mode_t mode = replaces ? (st.st_mode & 07777) : (0666 & ~current_umask());
    if ((replaces || named_) && ::fchmod(fd_, mode) != 0) {
      const std::string reason = system_reason();
      // A throwing constructor runs no destructor: close and remove what it made here.
      ::close(fd_);
      fd_ = -1;
      if (named_) ::unlink(name_.data());
      fail("save_safetensors", target, "cannot set the file's mode: " + reason);
    }
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (named_ && !committed_) ::unlink(name_.data());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void write(const void* data, std::size_t bytes) {
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
      const ssize_t n = ::write(fd_, p, bytes);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("save_safetensors", target_, "write failed: " + system_reason());
      p += n;
      bytes -= static_cast<std::size_t>(n);
    }
  }
  // fsync, name it, close, rename over the target, fsync the directory: the new file is
  // durable and replaces the old one in one step.
  void commit() {
    if (::fsync(fd_) != 0) fail("save_safetensors", target_, "fsync failed: " + system_reason());
    if (!named_) link_in();
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("save_safetensors", target_, "close failed: " + system_reason());
    if (std::rename(name_.data(), target_.c_str()) != 0) {
      fail("save_safetensors", target_,
           "cannot rename the temporary file over it: " + system_reason());
    }
    committed_ = true;
    const std::filesystem::path dir = target_.has_parent_path() ? target_.parent_path() : ".";
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);  // best effort: some file systems refuse fsync on directories
      ::close(dfd);
    }
  }

 private:
  // Gives the unnamed file a fresh temporary name beside the target.
  void link_in() {
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
    fail("save_safetensors", target_,
         "cannot link the written file in beside it: " + system_reason());
  }

  std::filesystem::path target_;
  std::vector<char> name_;  // the temporary name, NUL-terminated, once it has one
  int fd_ = -1;
  bool named_ = false, committed_ = false;
};

// Where `s` stops being UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing past
// U+10FFFF), or npos when all of it is.
std::size_t invalid_utf8_at(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    std::size_t len = 0;
    unsigned char lo = 0x80, hi = 0xbf;  // the range of the second byte
    if (b < 0x80)
      len = 1;
    else if (b >= 0xc2 && b <= 0xdf)
      len = 2;
    else if (b >= 0xe0 && b <= 0xef)
      len = 3, lo = b == 0xe0 ? 0xa0 : 0x80, hi = b == 0xed ? 0x9f : 0xbf;
    else if (b >= 0xf0 && b <= 0xf4)
      len = 4, lo = b == 0xf0 ? 0x90 : 0x80, hi = b == 0xf4 ? 0x8f : 0xbf;
    else
      return i;
    if (i + len > s.size()) return i;
    for (std::size_t k = 1; k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xbf)) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

// `s` for a message: printable ASCII as it is, every other byte as \xNN.
std::string escaped(std::string_view s) {
  std::string out;
  for (const char ch : s) {
    const auto b = static_cast<unsigned char>(ch);
    if (b >= 0x20 && b < 0x7f && b != '\\')
      out += ch;
    else
      out += fmt::format("\\x{:02x}", b);
  }
  return out;
}

// JSON text is UTF-8: a name or metadata string that is not is refused, naming it.
void check_utf8(std::string_view s, const std::string& what, const std::filesystem::path& path) {
  const std::size_t at = invalid_utf8_at(s);
  TESSERA_CHECK(at == std::string_view::npos, Error,
                "[save_safetensors] '{}': {} '{}' is not valid UTF-8 (byte {} is 0x{:02x}); a "
                "safetensors header is JSON text, so names and metadata must be UTF-8: convert "
                "or rename it",
                path.string(), what, escaped(s), at, static_cast<unsigned char>(s[at]));
}

// The first NaN or infinity in `n` floats, or -1.
template <typename T>
std::int64_t first_non_finite(const char* bytes, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, bytes + i * sizeof(T), sizeof(T));
    if (!std::isfinite(static_cast<double>(v))) return static_cast<std::int64_t>(i);
  }
  return -1;
}

// ---- reading ----

// The header is read and checked in io/safetensors_header.cpp (Note [Parsing the header]).
using Entry = io::SafetensorsEntry;
using Header = io::SafetensorsLayout;

Header read_header(std::ifstream& in, const std::filesystem::path& path) {
  return io::read_safetensors_layout(in, path);
}

}  // namespace

namespace {

// `refusal`: null to save non-finite values, else whose refusal it is.
void save(const std::filesystem::path& path, const std::map<std::string, Tensor>& tensors,
          const std::map<std::string, std::string>& metadata, const io::NonFiniteRefusal* refusal) {
  TESSERA_CHECK(!path.empty(), Error,
                "[save_safetensors] the path is empty; give the name of the file to write");
  for (const auto& [key, value] : metadata) {
    check_utf8(key, "metadata key", path);
    check_utf8(value, "the value of metadata key '" + escaped(key) + "'", path);
  }
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  // The data of wider dtypes first, then by name, as PyPI's safetensors lays it out: the
  // data starts 8-byte aligned, so every tensor starts aligned to its element (a float64
  // after 3 bytes of uint8 did not, which readers that map the file without a copy refuse).
  std::vector<std::pair<std::string, Tensor>> layout;
  for (const auto& [name, t] : tensors) {
    TESSERA_CHECK(t.defined(), Error,
                  "[save_safetensors] '{}': tensor '{}' is undefined (a Tensor that was never "
                  "given a value); give it one or leave it out",
                  io::printable(path.string()), io::printable(name));
    layout.emplace_back(name, t);
  }
  std::stable_sort(layout.begin(), layout.end(), [](const auto& a, const auto& b) {
    return itemsize(a.second.dtype()) > itemsize(b.second.dtype());
  });
  std::uint64_t offset = 0;
  for (const auto& [name, t] : layout) {
    TESSERA_CHECK(!name.empty() && name != "__metadata__", Error,
                  "[save_safetensors] '{}': '{}' cannot name a tensor (the format keeps "
                  "'__metadata__' and needs a name); rename it",
                  io::printable(path.string()), name);
    check_utf8(name, "tensor name", path);
    TESSERA_CHECK(!io::has_control_character(name), Error,
                  "[save_safetensors] '{}': tensor name '{}' holds a control character, which "
                  "load_safetensors refuses (it would reach terminals raw); rename the tensor",
                  io::printable(path.string()), io::printable(name));
    detail::check_defined(t, "save_safetensors", name.c_str());
    std::vector<std::int64_t> shape(t.shape().begin(), t.shape().end());
    header[name] = {{"dtype", safetensors_name(t.dtype())},
                    {"shape", shape},
                    {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  // A header no reader takes would replace a good file with one nothing loads.
  TESSERA_CHECK(text.size() <= io::kMaxSafetensorsHeader, Error,
                "[save_safetensors] '{}': the header (names, shapes and metadata) would be {} "
                "bytes, over the {} that load_safetensors (and PyPI's safetensors) accept; "
                "nothing was written. Shorten the metadata or save the tensors in several files",
                io::printable(path.string()), text.size(), io::kMaxSafetensorsHeader);
  unsigned char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(text.size() >> (8 * i));

  TempFile file(follow_links(path));
  file.write(len_bytes, 8);
  file.write(text.data(), text.size());
  std::vector<char> host;
  for (const auto& [name, t] : layout) {
    host.resize(t.nbytes());
    detail::read_to_host(t, host.data(), t.dtype(), "save_safetensors",
                         std::source_location::current());
    if (refusal != nullptr && is_floating(t.dtype())) {
      const auto n = static_cast<std::size_t>(t.numel());
      const std::int64_t bad = t.dtype() == kFloat32   ? first_non_finite<float>(host.data(), n)
                               : t.dtype() == kFloat64 ? first_non_finite<double>(host.data(), n)
                               : t.dtype() == kBFloat16
                                   ? first_non_finite<detail::BFloat16>(host.data(), n)
                                   : first_non_finite<detail::Float16>(host.data(), n);
      TESSERA_CHECK(bad < 0, NonFiniteError,
                    "[{}] '{}': tensor '{}' holds a non-finite value (NaN or infinity) at "
                    "element {} of {}; nothing was written and the file is as it was. A "
                    "diverged training run? Lower the learning rate or clip the gradients{}{}",
                    refusal->op, io::printable(path.string()), escaped(name), bad, n,
                    refusal->keep_fix != nullptr ? ", or " : "",
                    refusal->keep_fix != nullptr ? refusal->keep_fix : "");
    }
    file.write(host.data(), host.size());
  }
  file.commit();
}

}  // namespace

void save_safetensors(const std::filesystem::path& path,
                      const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata,
                      const SafetensorsSaveOptions& options) {
  const io::NonFiniteRefusal refusal{
      "save_safetensors",
      "set SafetensorsSaveOptions::allow_non_finite to true (its default) to save them"};
  save(path, tensors, metadata, options.allow_non_finite ? nullptr : &refusal);
}

void io::save_safetensors_refusing_non_finite(const std::filesystem::path& path,
                                              const std::map<std::string, Tensor>& tensors,
                                              const std::map<std::string, std::string>& metadata,
                                              const NonFiniteRefusal& refusal) {
  save(path, tensors, metadata, &refusal);
}

SafetensorsFile load_safetensors(const std::filesystem::path& path, Device device) {
  detail::check_device(device, "load_safetensors");
  const io::SafetensorsReader file(path);
  // Every tensor is allocated from the header before any data is read, then read straight
  // into (Note [Reading checkpoints] in safetensors_reader.cpp).
  std::vector<Tensor> tensors;
  for (const io::SafetensorsReader::Item& item : file.items()) {
    tensors.push_back(detail::make_tensor(item.shape, item.dtype, device, "load_safetensors"));
  }
  file.read_into(tensors);
  SafetensorsFile out;
  out.metadata = file.metadata();
  for (std::size_t i = 0; i < tensors.size(); ++i)
    out.tensors.emplace(file.items()[i].name, tensors[i]);
  return out;
}

namespace io {

SafetensorsReader::SafetensorsReader(const std::filesystem::path& path) : path_(path) {
  io::require_regular_file(path, "load_safetensors");  // a FIFO would block the read for ever
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("load_safetensors", path, "cannot open it: " + system_reason());
  Header h = read_header(in, path);
  std::uint64_t size = h.data_start;
  for (Entry& e : h.entries) {
    size = std::max(size, h.data_start + e.end);
    items_.push_back(
        {std::move(e.name), e.dtype, std::move(e.shape), h.data_start + e.begin, e.end - e.begin});
  }
  metadata_ = std::move(h.metadata);
  // The data is read with pread on a descriptor of its own; it must be the file whose header
  // was just checked.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail("load_safetensors", path, "cannot open it: " + system_reason());
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || static_cast<std::uint64_t>(st.st_size) != size) {
    ::close(fd_);
    fd_ = -1;
    fail("load_safetensors", path, "the file changed while it was being opened; try again");
  }
}

}  // namespace io

}  // namespace tessera
