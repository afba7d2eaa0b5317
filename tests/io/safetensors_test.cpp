// safetensors files: round trips on every device, the Python package's fixture, atomic
// saves, every kind of corrupt file, and module checkpoints.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "io/interop_tensors.h"
#include "support/device_test.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::DeviceTest;
using testing::expect_throw_with;

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "tessera-io-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  fs::path operator/(const std::string& name) const { return path_ / name; }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// A file with this JSON header and `data` bytes after it.
std::string file_with(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

void expect_same(const Tensor& a, const Tensor& b, const std::string& what) {
  EXPECT_EQ(a.dtype(), b.dtype()) << what;
  EXPECT_EQ(a.shape(), b.shape()) << what;
  EXPECT_EQ(a.to_vector<double>(), b.to_vector<double>()) << what;
}

class Safetensors : public DeviceTest {};

TEST_P(Safetensors, RoundTripsEveryDtypeOntoAnyDevice) {
  TempDir dir;
  const auto tensors = testing::interop_tensors(device());
  save_safetensors(dir / "t.safetensors", tensors, testing::interop_metadata());
  for (Device target : available_devices()) {
    const SafetensorsFile file = load_safetensors(dir / "t.safetensors", target);
    EXPECT_EQ(file.metadata, testing::interop_metadata());
    ASSERT_EQ(file.tensors.size(), tensors.size());
    for (const auto& [name, t] : tensors) {
      ASSERT_TRUE(file.tensors.contains(name)) << name;
      EXPECT_EQ(file.tensors.at(name).device(), target) << name;
      expect_same(file.tensors.at(name), t, name);
    }
  }
  // Views are saved as their values.
  save_safetensors(dir / "v.safetensors", {{"t", arange(0, 6, 1, device()).reshape({2, 3}).t()}});
  expect_same(load_safetensors(dir / "v.safetensors").tensors.at("t"),
              tensor({{0., 3.}, {1., 4.}, {2., 5.}}).to(kInt64), "transposed view");
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path().string().find(".tmp-"), std::string::npos)
        << "a temporary file was left behind: " << entry.path();
  }
}

TEST_P(Safetensors, ReadsTheReferencePackagesFile) {
  const fs::path fixture = fs::path(TESSERA_TEST_FIXTURES) / "safetensors" / "reference.safetensors";
  const SafetensorsFile file = load_safetensors(fixture, device());
  EXPECT_EQ(file.metadata, testing::interop_metadata());
  for (const auto& [name, t] : testing::interop_tensors(device())) {
    ASSERT_TRUE(file.tensors.contains(name)) << name;
    expect_same(file.tensors.at(name), t, name);
  }
}

TEST_P(Safetensors, SavingIsAtomic) {
  TempDir dir;
  const fs::path path = dir / "model.safetensors";
  save_safetensors(path, {{"w", ones({3}, device())}});
  const std::string good = read_bytes(path);
  // A save that fails (here: an undefined tensor) leaves the good file as it was.
  EXPECT_THROW(save_safetensors(path, {{"a", ones({2}, device())}, {"b", Tensor()}}), Error);
  EXPECT_EQ(read_bytes(path), good);
  expect_throw_with<IOError>(
      [&] { save_safetensors(dir / "missing" / "x.safetensors", {{"w", ones({1}, device())}}); },
      {"[save_safetensors]", "missing/x.safetensors", "temporary file"});
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
  expect_throw_with<Error>([&] { save_safetensors(path, {{"__metadata__", ones({1}, device())}}); },
                           {"[save_safetensors] '__metadata__' cannot name a tensor"});
}

TEST_P(Safetensors, CorruptFilesGiveClearErrors) {
  TempDir dir;
  const fs::path p = dir / "bad.safetensors";
  auto expect_bad = [&](const std::string& bytes, const std::string& fragment) {
    write_bytes(p, bytes);
    expect_throw_with<IOError>([&] { load_safetensors(p, device()); },
                               {"[load_safetensors]", p.string(), fragment});
  };
  const std::string w = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string eight(8, '\1');
  expect_bad("", "too short");
  expect_bad(file_with(w, eight).substr(0, 20), "declares a");
  expect_bad(file_with(w, eight.substr(0, 5)), "truncated");
  expect_bad(file_with(w, eight + "xx"), "trailing bytes");
  expect_bad(file_with("{not json", ""), "not valid JSON");
  expect_bad(file_with(R"({"w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", "abcd"),
             "dtype F16, which tessera cannot hold");
  expect_bad(file_with(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
             "needs 12 bytes");
  expect_bad(file_with(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight),
             "overlap or leave a gap");
  expect_bad(file_with(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight),
             "not a non-negative integer");
  expect_bad(file_with(R"({"w":{"dtype":"F32"}})", ""), "needs a dtype string, a shape array");
  expect_bad(file_with(R"({"__metadata__":{"k":1}})", ""), "is not a string");
  // A BOOL byte that is neither 0 nor 1 would be read as undefined behaviour by where().
  expect_bad(file_with(R"({"m":{"dtype":"BOOL","shape":[4],"data_offsets":[0,4]}})",
                       std::string("\1\0\2\1", 4)),
             "tensor 'm' is BOOL but its byte 2 holds 2");
  expect_throw_with<IOError>([&] { load_safetensors(dir / "absent.safetensors"); },
                             {"cannot open it"});
  // A well-formed file still loads after all that.
  write_bytes(p, file_with(w, eight));
  EXPECT_EQ(load_safetensors(p, device()).tensors.at("w").shape(), Shape({2}));
}

TEST_P(Safetensors, ModuleCheckpointsMoveBetweenDevicesAndRefuseOtherModels) {
  TempDir dir;
  const fs::path path = dir / "mlp.safetensors";
  manual_seed(1);
  nn::Sequential net(nn::Linear(4, 8, true, device()), nn::ReLU(), nn::Linear(8, 2, true, device()));
  nn::save_checkpoint(net, path, {{"epoch", "3"}});
  manual_seed(2);
  nn::Sequential other(nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 2));  // on the CPU
  EXPECT_EQ(nn::load_checkpoint(other, path).at("epoch"), "3");
  for (const auto& [name, t] : net.state_dict()) {
    expect_same(other.tensor(name), t, name);
    EXPECT_EQ(other.tensor(name).device(), cpu()) << "loading keeps the module's devices";
  }
  nn::Sequential wider(nn::Linear(4, 9), nn::ReLU(), nn::Linear(9, 2));
  const auto before = wider.tensor("2.bias").to_vector<double>();
  expect_throw_with<ShapeError>([&] { nn::load_checkpoint(wider, path); },
                                {"0.weight has shape [9, 4] in the module but [8, 4]"});
  EXPECT_EQ(wider.tensor("2.bias").to_vector<double>(), before) << "a failed load changes nothing";
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Safetensors);

}  // namespace
}  // namespace tessera
