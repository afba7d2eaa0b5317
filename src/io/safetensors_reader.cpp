// Reading a checked safetensors file's data into existing tensors: straight into CPU
// memory, through pinned chunks into GPU memory. See Note [Reading checkpoints].
#include "io/safetensors_reader.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <source_location>

#include "core/check.h"
#include "core/copy.h"
#include "core/device_rules.h"
#include "core/tensor_impl.h"
#include "io/parallel_read.h"
#include "tessera/autograd.h"

// Note [Reading checkpoints]
// Tensors are allocated (or, for a module, found) from the header before any data is read;
// then the data goes where it belongs with as few copies as the destination allows:
// - a contiguous destination in host memory (any CPU device) of the file's dtype gets
//   pread(2) straight into its memory, in 4 MiB chunks shared by several threads for a big
//   file (io::read_spans): the kernel's copy out of the page cache is the only copy;
// - a contiguous GPU destination of the file's dtype gets the data through pinned chunks,
//   each read by pread and sent with an asynchronous copy (SourceWriters::kHostOnly). The
//   copy holds its chunk until it has run and the pinned cache hands a block out again only
//   then, so the chunks form a ring of reused buffers and reading overlaps the copies;
// - anything else (a BOOL tensor, whose bytes are checked first; another dtype, converted
//   by copy_; a strided view) is read into host memory and copied with copy_.
// Everything that can refuse the file (the header, the BOOL bytes) is checked before the
// first destination is written, so a module is never changed by a refused file. A read(2)
// that fails after that cannot be undone without a second copy of the data; it is an
// IOError that says the destinations may be partly written.

namespace tessera::io {
namespace {

constexpr const char* kOp = "load_safetensors";
constexpr std::size_t kStagingChunk = std::size_t{8} << 20;

enum class Route { kSkip, kDirect, kPinnedChunks, kStaged };

Route route_of(const SafetensorsReader::Item& item, const Tensor& dst) {
  if (!dst.defined()) return Route::kSkip;
  const bool same_layout = dst.is_contiguous() && dst.dtype() == item.dtype;
  if (item.dtype == kBool || !same_layout) return Route::kStaged;
  return dst.device().is_cpu() ? Route::kDirect : Route::kPinnedChunks;
}

// A BOOL byte other than 0 or 1 is no bool at all: kernels would read it as undefined
// behaviour (once, as an index out of bounds). The file is refused, naming the first one.
void check_bool_bytes(const Tensor& host, const std::string& name,
                      const std::filesystem::path& path) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(detail::impl_of(host).data());
  const std::size_t n = host.nbytes();
  for (std::size_t i = 0; i < n; ++i) {
    if (bytes[i] > 1) {
      throw IOError(fmt::format(
          "[{}] '{}': tensor '{}' is BOOL but its byte {} holds {}; BOOL bytes must be 0 or 1. "
          "Rewrite the file with a safetensors writer that stores true as 1",
          kOp, path.string(), name, i, bytes[i]));
    }
  }
}

}  // namespace

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

void SafetensorsReader::read_into(const std::vector<Tensor>& dsts) const {
  TESSERA_INTERNAL_ASSERT(dsts.size() == items_.size(), "{} destinations for {} tensors",
                          dsts.size(), items_.size());
  std::vector<Route> routes;
  for (std::size_t i = 0; i < items_.size(); ++i) {
    routes.push_back(route_of(items_[i], dsts[i]));
    TESSERA_INTERNAL_ASSERT(routes.back() == Route::kSkip || dsts[i].shape() == items_[i].shape,
                            "tensor '{}' read into {}", items_[i].name, dsts[i].shape().str());
  }
  // 1. What may refuse the file, and what cannot go straight to its destination: into host
  //    memory (page-locked for a GPU destination, so its copy is asynchronous).
  std::vector<Tensor> staged(items_.size());
  std::vector<ReadSpan> spans;
  for (std::size_t i = 0; i < items_.size(); ++i) {
    if (routes[i] != Route::kStaged) continue;
    staged[i] = detail::make_tensor(items_[i].shape, items_[i].dtype, cpu(), kOp,
                                    /*pinned=*/dsts[i].device().is_cuda());
    spans.push_back({items_[i].offset, items_[i].bytes, detail::impl_of(staged[i]).data()});
  }
  read_spans(fd_, spans, path_, kOp);
  for (std::size_t i = 0; i < items_.size(); ++i) {
    if (routes[i] == Route::kStaged && items_[i].dtype == kBool) {
      check_bool_bytes(staged[i], items_[i].name, path_);
    }
  }
  // 2. The file is accepted: write the destinations.
  try {
    spans.clear();
    for (std::size_t i = 0; i < items_.size(); ++i) {
      if (routes[i] != Route::kDirect) continue;
      detail::mark_written(dsts[i]);
      // The host writes a logical CPU device's memory: bytes into a device, as a GPU's are.
      detail::count_host_write(dsts[i].device(), items_[i].bytes);
      spans.push_back({items_[i].offset, items_[i].bytes, detail::impl_of(dsts[i]).data()});
    }
    read_spans(fd_, spans, path_, kOp);
    for (std::size_t i = 0; i < items_.size(); ++i) {
      if (routes[i] != Route::kPinnedChunks) continue;
      const Item& item = items_[i];
      const Tensor flat = dsts[i].reshape({dsts[i].numel()});
      const auto item_size = static_cast<std::int64_t>(itemsize(item.dtype));
      const std::int64_t per_chunk =
          std::max<std::int64_t>(1, static_cast<std::int64_t>(kStagingChunk) / item_size);
      detail::mark_written(dsts[i]);
      for (std::int64_t start = 0; start < flat.numel(); start += per_chunk) {
        const std::int64_t len = std::min(per_chunk, flat.numel() - start);
        const Tensor chunk = detail::make_tensor({len}, item.dtype, cpu(), kOp, /*pinned=*/true);
        read_span(fd_,
                  {item.offset + static_cast<std::uint64_t>(start * item_size),
                   static_cast<std::size_t>(len * item_size), detail::impl_of(chunk).data()},
                  path_, kOp);
        detail::copy_data(chunk, flat.narrow(0, start, len), kOp, std::source_location::current(),
                          detail::SourceWriters::kHostOnly);
      }
    }
  } catch (const IOError& e) {
    throw IOError(std::string(e.what()) +
                  "; the file passed every check before this, and the tensors it was being "
                  "read into may now be partly written: load them again from a good file");
  }
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < items_.size(); ++i) {
    if (routes[i] == Route::kStaged) Tensor(dsts[i]).copy_(staged[i]);
  }
}

}  // namespace tessera::io
