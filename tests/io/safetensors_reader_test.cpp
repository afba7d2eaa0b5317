// Reading checkpoints straight into tensors (Note [Reading checkpoints] in
// src/io/safetensors_reader.cpp): big files read by several threads, module tensors written
// in place after every check (a refused file changes nothing), queued work on the module's
// device ordered before the writes, conversions and strided destinations, short files.
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "io/parallel_read.h"
#include "io/safetensors_reader.h"
#include "support/device_test.h"
#include "support/temp_dir.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::DeviceTest;
using testing::expect_throw_with;

using Scratch = testing::TempDir;

// A module with a large float parameter (over the size from which reads use several threads)
// and a BOOL buffer, whose bytes a file can get wrong.
class Masked : public nn::Module {
 public:
  explicit Masked(std::int64_t n, Device device = cpu()) : Module("Masked") {
    w = register_parameter("w", rand({n}, device));
    b = register_parameter("b", rand({3, 5}, device));
    mask =
        register_buffer("mask", from_vector(std::vector<double>{1, 0, 1, 1}, {4}, {kBool, device}));
  }
  Tensor forward(const Tensor& x) override { return x * w; }
  Tensor w, b, mask;
};

// Same dtype, shape and values, compared as float64 (exact for every dtype used here).
bool equal(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         a.to_vector<double>() == b.to_vector<double>();
}

constexpr std::int64_t kBig = std::int64_t{5} << 20;  // 20 MiB of float32

class CheckpointRead : public DeviceTest {};

TEST_P(CheckpointRead, BigFilesLoadExactlyOntoTensorsAndIntoModules) {
  Scratch dir;
  const fs::path path = dir / "big.safetensors";
  manual_seed(3);
  Masked saved(kBig, device());
  nn::save_checkpoint(saved, path, {{"step", "7"}});
  const SafetensorsFile file = load_safetensors(path, device());
  EXPECT_EQ(file.metadata.at("step"), "7");
  for (const auto& [name, t] : saved.state_dict()) {
    const Tensor& got = file.tensors.at(name);
    EXPECT_EQ(got.device(), device()) << name;
    EXPECT_EQ(got.dtype(), t.dtype()) << name;
    EXPECT_TRUE(equal(got, t)) << name;
  }
  // Into a module on this device, with in-place work still queued on its tensors: the load
  // comes after that work, and the module's tensors stay the same tensors.
  manual_seed(4);
  Masked other(kBig, device());
  const Tensor w_before = other.w;
  {
    NoGradGuard no_grad;
    other.w.mul_(3.0);
    other.b.add_(1.0);
  }
  EXPECT_EQ(nn::load_checkpoint(other, path).at("step"), "7");
  EXPECT_TRUE(other.w.is_same(w_before));
  for (const auto& [name, t] : saved.state_dict())
    EXPECT_TRUE(equal(other.tensor(name), t)) << name;
}

TEST_P(CheckpointRead, ARefusedFileLeavesTheModuleAsItWas) {
  Scratch dir;
  const fs::path path = dir / "m.safetensors";
  manual_seed(5);
  Masked saved(kBig, device());
  nn::save_checkpoint(saved, path);
  // Byte 2 of the BOOL mask becomes 2: the file is refused after the big parameter could
  // have been read, and nothing of the module changes.
  const std::uint64_t header = [&] {
    std::ifstream in(path, std::ios::binary);
    unsigned char len[8];
    in.read(reinterpret_cast<char*>(len), 8);
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
    return n;
  }();
  const auto items = io::SafetensorsReader(path).items();
  const auto mask =
      std::find_if(items.begin(), items.end(), [](const auto& i) { return i.name == "mask"; });
  ASSERT_NE(mask, items.end());
  EXPECT_GE(mask->offset, 8 + header);
  {
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>(mask->offset + 2));
    f.put('\2');
  }
  manual_seed(6);
  Masked target(kBig, device());
  const auto before = target.state_dict();
  std::map<std::string, Tensor> copies;
  for (const auto& [name, t] : before) copies.emplace(name, t.clone());
  expect_throw_with<IOError>(
      [&] { nn::load_checkpoint(target, path); },
      {"[load_safetensors]", "tensor 'mask' is BOOL but its byte 2 holds 2"});
  for (const auto& [name, t] : copies) EXPECT_TRUE(equal(target.tensor(name), t)) << name;
  // A module whose shapes differ is refused before any data is read.
  Masked smaller(16, device());
  const Tensor w = smaller.w.clone();
  expect_throw_with<ShapeError>([&] { nn::load_checkpoint(smaller, path); },
                                {"w has shape [16] in the module but [5242880]"});
  EXPECT_TRUE(equal(smaller.w, w));
}

// Destinations that cannot take the bytes as they are: another dtype (converted), a strided
// view (copied into place).
TEST_P(CheckpointRead, ConvertsDtypesAndFillsStridedDestinations) {
  Scratch dir;
  const fs::path path = dir / "f64.safetensors";
  const Tensor x = from_vector(std::vector<double>{0.5, -1.25, 3, 4.5, 1e-3, 7}, {2, 3}, kFloat64);
  save_safetensors(path, {{"x", x}});
  const io::SafetensorsReader file(path);
  ASSERT_EQ(file.items().size(), 1u);
  Tensor as_float = empty({2, 3}, {kFloat32, device()});
  file.read_into({as_float});
  EXPECT_EQ(as_float.to_vector<double>(), x.to(kFloat32).to_vector<double>());
  Tensor strided = empty({3, 2}, {kFloat64, device()}).t();
  ASSERT_FALSE(strided.is_contiguous());
  file.read_into({strided});
  EXPECT_EQ(strided.to_vector<double>(), x.to_vector<double>());
  file.read_into({Tensor()});  // an undefined destination skips the tensor
}

TESSERA_INSTANTIATE_DEVICE_SUITE(CheckpointRead);

// read_spans: several threads over chunks of a big file, exactly; a span past the end is an
// IOError naming the file and the offset.
TEST(ParallelRead, ReadsSpansExactlyAndSaysWhenTheFileEnds) {
  Scratch dir;
  const fs::path path = dir / "bytes";
  const std::size_t n = std::size_t{40} << 20;
  std::vector<char> bytes(n);
  std::uint32_t s = 1;
  for (char& c : bytes) c = static_cast<char>((s = s * 1664525u + 1013904223u) >> 24);
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(n));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  std::vector<char> out(n, 0);
  // Uneven spans, out of order, one of them empty: 40 MiB in all, so several threads read.
  const std::vector<io::ReadSpan> spans{{n / 2 + 3, n / 2 - 3, out.data() + n / 2 + 3},
                                        {0, 4097, out.data()},
                                        {4097, 0, out.data() + 4097},
                                        {4097, n / 2 + 3 - 4097, out.data() + 4097}};
  io::read_spans(fd, spans, path, "test");
  EXPECT_TRUE(out == bytes);
  std::vector<char> small(100);
  expect_throw_with<IOError>(
      [&] {
        io::read_spans(fd, {{n - 10, 100, small.data()}}, path, "test");
      },
      {"[test]", path.string(), "the file ends at byte", "90 bytes short",
       "truncated while being read"});
  std::vector<char> big(std::size_t{20} << 20);
  expect_throw_with<IOError>(
      [&] {
        io::read_spans(fd, {{n - big.size() / 2, big.size(), big.data()}}, path, "test");
      },
      {"the file ends at byte"});
  ::close(fd);
}

}  // namespace
}  // namespace tessera
