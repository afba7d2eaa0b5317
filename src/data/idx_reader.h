#pragma once
// An IDX file opened with its header read and checked, before any data is allocated or
// inflated (Note [Bounded IDX reads] in idx_reader.cpp).
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <vector>

#include "tessera/shape.h"
#include "tessera/tensor.h"

namespace tessera::data {

class IdxReader {
 public:
  // Opens `path` (gzipped or plain) and reads its header. IOError naming the file for a
  // missing or non-regular file, a bad header, or declared dims the file cannot hold.
  explicit IdxReader(const std::filesystem::path& path);
  IdxReader(const IdxReader&) = delete;
  IdxReader& operator=(const IdxReader&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // The dims the header declares.
  const Shape& shape() const { return shape_; }
  // Reads the data into a uint8 CPU tensor of shape(); IOError when the file ends early, has
  // more data than declared, is corrupt, or has bytes after its gzip stream.
  Tensor read();

 private:
  [[noreturn]] void fail(const std::string& what) const;
  // Up to `n` bytes of the (inflated) content into dst; fewer only at its end.
  std::size_t pull(unsigned char* dst, std::size_t n);
  void read_exactly(void* dst, std::size_t n, const std::string& what);
  // Makes at least `want` unread file bytes sit in the buffer when the file has them;
  // returns how many do.
  std::size_t buffered(std::size_t want);
  // After a gzip member's end: another member follows, or the file ends; else IOError.
  void after_member();

  // The descriptor and zlib's state, released by their own destructor so that a
  // constructor that throws (a bad header) leaks neither.
  struct Handles {
    int fd = -1;
    z_stream z{};
    bool z_ready = false;
    Handles() = default;
    Handles(const Handles&) = delete;
    Handles& operator=(const Handles&) = delete;
    ~Handles();
  };

  std::filesystem::path path_;
  Handles h_;
  std::uint64_t file_size_ = 0;
  bool gzip_ = false;
  bool content_ended_ = false;  // gzip: the last member ended and nothing follows
  std::vector<unsigned char> buffer_;
  std::size_t pos_ = 0, end_ = 0;  // unread file bytes: buffer_[pos_, end_)
  Shape shape_;
  std::uint64_t numel_ = 1;
};

}  // namespace tessera::data
