#pragma once
// Reads byte ranges of a file straight into memory with pread(2): in chunks, on several
// threads when there is a lot to read. The safetensors reader uses it to read tensors'
// data into their own memory (Note [Reading checkpoints] in safetensors_reader.cpp).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <vector>

namespace tessera::io {

// `bytes` bytes at `offset` in the file into host memory at `dst`.
struct ReadSpan {
  std::uint64_t offset = 0;
  std::size_t bytes = 0;
  char* dst = nullptr;
};

// Reads one span (retrying short reads and EINTR). IOError naming `op`, `path`, the offset
// and the system's reason when a read fails, or when the file ends before the span does.
void read_span(int fd, const ReadSpan& span, const std::filesystem::path& path, const char* op);

// Reads every span, split into chunks shared by up to hardware_concurrency() threads (one
// thread for small totals). The first error is rethrown once every thread has stopped; the
// other spans may then be read in part.
void read_spans(int fd, const std::vector<ReadSpan>& spans, const std::filesystem::path& path,
                const char* op);

}  // namespace tessera::io
