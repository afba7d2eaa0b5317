#pragma once
/// Tensors to and from files in the safetensors format (the Hugging Face format PyTorch's
/// ecosystem reads): an 8-byte little-endian header length, a JSON header naming each
/// tensor's dtype, shape and byte range, then the raw little-endian data.
///
///   save_safetensors("model.safetensors", net.state_dict());     // from any device
///   auto file = load_safetensors("model.safetensors", try_gpu()); // onto a chosen device
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "tessera/device.h"
#include "tessera/export.h"
#include "tessera/tensor.h"

namespace tessera {

struct TESSERA_API SafetensorsSaveOptions {
  /// false: refuse float tensors holding NaN or infinity (NonFiniteError naming the tensor;
  /// the file is left as it was). save_safetensors allows them by default, as the format
  /// does; nn::save_checkpoint refuses them by default.
  bool allow_non_finite = true;
};

/// Writes `tensors` (any devices; each is read to the host once, a deliberate transfer the
/// ledger counts) and string `metadata`. Atomic (Note [Saving atomically] in
/// src/io/atomic_file.cpp): on Linux the data is written to an unnamed file beside `path`, flushed
/// to disk and only then named and renamed over `path`, so a crash or a kill never leaves a
/// truncated checkpoint where a good one was, nor a temporary file behind. A new file gets mode
/// 0666 & ~umask; a file replaced keeps its mode. A symbolic link is followed: the file it
/// points to is replaced atomically and the link stays a link. Throws IOError naming the path
/// and the system's reason when it cannot write (or `path` is a directory, a FIFO...), Error
/// for an empty or "__metadata__" name and for a tensor name or metadata key or value that is
/// not valid UTF-8 (the message escapes its bytes), NonFiniteError as `options` say.
TESSERA_API void save_safetensors(const std::filesystem::path& path,
                                  const std::map<std::string, Tensor>& tensors,
                                  const std::map<std::string, std::string>& metadata = {},
                                  const SafetensorsSaveOptions& options = {});

struct TESSERA_API SafetensorsFile {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

/// Reads every tensor of a safetensors file onto `device`. The whole header is checked
/// before any data is read: a truncated or corrupt file, overlapping or out-of-range byte
/// ranges, sizes that disagree with shapes, or a dtype tessera does not hold (it holds
/// BOOL, U8, I32, I64, F32, F64, BF16, F16) throw IOError naming the file and the problem;
/// so does a path that is not a regular file (a FIFO, a directory), refused before it is
/// opened. Every tensor is allocated on `device` from the header, then the data is read
/// straight into it (several threads for a big file; through pinned chunks and asynchronous
/// copies for a GPU, which the call does not wait for).
TESSERA_API SafetensorsFile load_safetensors(const std::filesystem::path& path,
                                             Device device = cpu());

/// A tensor as a safetensors header describes it.
struct TESSERA_API SafetensorsTensorInfo {
  Dtype dtype = kFloat32;
  Shape shape;
  std::uint64_t begin = 0, end = 0;  ///< its bytes, counted from the start of the data
};

struct TESSERA_API SafetensorsHeader {
  std::map<std::string, SafetensorsTensorInfo> tensors;
  std::map<std::string, std::string> metadata;
};

/// Reads and checks a safetensors file's header only, no tensor data: what a file holds, at
/// the cost of its header. Makes every check load_safetensors makes before reading data and
/// throws the same IOErrors. The header is at most 100 MB (the reference implementation's
/// limit); a NUL byte in it, a name given twice, an empty tensor name or one holding a control
/// character, and anything nested where the format nests nothing are refused at once.
TESSERA_API SafetensorsHeader read_safetensors_header(const std::filesystem::path& path);

}  // namespace tessera
