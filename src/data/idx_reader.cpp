#include "data/idx_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "core/check.h"
#include "core/tensor_impl.h"
#include "io/files.h"
#include "io/printable.h"

// Note [Bounded IDX reads]
// A small file must not cost much memory or time: a 1.5 MB gzip bomb once took 1.8 GB before
// a check that could have refused it from the headers. So the header is read first and the
// declared size checked against what the file can hold before anything is allocated: a
// plain file must hold exactly that many bytes after its header, and a gzip file cannot
// inflate past 1032 times its size (deflate's largest ratio). Callers that read several
// files (load_fashion_mnist) check the headers against each other before reading any data.
// Inflating stops one byte past the declared size (that byte is an error), and the gzip
// stream is inflated with zlib directly rather than gzread, which ignores whatever follows
// the last gzip member: here the file must end there, or hold another whole member.

namespace tessera::data {
namespace {

constexpr std::uint64_t kMaxDeflateRatio = 1032;
constexpr std::size_t kBufferBytes = std::size_t{64} << 10;

}  // namespace

void IdxReader::fail(const std::string& what) const {
  throw IOError(fmt::format("[read_idx] '{}': {}", io::printable(path_.string()), what));
}

IdxReader::IdxReader(const std::filesystem::path& path) : path_(path), buffer_(kBufferBytes) {
  io::require_regular_file(path, "read_idx");  // a FIFO would block the read for ever
  h_.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (h_.fd < 0) fail(std::string("cannot open it: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(h_.fd, &st) != 0) fail(std::string("cannot read its size: ") + std::strerror(errno));
  file_size_ = static_cast<std::uint64_t>(st.st_size);
  gzip_ = buffered(2) >= 2 && buffer_[pos_] == 0x1f && buffer_[pos_ + 1] == 0x8b;
  if (gzip_) {
    if (inflateInit2(&h_.z, 16 + MAX_WBITS) != Z_OK) fail("cannot start zlib's inflate");
    h_.z_ready = true;
  }
  unsigned char magic[4];
  read_exactly(magic, 4, "magic number");
  if (magic[0] != 0 || magic[1] != 0) {
    fail(
        fmt::format("bad magic number {:02x}{:02x}{:02x}{:02x}: an IDX file starts with two "
                    "zero bytes",
                    magic[0], magic[1], magic[2], magic[3]));
  }
  if (magic[2] != 0x08) {
    fail(fmt::format("element type 0x{:02x} is not supported (only unsigned bytes, 0x08)",
                     magic[2]));
  }
  const int dims = magic[3];
  if (dims < 1 || dims > kMaxDims) fail(fmt::format("{} dims (expected 1 to {})", dims, kMaxDims));
  for (int d = 0; d < dims; ++d) {
    unsigned char b[4];
    read_exactly(b, 4, "dimensions");
    const std::uint32_t extent = (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) |
                                 (std::uint32_t{b[2]} << 8) | b[3];
    shape_.push_back(extent);
    // Checked before it can wrap: [2^20, 2^20, 2^24] multiplied to 0 and passed.
    std::uint64_t product = 0;
    if (__builtin_mul_overflow(numel_, std::uint64_t{extent}, &product) ||
        product > (std::uint64_t{1} << 40)) {
      fail("its dimensions describe more than 2^40 bytes");
    }
    numel_ = product;
  }
  const std::uint64_t header = 4 + 4 * static_cast<std::uint64_t>(dims);
  if (!gzip_ && file_size_ - header < numel_) {
    fail(
        fmt::format("its header declares shape {} ({} bytes of data) but the file holds {} "
                    "after the header (truncated)",
                    shape_.str(), numel_, file_size_ - header));
  }
  if (!gzip_ && file_size_ - header > numel_) {
    fail(
        fmt::format("has bytes after the {} its header declares (shape {})", numel_, shape_.str()));
  }
  if (gzip_ && numel_ + header > kMaxDeflateRatio * file_size_) {
    fail(
        fmt::format("its header declares shape {} ({} bytes of data), more than its {} gzip "
                    "bytes can inflate to (deflate expands at most {}:1); the file is corrupt",
                    shape_.str(), numel_, file_size_, kMaxDeflateRatio));
  }
}

IdxReader::Handles::~Handles() {
  if (z_ready) inflateEnd(&z);
  if (fd >= 0) ::close(fd);
}

Tensor IdxReader::read() {
  Tensor out = detail::make_tensor(shape_, kUInt8, cpu(), "read_idx");
  read_exactly(detail::impl_of(out).data(), numel_,
               fmt::format("data ({} bytes for shape {})", numel_, shape_.str()));
  unsigned char extra;
  if (pull(&extra, 1) != 0) {
    fail(
        fmt::format("has bytes after the {} its header declares (shape {})", numel_, shape_.str()));
  }
  return out;
}

std::size_t IdxReader::buffered(std::size_t want) {
  if (end_ - pos_ >= want) return end_ - pos_;
  std::memmove(buffer_.data(), buffer_.data() + pos_, end_ - pos_);
  end_ -= pos_;
  pos_ = 0;
  while (end_ < want) {
    const ssize_t n = ::read(h_.fd, buffer_.data() + end_, buffer_.size() - end_);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(std::string("cannot read it: ") + std::strerror(errno));
    if (n == 0) break;
    end_ += static_cast<std::size_t>(n);
  }
  return end_ - pos_;
}

std::size_t IdxReader::pull(unsigned char* dst, std::size_t n) {
  std::size_t got = 0;
  if (!gzip_) {
    while (got < n && buffered(1) > 0) {
      const std::size_t k = std::min(n - got, end_ - pos_);
      std::memcpy(dst + got, buffer_.data() + pos_, k);
      pos_ += k;
      got += k;
    }
    return got;
  }
  while (got < n && !content_ended_) {
    if (buffered(1) == 0) fail("the file ends inside its gzip stream (truncated)");
    h_.z.next_in = buffer_.data() + pos_;
    h_.z.avail_in = static_cast<uInt>(end_ - pos_);
    h_.z.next_out = dst + got;
    h_.z.avail_out = static_cast<uInt>(std::min<std::size_t>(n - got, UINT_MAX));
    const int rc = inflate(&h_.z, Z_NO_FLUSH);
    pos_ = end_ - h_.z.avail_in;
    got = static_cast<std::size_t>(h_.z.next_out - dst);
    if (rc == Z_STREAM_END) {
      after_member();
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      fail(fmt::format("corrupt gzip data: {}", h_.z.msg != nullptr ? h_.z.msg : zError(rc)));
    }
  }
  return got;
}

void IdxReader::after_member() {
  const std::size_t left = buffered(2);
  if (left == 0) {
    content_ended_ = true;
    return;
  }
  if (left >= 2 && buffer_[pos_] == 0x1f && buffer_[pos_ + 1] == 0x8b) {
    inflateReset(&h_.z);  // another gzip member: the format allows several
    return;
  }
  fail(
      "has bytes after the end of its gzip stream that are not another gzip member; the file "
      "is corrupt (or was appended to)");
}

void IdxReader::read_exactly(void* dst, std::size_t n, const std::string& what) {
  if (pull(static_cast<unsigned char*>(dst), n) < n) {
    fail(fmt::format("the file ends inside the {} (truncated)", what));
  }
}

}  // namespace tessera::data
