// The safetensors header (Note [Parsing the header]): huge or deeply nested headers are
// refused at once, NULs, duplicate keys, unknown fields and bad names are refused, messages
// never carry a control character raw, and a checkpoint is matched against the module from
// its header before any data is read.
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "support/device_test.h"
#include "support/temp_dir.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::expect_throw_with;

class SafetensorsHeaders : public ::testing::Test {
 protected:
  void SetUp() override { path_ = dir_ / "t.safetensors"; }

  // Writes a file with this JSON header and `data` after it; the header length field says
  // `declared` bytes when given.
  void write(const std::string& header, const std::string& data = "",
             std::uint64_t declared = UINT64_MAX) {
    const std::uint64_t n = declared == UINT64_MAX ? header.size() : declared;
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    std::ofstream(path_, std::ios::binary) << out << header << data;
  }
  // load_safetensors and read_safetensors_header both refuse the file, saying `fragments`.
  void expect_refused(const std::vector<std::string>& fragments) {
    std::vector<std::string> all = fragments;
    all.push_back("[load_safetensors]");
    expect_throw_with<IOError>([&] { load_safetensors(path_); }, all);
    expect_throw_with<IOError>([&] { read_safetensors_header(path_); }, all);
  }

  testing::TempDir scratch_{"tessera-header"};
  fs::path dir_ = scratch_.path(), path_;
};

const std::string kTensor = R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
const std::string kEight(8, '\1');

TEST_F(SafetensorsHeaders, AHeaderOverTheReferenceLimitIsRefusedBeforeItIsRead) {
  write("{}", "", 100'000'001);
  expect_refused({"declares a 100000001-byte header, over the limit of 100000000 bytes"});
}

// A 20 MB header nested 20 million arrays deep took a JSON document seconds and gigabytes;
// parsed event by event it is refused at its first bracket.
TEST_F(SafetensorsHeaders, DeeplyNestedHeadersAreRefusedAtOnce) {
  const std::size_t depth = 10'000'000;
  write(R"({"__metadata__":{"k":)" + std::string(depth, '[') + std::string(depth, ']') + "}}");
  const auto start = std::chrono::steady_clock::now();
  expect_refused({"__metadata__.k is not a string"});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 2.0) << "refusing costs reading the header, not parsing it into a tree";
  // Nesting where the format has a plain value: inside a tensor, beside its fields.
  write(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":[[[[1]]]]}})", kEight);
  expect_refused(
      {"tensor 'w' has a field 'extra'; a tensor has dtype, shape and data_offsets only"});
  write(R"({"w":{"dtype":"F32","shape":[[2]],"data_offsets":[0,8]}})", kEight);
  expect_refused({"tensor 'w' has a shape entry that is not a non-negative integer"});
  write(R"([[{"w":1}]])");
  expect_refused({"the header is not a JSON object"});
}

TEST_F(SafetensorsHeaders, NothingMayFollowANulButSpacesMayPad) {
  write(R"({"w":)" + kTensor + "}" + std::string("\0{\"x\":1}", 8), kEight);
  expect_refused({"the header holds a NUL byte at offset 54 of 62"});
  write(R"({"w":)" + kTensor + "}      ", kEight);  // the reference pads with spaces
  EXPECT_EQ(load_safetensors(path_).tensors.at("w").shape(), Shape({2}));
}

TEST_F(SafetensorsHeaders, OffsetsThatEndBeforeTheyBeginAreRefusedAsSuch) {
  write(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", kEight);
  expect_refused({"tensor 'w' has data_offsets [8, 0], which end before they begin"});
  write(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", kEight);
  expect_refused({"needs 8 bytes but its data_offsets [0, 4] span 4"});
}

TEST_F(SafetensorsHeaders, KeysGivenTwiceAreRefusedNotOverwritten) {
  write(R"({"w":)" + kTensor + R"(,"w":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", kEight);
  expect_refused({"the header names 'w' twice"});
  write(R"({"__metadata__":{"a":"1"},"__metadata__":{"b":"2"}})");
  expect_refused({"the header names '__metadata__' twice"});
  write(R"({"__metadata__":{"a":"1","a":"2"}})");
  expect_refused({"__metadata__ names 'a' twice"});
  write(R"({"w":{"dtype":"F32","dtype":"U8","shape":[2],"data_offsets":[0,8]}})", kEight);
  expect_refused({"tensor 'w' gives dtype twice"});
}

TEST_F(SafetensorsHeaders, EmptyNamesAndControlCharactersAreRefusedAndEscaped) {
  write(R"({"":)" + kTensor + "}", kEight);
  expect_refused({"a tensor has an empty name"});
  // ESC [ 2 J clears a terminal: the message names the tensor with the byte escaped.
  write(R"({"a\u001b[2Jb":)" + kTensor + "}", kEight);
  expect_refused({R"(tensor name 'a\x1b[2Jb' holds a control character)"});
  write(R"({"a\u0085b":)" + kTensor + "}", kEight);  // NEL, a C1 control
  expect_refused({R"(tensor name 'a\u0085b' holds a control character)"});
  try {
    load_safetensors(path_);
  } catch (const IOError& e) {
    EXPECT_EQ(std::string(e.what()).find('\x1b'), std::string::npos);
  }
  // Printable UTF-8 names load, and messages print them as they are.
  write(R"({"gewicht_ä":)" + kTensor + "}", kEight);
  EXPECT_TRUE(load_safetensors(path_).tensors.contains("gewicht_ä"));
  // Metadata keys may hold anything, but a message escapes them.
  write(R"({"__metadata__":{"k\u0007":1}})");
  expect_refused({R"(__metadata__.k\x07 is not a string)"});
  // tessera does not write what it would refuse to read.
  expect_throw_with<Error>(
      [&] {
        save_safetensors(dir_ / "out.safetensors", {{"a\nb", zeros({1})}});
      },
      {R"(tensor name 'a\x0ab' holds a control character)"});
}

TEST_F(SafetensorsHeaders, TheHeaderAloneSaysWhatTheFileHolds) {
  save_safetensors(path_, {{"w", zeros({2, 3})}, {"n", zeros({4}, kInt64)}}, {{"epoch", "2"}});
  const SafetensorsHeader h = read_safetensors_header(path_);
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.tensors.at("w").shape, Shape({2, 3}));
  EXPECT_EQ(h.tensors.at("w").dtype, kFloat32);
  EXPECT_EQ(h.tensors.at("n").dtype, kInt64);
  EXPECT_EQ(h.tensors.at("n").end - h.tensors.at("n").begin, 32u);
  EXPECT_EQ(h.metadata.at("epoch"), "2");
}

// --load of a file for another model costs its header: a 1 GiB tensor the module does not
// have is neither read nor allocated.
TEST_F(SafetensorsHeaders, ACheckpointIsMatchedFromItsHeaderBeforeAnyDataIsRead) {
  nn::Sequential net(nn::Linear(2, 1, /*bias=*/false));
  const std::uint64_t huge = std::uint64_t{1} << 30;
  write(R"({"0.weight":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]},)"
        R"("unknown":{"dtype":"U8","shape":[)" +
            std::to_string(huge) + R"(],"data_offsets":[8,)" + std::to_string(8 + huge) + "]}}",
        kEight);
  fs::resize_file(path_, fs::file_size(path_) + huge);  // sparse: no disk used
  const MemoryStats before = memory_stats(cpu());
  reset_peak_memory(cpu());
  expect_throw_with<Error>([&] { nn::load_checkpoint(net, path_); },
                           {"[load_checkpoint] '" + path_.string() + "': the file does not match",
                            "unexpected unknown", "The file was saved from another model"});
  EXPECT_LT(memory_stats(cpu()).peak, before.in_use + (std::size_t{1} << 20))
      << "the unknown tensor's data was allocated";
  // Shapes and dtypes too: a file for a wider layer is refused from its header.
  write(R"({"0.weight":{"dtype":"F32","shape":[1,3],"data_offsets":[0,12]}})", "123456789abc");
  expect_throw_with<ShapeError>([&] { nn::load_checkpoint(net, path_); },
                                {"[load_checkpoint] '",
                                 "0.weight has shape [1, 2] in the module "
                                 "but [1, 3] in the file; the file belongs to"});
  write(R"({"0.weight":{"dtype":"I32","shape":[1,2],"data_offsets":[0,8]}})", kEight);
  expect_throw_with<DtypeError>([&] { nn::load_checkpoint(net, path_); },
                                {"0.weight is float32 in the module but int32"});
}

}  // namespace
}  // namespace tessera
