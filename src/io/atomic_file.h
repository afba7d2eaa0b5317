#pragma once
// Files replaced in one step: a reader, a crash or a full disk sees the old file or the new
// one, never a part (Note [Saving atomically] in atomic_file.cpp). Used by save_safetensors,
// the Trainer's metrics file and the charts.
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/error.h"

namespace tessera::io {

// The file that `path` names after following symbolic links (the link itself is kept);
// `path` itself when it is no link or does not exist. IOError "[op] ..." for a loop of links.
std::filesystem::path follow_links(const std::filesystem::path& path, const char* op);

// A new file beside `target` that replaces it at commit(), or vanishes: the descriptor is
// closed on every path, and a named temporary file removed unless committed. Every failure
// is an IOError "[op] 'target': <reason>" naming the system's reason.
class TempFile {
 public:
  // `target` has its links followed already.
  TempFile(const std::filesystem::path& target, const char* op);
  ~TempFile();
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void write(const void* data, std::size_t bytes);
  // fsync, name it, close, rename over the target, fsync the directory: the new file is
  // durable and replaces the old one in one step.
  void commit();

 private:
  // Gives the unnamed file a fresh temporary name beside the target.
  void link_in();

  std::filesystem::path target_;
  const char* op_;
  std::vector<char> name_;  // the temporary name, NUL-terminated, once it has one
  int fd_ = -1;
  bool named_ = false, committed_ = false;
};

// The reason in an IOError these functions threw for `path` under `op` ("[op] 'path':
// reason" gives "reason"), for a caller's message of its own; the whole text otherwise.
std::string reason_of(const IOError& e, const char* op, const std::filesystem::path& path);

// Replaces (or creates) `path` with `bytes` in one step, following links.
void write_file_atomically(const std::filesystem::path& path, std::string_view bytes,
                           const char* op);

}  // namespace tessera::io
