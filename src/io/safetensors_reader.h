#pragma once
// A safetensors file opened for reading: the header read and checked, the data read on
// request straight into tensors that already exist. load_safetensors reads into tensors it
// allocates from the header; nn::load_checkpoint into the module's own parameters. See
// Note [Reading checkpoints] in safetensors_reader.cpp.
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tessera/tensor.h"

namespace tessera::io {

class SafetensorsReader {
 public:
  struct Item {
    std::string name;
    Dtype dtype;
    Shape shape;
    std::uint64_t offset = 0;  // of its first byte in the file
    std::uint64_t bytes = 0;
  };

  // Opens `path` and checks its header as load_safetensors documents (IOError naming
  // load_safetensors, the file and the problem). Reads no tensor data.
  explicit SafetensorsReader(const std::filesystem::path& path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::vector<Item>& items() const { return items_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Reads item i into dsts[i] (its shape; any device, dtype and layout; an undefined tensor
  // skips the item). Every BOOL item is read and checked (bytes 0 or 1), and every item that
  // cannot be read straight into its destination is read into host memory, before the first
  // destination is written: a refused file leaves them all as they were. Only a failing
  // read(2) after that (an I/O error, the file cut short by another program) can leave some
  // destinations written; that IOError says so. Destinations on CPU devices must have no
  // queued work (the caller synchronizes them); GPU destinations get asynchronous copies.
  void read_into(const std::vector<Tensor>& dsts) const;

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  std::vector<Item> items_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace tessera::io
