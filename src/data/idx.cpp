// IDX reader through zlib's gz* functions, which read gzip and plain files alike.
#include "tessera/data/idx.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "core/check.h"
#include "core/tensor_impl.h"
#include "io/files.h"

namespace tessera::data {
namespace {

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& what) {
  throw IOError(fmt::format("[read_idx] '{}': {}", path.string(), what));
}

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};

// Reads exactly `bytes` or throws, naming what was being read.
void read_exactly(gzFile f, void* dst, std::size_t bytes, const std::filesystem::path& path,
                  const char* what) {
  char* p = static_cast<char*>(dst);
  while (bytes > 0) {
    const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(bytes, 1u << 30));
    const int n = gzread(f, p, chunk);
    if (n < 0) {
      int code = 0;
      const char* msg = gzerror(f, &code);
      fail(path, fmt::format("cannot read the {}: {} (corrupt or truncated gzip data)", what, msg));
    }
    if (n == 0) fail(path, fmt::format("the file ends inside the {} (truncated)", what));
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

}  // namespace

Tensor read_idx(const std::filesystem::path& path) {
  io::require_regular_file(path, "read_idx");  // a FIFO would block gzread for ever
  std::unique_ptr<gzFile_s, GzCloser> file(gzopen(path.c_str(), "rb"));
  if (!file) fail(path, std::string("cannot open it: ") + std::strerror(errno));
  gzFile f = file.get();
  unsigned char magic[4];
  read_exactly(f, magic, 4, path, "magic number");
  if (magic[0] != 0 || magic[1] != 0) {
    fail(path, fmt::format("bad magic number {:02x}{:02x}{:02x}{:02x}: an IDX file starts with "
                           "two zero bytes", magic[0], magic[1], magic[2], magic[3]));
  }
  if (magic[2] != 0x08) {
    fail(path, fmt::format("element type 0x{:02x} is not supported (only unsigned bytes, 0x08)",
                           magic[2]));
  }
  const int dims = magic[3];
  if (dims < 1 || dims > kMaxDims) fail(path, fmt::format("{} dims (expected 1 to {})", dims, kMaxDims));
  Shape shape;
  std::uint64_t numel = 1;
  for (int d = 0; d < dims; ++d) {
    unsigned char b[4];
    read_exactly(f, b, 4, path, "dimensions");
    const std::uint32_t extent = (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) |
                                 (std::uint32_t{b[2]} << 8) | b[3];
    shape.push_back(extent);
    numel *= extent;
    if (numel > (std::uint64_t{1} << 40)) fail(path, "its dimensions describe more than 2^40 bytes");
  }
  Tensor out = detail::make_tensor(shape, kUInt8, cpu(), "read_idx");
  read_exactly(f, detail::impl_of(out).data(), numel, path,
               fmt::format("data ({} bytes for shape {})", numel, shape.str()).c_str());
  char extra;
  if (gzread(f, &extra, 1) != 0) {
    fail(path, fmt::format("has bytes after the {} its header declares (shape {})", numel,
                           shape.str()));
  }
  return out;
}

}  // namespace tessera::data
