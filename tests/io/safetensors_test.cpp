// safetensors files: round trips on every device, the Python package's fixture, atomic
// saves (killed ones too), modes and links, every kind of corrupt file or name, FIFOs, and
// module checkpoints (never of NaN weights unless asked).
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "io/interop_tensors.h"
#include "support/device_test.h"
#include "support/fifo.h"
#include "support/helper_program.h"
#include "support/temp_dir.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::DeviceTest;
using testing::expect_throw_with;
using testing::TempDir;

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

// The bytes a load writes into a device are in the ledger: a logical CPU device's too (the
// file was read straight into its memory, and nothing was counted).
TEST_P(Safetensors, ALoadCountsTheBytesItWritesIntoTheDevice) {
  TempDir dir;
  save_safetensors(dir / "f.safetensors", {{"f", ones({1000}, device())}});
  synchronize(device());
  reset_transfer_stats();
  (void)load_safetensors(dir / "f.safetensors", device());
  const TransferStats stats = transfer_stats(device());
  if (device().is_cpu() && !has_logical_cpu_devices()) {
    EXPECT_EQ(stats.h2d_bytes, 0u) << "the plain CPU is the host: nothing moves";
  } else {
    EXPECT_EQ(stats.h2d_bytes, 4000u);
  }
}

TEST_P(Safetensors, ReadsTheReferencePackagesFile) {
  const fs::path fixture =
      fs::path(TESSERA_TEST_FIXTURES) / "safetensors" / "reference.safetensors";
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
      [&] {
        save_safetensors(dir / "missing" / "x.safetensors", {{"w", ones({1}, device())}});
      },
      {"[save_safetensors]", "missing/x.safetensors", "temporary file"});
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
  expect_throw_with<Error>(
      [&] {
        save_safetensors(path, {{"__metadata__", ones({1}, device())}});
      },
      {"[save_safetensors] '", "model.safetensors': '__metadata__' cannot name a tensor"});
  // A header over the readers' limit was written, over a good file, and then nothing read it.
  expect_throw_with<Error>(
      [&] {
        save_safetensors(path, {{"w", ones({1}, device())}},
                         {{"notes", std::string(100'000'000, 'x')}});
      },
      {"[save_safetensors]", "the header (names, shapes and metadata) would be",
       "over the 100000000", "nothing was written"});
  EXPECT_EQ(read_bytes(path), good);
}

// A load while a save replaces the file (a job evaluating the checkpoints that training
// writes each epoch) reads one file whole: it opened the path twice, header then data, and
// got one file's header and metadata with the other's data when both had the same size
// (about 0.6% of loads), without an error.
TEST(SafetensorsFiles, ALoadDuringASaveReadsOneFileWhole) {
  TempDir dir;
  const fs::path path = dir / "state.safetensors";
  const std::map<std::string, Tensor> one{{"w", full({256}, 1.0)}}, two{{"w", full({256}, 2.0)}};
  save_safetensors(path, one, {{"v", "1"}});
  std::atomic<bool> stop{false};
  std::thread saver([&] {
    for (int i = 0; !stop; ++i)
      save_safetensors(path, i % 2 ? one : two, {{"v", i % 2 ? "1" : "2"}});
  });
  int loads = 0, torn = 0;
  std::string error;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (std::chrono::steady_clock::now() < until && error.empty()) {
    try {
      const SafetensorsFile f = load_safetensors(path);
      const float w = f.tensors.at("w").to_vector<float>()[0];
      if ((f.metadata.at("v") == "1") != (w == 1.0F)) ++torn;
      ++loads;
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  stop = true;
  saver.join();
  EXPECT_EQ(error, "");
  EXPECT_EQ(torn, 0) << "of " << loads << " loads";
  EXPECT_GT(loads, 20);
}

std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

mode_t mode_of(const fs::path& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

// Note [Saving atomically]: a save killed with SIGKILL (by a helper process saving 128 MiB
// over and over) leaves no temporary file, and the checkpoint whole: the old one or a new one.
TEST(SafetensorsFiles, AKilledSaveLeavesNothingBehind) {
  TempDir dir;
  const fs::path path = dir / "model.safetensors";
  save_safetensors(path, {{"w", ones({3})}});
  const std::string good = read_bytes(path);
  const std::string helper = testing::helper_program(TESSERA_TEST_SAVE_UNTIL_KILLED);
  for (const int delay_ms : {150, 400}) {
    int out[2];
    ASSERT_EQ(::pipe(out), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // only async-signal-safe calls before exec
      ::dup2(out[1], STDOUT_FILENO);
      ::close(out[0]);
      ::execl(helper.c_str(), helper.c_str(), path.c_str(), nullptr);
      ::_exit(127);
    }
    ::close(out[1]);
    char line[16] = {};
    ASSERT_GT(::read(out[0], line, sizeof line - 1), 0) << "the helper never started saving";
    ::close(out[0]);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the helper ended by itself, status " << status;
    EXPECT_EQ(names_in(dir.path()), std::set<std::string>{"model.safetensors"})
        << "killed after " << delay_ms << " ms";
    const SafetensorsFile file = load_safetensors(path);  // whole: it loads
    const std::int64_t n = file.tensors.at("w").numel();
    EXPECT_TRUE((n == 3 && read_bytes(path) == good) || n == 32 * 1024 * 1024) << n;
  }
}

TEST(SafetensorsFiles, NewFilesFollowTheUmaskAndReplacedFilesKeepTheirMode) {
  TempDir dir;
  const mode_t saved_mask = ::umask(022);
  save_safetensors(dir / "a.safetensors", {{"w", ones({2})}});
  EXPECT_EQ(mode_of(dir / "a.safetensors"), 0644u);
  ::umask(027);
  save_safetensors(dir / "b.safetensors", {{"w", ones({2})}});
  EXPECT_EQ(mode_of(dir / "b.safetensors"), 0640u);
  ::umask(077);
  save_safetensors(dir / "a.safetensors", {{"w", ones({3})}});  // replaces a 0644 file
  EXPECT_EQ(mode_of(dir / "a.safetensors"), 0644u) << "an existing file keeps its mode";
  ASSERT_EQ(::chmod((dir / "b.safetensors").c_str(), 0604), 0);
  save_safetensors(dir / "b.safetensors", {{"w", ones({3})}});
  EXPECT_EQ(mode_of(dir / "b.safetensors"), 0604u);
  ::umask(saved_mask);
  EXPECT_EQ(load_safetensors(dir / "b.safetensors").tensors.at("w").numel(), 3);
}

// The temporary name beside a long one fits a directory entry (255 bytes); a file whose mode
// forbids this user to write it is not replaced (root may write any file, as with open).
TEST(SafetensorsFiles, LongNamesAreSavedAndWriteProtectedFilesAreNotReplaced) {
  TempDir dir;
  const fs::path long_name = dir / (std::string(250, 'a') + ".st");  // 253 bytes
  save_safetensors(long_name, {{"w", ones({2})}});
  EXPECT_EQ(load_safetensors(long_name).tensors.at("w").numel(), 2);
  EXPECT_EQ(names_in(dir.path()).size(), 1u) << "no temporary file left";
  if (::geteuid() == 0) GTEST_SKIP() << "root may write any file";
  const fs::path locked = dir / "locked.safetensors";
  save_safetensors(locked, {{"w", ones({2})}});
  ASSERT_EQ(::chmod(locked.c_str(), 0444), 0);
  expect_throw_with<IOError>(
      [&] {
        save_safetensors(locked, {{"w", ones({3})}});
      },
      {"[save_safetensors]", "locked.safetensors': cannot write it", "chmod u+w"});
  EXPECT_EQ(load_safetensors(locked).tensors.at("w").numel(), 2);
}

// A symbolic link is followed: its target is replaced (atomically) and the link stays.
TEST(SafetensorsFiles, SavingThroughASymbolicLinkReplacesItsTarget) {
  TempDir dir;
  fs::create_directory(dir / "runs");
  save_safetensors(dir / "runs" / "real.safetensors", {{"w", ones({3})}});
  fs::create_symlink("runs/real.safetensors", dir / "latest.safetensors");  // relative
  fs::create_symlink("latest.safetensors", dir / "chain.safetensors");      // link to a link
  save_safetensors(dir / "chain.safetensors", {{"w", ones({5})}});
  EXPECT_TRUE(fs::is_symlink(dir / "chain.safetensors"));
  EXPECT_TRUE(fs::is_symlink(dir / "latest.safetensors"));
  EXPECT_EQ(load_safetensors(dir / "runs" / "real.safetensors").tensors.at("w").numel(), 5);
  // A dangling link makes the file it names.
  fs::create_symlink("runs/new.safetensors", dir / "dangling.safetensors");
  save_safetensors(dir / "dangling.safetensors", {{"w", ones({2})}});
  EXPECT_TRUE(fs::is_symlink(dir / "dangling.safetensors"));
  EXPECT_EQ(load_safetensors(dir / "runs" / "new.safetensors").tensors.at("w").numel(), 2);
  EXPECT_EQ(names_in(dir / "runs"), (std::set<std::string>{"real.safetensors", "new.safetensors"}));
  // A loop of links is an IOError, not a hang.
  fs::create_symlink("loop2", dir / "loop1");
  fs::create_symlink("loop1", dir / "loop2");
  expect_throw_with<IOError>(
      [&] {
        save_safetensors(dir / "loop1", {{"w", ones({2})}});
      },
      {"[save_safetensors]", "too many levels of symbolic links"});
}

// A FIFO would block the reader for ever: refused before it is opened.
TEST(SafetensorsFiles, LoadRefusesAFifoAndADirectory) {
  TempDir dir;
  ASSERT_TRUE(testing::make_fifo(dir / "pipe.safetensors"));
  {
    testing::FifoUnblocker unblock(dir / "pipe.safetensors");
    expect_throw_with<IOError>([&] { load_safetensors(dir / "pipe.safetensors"); },
                               {"[load_safetensors]",
                                "pipe.safetensors' is a FIFO (named pipe), "
                                "not a regular file"});
  }
  expect_throw_with<IOError>([&] { load_safetensors(dir.path()); },
                             {"is a directory, not a regular file"});
  expect_throw_with<IOError>(
      [&] {
        save_safetensors(dir / "pipe.safetensors", {{"w", ones({1})}});
      },
      {"[save_safetensors]", "is a FIFO (named pipe), not a regular file"});
}

// JSON holds UTF-8 text: other bytes in a name or metadata are a tessera::Error naming the
// entry, its bytes escaped, and nothing is written.
TEST(SafetensorsFiles, NamesAndMetadataMustBeUtf8) {
  TempDir dir;
  const fs::path path = dir / "t.safetensors";
  expect_throw_with<Error>(
      [&] {
        save_safetensors(path, {{"bad\xff\x01name", ones({1})}});
      },
      {"[save_safetensors]", "tensor name 'bad\\xff\\x01name' is not valid UTF-8 (byte 3 is 0xff)",
       "must be UTF-8"});
  expect_throw_with<Error>(
      [&] {
        save_safetensors(path, {{"w", ones({1})}}, {{"k\xc3", "v"}});
      },
      {"metadata key 'k\\xc3' is not valid UTF-8 (byte 1 is 0xc3)"});
  expect_throw_with<Error>(
      [&] {
        save_safetensors(path, {{"w", ones({1})}}, {{"note", "\xed\xa0\x80"}});
      },  // a surrogate
      {"the value of metadata key 'note' '\\xed\\xa0\\x80' is not valid UTF-8 (byte 0 is 0xed)"});
  expect_throw_with<Error>(
      [&] {
        save_safetensors(path, {{"\xc0\xaf", ones({1})}});
      },  // overlong '/'
      {"tensor name '\\xc0\\xaf' is not valid UTF-8"});
  EXPECT_FALSE(fs::exists(path));
  const std::string name = "caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80";  // "café ✓ 😀"
  save_safetensors(path, {{name, ones({1})}}, {{name, name}});
  const SafetensorsFile file = load_safetensors(path);
  EXPECT_TRUE(file.tensors.contains(name));
  EXPECT_EQ(file.metadata.at(name), name);
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
  expect_bad(file_with(R"({"w":{"dtype":"I16","shape":[2],"data_offsets":[0,4]}})", "abcd"),
             "dtype I16, which tessera cannot hold");
  expect_bad(file_with(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
             "needs 12 bytes");
  expect_bad(file_with(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                       eight),
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
  nn::Sequential net(nn::Linear(4, 8, true, device()), nn::ReLU(),
                     nn::Linear(8, 2, true, device()));
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

// A diverged run's weights never replace a good checkpoint, unless the caller asks.
TEST_P(Safetensors, CheckpointsRefuseNonFiniteParametersUnlessAllowed) {
  TempDir dir;
  const fs::path path = dir / "net.safetensors";
  nn::Sequential net(nn::Linear(3, 2, true, device()));
  nn::save_checkpoint(net, path);
  const std::string good = read_bytes(path);
  NoGradGuard no_grad;  // writes into parameters, as an optimizer does
  net.tensor("0.bias").fill_(std::nan(""));
  expect_throw_with<NonFiniteError>(
      [&] { nn::save_checkpoint(net, path); },
      {"[save_checkpoint]",
       "tensor '0.bias' holds a non-finite value (NaN or infinity) at "
       "element 0 of 2; nothing was written and the file is as it was",
       "a class label outside [0, classes) or a NaN in the inputs",
       "pass allow_non_finite = true to save them anyway"});
  // A training state has no such option: the message named one it lacks.
  optim::SGD sgd(net.parameters(), {.lr = 0.1});
  try {
    train::save_training_state(dir / "state.safetensors", net, sgd, nullptr, 1);
    ADD_FAILURE() << "expected NonFiniteError";
  } catch (const NonFiniteError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("[save_training_state] ", 0), 0u) << message;
    EXPECT_EQ(message.find("allow_non_finite"), std::string::npos) << message;
  }
  EXPECT_EQ(read_bytes(path), good);
  EXPECT_EQ(names_in(dir.path()), std::set<std::string>{"net.safetensors"});
  net.tensor("0.bias").fill_(0).narrow(0, 1, 1).fill_(INFINITY);
  EXPECT_THROW(nn::save_checkpoint(net, path), NonFiniteError);
  nn::save_checkpoint(net, path, {}, /*allow_non_finite=*/true);
  EXPECT_TRUE(std::isinf(load_safetensors(path).tensors.at("0.bias").to_vector<double>()[1]));
}

// A tensor over 64 MiB that is not a contiguous CPU tensor goes to the file in pieces along
// dim 0 (Note [Saving without a second copy]): the bytes are the same as the contiguous
// tensor's, and a non-finite value in a later piece is named by its index in the whole.
TEST_P(Safetensors, LargeViewsAreSavedInPieces) {
  TempDir dir;
  constexpr std::int64_t n = 4100;  // [4100, 4100] float32: 67.2 MB, two pieces
  const Tensor base = arange(0, n * n, 1, {kFloat32, device()}).reshape({n, n});
  const Tensor view = base.t();
  save_safetensors(dir / "view.safetensors", {{"x", view}});
  save_safetensors(dir / "whole.safetensors", {{"x", view.contiguous()}});
  EXPECT_EQ(read_bytes(dir / "view.safetensors"), read_bytes(dir / "whole.safetensors"));
  const Tensor loaded = load_safetensors(dir / "view.safetensors").tensors.at("x");
  EXPECT_EQ(loaded.to_vector<float>()[n * 4095 + 7], static_cast<float>(7 * n + 4095));
  // Element [4095, 7] of the view is base[7, 4095], in the second piece.
  {
    NoGradGuard no_grad;
    base.narrow(0, 7, 1).narrow(1, 4095, 1).fill_(std::nan(""));
  }
  expect_throw_with<NonFiniteError>(
      [&] {
        save_safetensors(dir / "view.safetensors", {{"x", view}}, {}, {.allow_non_finite = false});
      },
      {fmt::format("at element {} of {}", n * 4095 + 7, n * n)});
}

// A module whose buffer is an expanded view can be saved but not loaded in place: the load
// is refused before anything is written (it used to overwrite the parameters before it and
// then fail in copy_, naming neither the file nor the buffer).
TEST_P(Safetensors, ALoadRefusedForAnExpandedBufferChangesNothing) {
  struct Expanded : nn::Module {
    nn::Parameter a;
    Tensor pe;
    explicit Expanded(Device d) : nn::Module("Expanded") {
      a = register_parameter("a", zeros({3}, d));
      pe = register_buffer("pe", zeros({1, 3}, d).expand({4, 3}));
    }
    Tensor forward(const Tensor& x) override { return x; }
  };
  TempDir dir;
  const fs::path path = dir / "ex.safetensors";
  save_safetensors(path, {{"a", ones({3})}, {"pe", ones({4, 3})}});
  Expanded m(device());
  expect_throw_with<Error>([&] { nn::load_checkpoint(m, path); },
                           {"[load_checkpoint] '" + path.string() +
                                "': pe (shape [4, 3], strides "
                                "[0, 1]) is an expanded view whose elements share memory",
                            "the view's .clone()"});
  EXPECT_EQ(m.a.to_vector<double>(), std::vector<double>(3, 0.0)) << "a refused load wrote a";
  expect_throw_with<Error>([&] { m.load_state_dict(load_safetensors(path).tensors); },
                           {"[load_state_dict] pe (shape [4, 3]"});
  EXPECT_EQ(m.a.to_vector<double>(), std::vector<double>(3, 0.0));
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Safetensors);

TEST(SafetensorsFiles, AnEmptyPathIsRefusedBeforeAnythingIsWritten) {
  expect_throw_with<Error>(
      [] {
        save_safetensors("", {{"w", ones({1})}});
      },
      {"[save_safetensors] the path is empty; give the name of the file"});
  expect_throw_with<Error>(
      [] {
        save_safetensors("x.safetensors", {{"w", Tensor()}});
      },
      {"[save_safetensors] 'x.safetensors': tensor 'w' is undefined"});
  EXPECT_FALSE(fs::exists("x.safetensors"));
}

// Wider elements first, as PyPI's safetensors writes: each tensor's data starts aligned to
// its element (a float64 after 3 bytes of uint8 started at byte 3 of the data).
TEST(SafetensorsFiles, TensorsAreLaidOutAlignedToTheirElements) {
  TempDir dir;
  const fs::path path = dir / "mixed.safetensors";
  const Tensor bytes = full({3}, 7, {kUInt8});
  const Tensor wide = from_vector(std::vector<double>{1.5, -2, 3, 4e300}, {4});
  const Tensor mid = full({5}, 2.5f);
  save_safetensors(path, {{"a", bytes}, {"b", wide}, {"c", mid}});
  const std::string text = read_bytes(path);
  EXPECT_NE(text.find(R"("b":{"data_offsets":[0,32],"dtype":"F64")"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("c":{"data_offsets":[32,52],"dtype":"F32")"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("a":{"data_offsets":[52,55],"dtype":"U8")"), std::string::npos) << text;
  const SafetensorsFile back = load_safetensors(path);
  expect_same(back.tensors.at("a"), bytes, "a");
  expect_same(back.tensors.at("b"), wide, "b");
  expect_same(back.tensors.at("c"), mid, "c");
}

// PyPI's safetensors reads "__metadata__": null as no metadata (the field is optional).
TEST(SafetensorsFiles, NullMetadataIsNoMetadata) {
  TempDir dir;
  const fs::path path = dir / "null.safetensors";
  write_bytes(path, file_with(R"({"__metadata__":null,"w":{"dtype":"F32","shape":[2],)"
                              R"("data_offsets":[0,8]}})",
                              std::string(8, '\0')));
  const SafetensorsFile file = load_safetensors(path);
  EXPECT_TRUE(file.metadata.empty());
  EXPECT_EQ(file.tensors.at("w").to_vector<double>(), std::vector<double>(2, 0.0));
  write_bytes(path, file_with(R"({"__metadata__":null,"__metadata__":{}})", ""));
  expect_throw_with<IOError>([&] { load_safetensors(path); }, {"names '__metadata__' twice"});
}

}  // namespace
}  // namespace tessera
