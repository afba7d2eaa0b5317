#include "io/parallel_read.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "tessera/error.h"

namespace tessera::io {
namespace {

// A chunk is big enough that a pread's fixed cost vanishes and small enough that threads
// share a file of a few large tensors evenly.
constexpr std::size_t kChunk = std::size_t{4} << 20;
// Below this a second thread costs more to start than it saves.
constexpr std::size_t kParallelFrom = std::size_t{16} << 20;
constexpr unsigned kMaxThreads = 8;

}  // namespace

void read_span(int fd, const ReadSpan& span, const std::filesystem::path& path, const char* op) {
  std::uint64_t offset = span.offset;
  std::size_t left = span.bytes;
  char* dst = span.dst;
  while (left > 0) {
    const ssize_t n = ::pread(fd, dst, left, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw IOError(fmt::format("[{}] '{}': cannot read {} bytes at byte {}: {}", op, path.string(),
                                left, offset, std::strerror(errno)));
    }
    if (n == 0) {
      throw IOError(
          fmt::format("[{}] '{}': the file ends at byte {}, {} bytes short of the data "
                      "its header declares (was it truncated while being read?)",
                      op, path.string(), offset, left));
    }
    dst += n;
    offset += static_cast<std::uint64_t>(n);
    left -= static_cast<std::size_t>(n);
  }
}

void read_spans(int fd, const std::vector<ReadSpan>& spans, const std::filesystem::path& path,
                const char* op) {
  std::vector<ReadSpan> chunks;
  std::size_t total = 0;
  for (const ReadSpan& s : spans) {
    total += s.bytes;
    for (std::size_t at = 0; at < s.bytes; at += kChunk) {
      chunks.push_back({s.offset + at, std::min(kChunk, s.bytes - at), s.dst + at});
    }
  }
  const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
  const auto threads = total < kParallelFrom
                           ? std::size_t{1}
                           : std::min<std::size_t>({hardware, kMaxThreads, chunks.size()});
  if (threads <= 1) {
    for (const ReadSpan& c : chunks) read_span(fd, c, path, op);
    return;
  }
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr first_error;
  std::mutex error_mutex;
  const auto work = [&] {
    for (std::size_t i = next++; i < chunks.size() && !failed; i = next++) {
      try {
        read_span(fd, chunks[i], path, op);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
        failed = true;
      }
    }
  };
  std::vector<std::thread> helpers;
  helpers.reserve(threads - 1);
  try {
    for (std::size_t t = 1; t < threads; ++t) helpers.emplace_back(work);
  } catch (...) {
    failed = true;  // no thread to be had: stop the ones started, then report
    for (std::thread& h : helpers) h.join();
    throw;
  }
  work();
  for (std::thread& h : helpers) h.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace tessera::io
