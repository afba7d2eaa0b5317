// The safetensors format: writing atomically, and reading with every check done on the
// header before any data is read. Format: https://github.com/huggingface/safetensors
#include "tessera/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
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
#include "io/atomic_file.h"
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

// ---- writing ----

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

Header read_header(int fd, const std::filesystem::path& path) {
  return io::read_safetensors_layout(fd, path);
}

}  // namespace

namespace {

// `refusal`: null to save non-finite values, else whose refusal it is.
// Note [Saving without a second copy]
// A tensor's bytes went to the file through a host buffer of its whole size, so saving a
// 6 GiB CPU tensor took 6 GiB more (a 2.1 GB tensor peaked at twice that). A contiguous CPU
// tensor is now written from its own memory, and any other (a GPU's, a view) is read to the
// host in pieces of at most kSavePiece bytes along dim 0, in the file's order.
constexpr std::int64_t kSavePiece = std::int64_t{64} << 20;

// Calls write(bytes, elements, index of the first element) for consecutive pieces of `t`'s
// row-major data; `host` is the staging buffer, reused across tensors.
template <typename Write>
void for_each_piece(const Tensor& t, std::vector<char>& host, Write&& write) {
  if (t.numel() == 0) return;
  const std::source_location where = std::source_location::current();
  if (t.device().is_cpu() && t.is_contiguous()) {
    const void* data = detail::cpu_data(t, t.dtype(), "save_safetensors", where);
    write(static_cast<const char*>(data), static_cast<std::size_t>(t.numel()), 0);
    return;
  }
  const std::int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  const std::int64_t row_elements = t.numel() / rows;
  const std::int64_t row_bytes = row_elements * static_cast<std::int64_t>(t.itemsize());
  const std::int64_t step = std::max<std::int64_t>(1, kSavePiece / row_bytes);
  for (std::int64_t r = 0; r < rows; r += step) {
    const Tensor piece = t.dim() == 0 ? t : t.narrow(0, r, std::min(step, rows - r));
    host.resize(piece.nbytes());
    detail::read_to_host(piece, host.data(), t.dtype(), "save_safetensors", where);
    write(host.data(), static_cast<std::size_t>(piece.numel()), r * row_elements);
  }
}

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

  io::TempFile file(io::follow_links(path, "save_safetensors"), "save_safetensors");
  file.write(len_bytes, 8);
  file.write(text.data(), text.size());
  std::vector<char> host;
  for (const auto& entry : layout) {
    const std::string& name = entry.first;  // not bindings: clang's OpenMP mode cannot capture
    const Tensor& t = entry.second;         // them (the fuzzers build this file with it)
    for_each_piece(t, host, [&](const char* bytes, std::size_t n, std::int64_t first) {
      if (refusal != nullptr && is_floating(t.dtype())) {
        const std::int64_t bad = t.dtype() == kFloat32   ? first_non_finite<float>(bytes, n)
                                 : t.dtype() == kFloat64 ? first_non_finite<double>(bytes, n)
                                 : t.dtype() == kBFloat16
                                     ? first_non_finite<detail::BFloat16>(bytes, n)
                                     : first_non_finite<detail::Float16>(bytes, n);
        TESSERA_CHECK(bad < 0, NonFiniteError,
                      "[{}] '{}': tensor '{}' holds a non-finite value (NaN or infinity) at "
                      "element {} of {}; nothing was written and the file is as it was. A "
                      "diverged training run? Check the data first (a class label outside [0, "
                      "classes) or a NaN in the inputs makes the loss NaN), then lower the "
                      "learning rate or clip the gradients{}{}",
                      refusal->op, io::printable(path.string()), escaped(name), first + bad,
                      t.numel(), refusal->keep_fix != nullptr ? ", or " : "",
                      refusal->keep_fix != nullptr ? refusal->keep_fix : "");
      }
      file.write(bytes, n * t.itemsize());
    });
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
  // Header and data through one descriptor: they come from one file, even when a save
  // replaces the path meanwhile (read_safetensors_layout).
  fd_ = io::open_for_reading(path, "load_safetensors");
  try {
    Header h = read_header(fd_, path);
    for (Entry& e : h.entries) {
      items_.push_back({std::move(e.name), e.dtype, std::move(e.shape), h.data_start + e.begin,
                        e.end - e.begin});
    }
    metadata_ = std::move(h.metadata);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

}  // namespace io

}  // namespace tessera
