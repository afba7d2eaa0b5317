#pragma once
// File-system checks shared by the readers (safetensors, IDX, Fashion-MNIST): every failure
// is an IOError naming the op, the path and the system's reason, never a
// std::filesystem::filesystem_error.
#include <sys/types.h>

#include <filesystem>
#include <string>

namespace tessera::io {

// "a directory", "a FIFO (named pipe)", ... for a stat mode that is not a regular file.
std::string file_kind(mode_t mode);

// Throws IOError unless `path` names a regular file (after following links): a FIFO would
// block the reader for ever, a directory or a device is no data file. Call before opening.
void require_regular_file(const std::filesystem::path& path, const char* op);

// A descriptor of `path` opened for reading (O_CLOEXEC), checked to be a regular file both
// before the open (a FIFO would block it) and through the descriptor. IOError naming `op`,
// the path and the reason otherwise. The caller closes it.
int open_for_reading(const std::filesystem::path& path, const char* op);

// Whether `path` exists (following links); false when it does not. IOError for any other
// failure (permission denied, a loop of links, a name too long), naming the path and reason.
bool exists(const std::filesystem::path& path, const char* op);

}  // namespace tessera::io
