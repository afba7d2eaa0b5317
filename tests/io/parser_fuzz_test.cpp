// Bounded random mutation of the seed files in tests/fixtures/fuzz/ (safetensors and IDX,
// plain and gzipped): every mutant either loads or is refused with a tessera::Error, and
// never crashes, hangs or costs much. Seeded, so a failure repeats; CI runs it under
// AddressSanitizer and UndefinedBehaviorSanitizer with the rest of the suite.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "support/device_test.h"
#include "support/temp_dir.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// One random edit of `s`: a byte changed, inserted or removed, a run repeated or cut, or a
// byte the parsers care about ('\0', brackets, quotes, digits) put somewhere.
void mutate(std::string& s, std::mt19937_64& gen) {
  static const char kBytes[] = "\0[]{}\":,\\-0123456789 \x1b\xff\x1f\x8b";
  static const std::string kInteresting(kBytes, sizeof kBytes - 1);
  auto pick = [&](std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(gen() % n); };
  const std::size_t at = pick(s.size() + 1);
  switch (gen() % 7) {
    case 0:
      if (at < s.size()) s[at] = static_cast<char>(gen());
      break;
    case 1:
      s.insert(at, 1, static_cast<char>(gen()));
      break;
    case 2:
      if (at < s.size()) s.erase(at, 1 + pick(8));
      break;
    case 3:
      if (at < s.size()) s.insert(at, s.substr(at, 1 + pick(16)));
      break;
    case 4:
      s.resize(at);
      break;
    case 5:
      if (at < s.size()) s[at] = kInteresting[pick(kInteresting.size())];
      break;
    default:
      s.insert(at, 1, kInteresting[pick(kInteresting.size())]);
      break;
  }
}

// Sets a safetensors file's length prefix to what follows up to the data, so that most
// mutants get past the first check and into the JSON.
void fix_length(std::string& s, std::size_t data_bytes) {
  if (s.size() < 8 + data_bytes) return;
  const std::uint64_t n = s.size() - 8 - data_bytes;
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
}

class ParserFuzz : public ::testing::Test {
 protected:
  // Runs `load` on `iterations` mutants of each seed in `corpus`; `prepare` may adjust each.
  template <typename Load, typename Prepare>
  void fuzz(const std::string& corpus, int iterations, Load load, Prepare prepare) {
    const fs::path seeds = fs::path(TESSERA_TEST_FIXTURES) / "fuzz" / corpus;
    std::mt19937_64 gen(20261123);
    const fs::path p = dir_ / "mutant";
    int loaded = 0, refused = 0;
    const auto start = std::chrono::steady_clock::now();
    for (const auto& entry : fs::directory_iterator(seeds)) {
      const std::string seed = read_file(entry.path());
      ASSERT_NO_THROW(load(entry.path())) << "the seed itself must load: " << entry.path();
      for (int i = 0; i < iterations; ++i) {
        std::string s = seed;
        for (int k = 1 + static_cast<int>(gen() % 4); k > 0; --k) mutate(s, gen);
        prepare(s, seed, gen);
        std::ofstream(p, std::ios::binary | std::ios::trunc) << s;
        try {
          load(p);
          ++loaded;
        } catch (const Error&) {
          ++refused;
        }  // anything else (another exception, a crash, a sanitizer report) fails the test
      }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_GT(refused, 0);
    EXPECT_LT(seconds, 60.0) << "mutants must be cheap to refuse";
    std::cout << corpus << ": " << loaded << " mutants loaded, " << refused << " refused, "
              << seconds << " s\n";
  }

  testing::TempDir scratch_{"tessera-fuzz"};
  fs::path dir_ = scratch_.path();
};

TEST_F(ParserFuzz, SafetensorsMutantsLoadOrAreRefused) {
  fuzz(
      "safetensors", 250, [](const fs::path& p) { load_safetensors(p); },
      [](std::string& s, const std::string& seed, std::mt19937_64& gen) {
        // The data section of the seeds is at most 24 bytes: keep the prefix honest mostly.
        std::uint64_t n = 0;
        for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(seed[i]);
        if (gen() % 4 != 0) fix_length(s, seed.size() - 8 - n);
      });
}

TEST_F(ParserFuzz, IdxMutantsLoadOrAreRefused) {
  fuzz(
      "idx", 250, [](const fs::path& p) { data::read_idx(p); },
      [](std::string&, const std::string&, std::mt19937_64&) {});
}

// The libFuzzer targets' own inputs (fuzz/, scripts/fuzz), run here so that the suite and
// its sanitizer build check them on every change: the header seeds of safetensors_header_fuzz
// (JSON text, given a length prefix and no data as that target does), and every input in
// fixtures/fuzz/regressions/<corpus>/ (one that once made a target fail, kept after the fix).
TEST_F(ParserFuzz, FuzzTargetInputsLoadOrAreRefused) {
  const fs::path root = fs::path(TESSERA_TEST_FIXTURES) / "fuzz";
  const fs::path p = dir_ / "input";
  auto header_file = [&](const fs::path& json) {
    std::string file(8, '\0');
    file += read_file(json);
    fix_length(file, 0);
    std::ofstream(p, std::ios::binary | std::ios::trunc) << file;
    return p;
  };
  const std::vector<std::pair<std::string, std::function<void(const fs::path&)>>> corpora = {
      {"safetensors_header", [&](const fs::path& f) { read_safetensors_header(header_file(f)); }},
      {"safetensors", [](const fs::path& f) { load_safetensors(f); }},
      {"idx", [](const fs::path& f) { data::read_idx(f); }}};
  int inputs = 0;
  for (const auto& [corpus, load] : corpora) {
    for (const fs::path& dir : {root / corpus, root / "regressions" / corpus}) {
      if (corpus != "safetensors_header" && dir.parent_path() == root) continue;  // above
      if (!fs::is_directory(dir)) continue;
      for (const auto& entry : fs::directory_iterator(dir)) {
        ++inputs;
        try {
          load(entry.path());
        } catch (const Error&) {
        }  // anything else fails the test
      }
    }
  }
  EXPECT_GE(inputs, 4);  // the header seeds at least
  // The harness's framing is right: a header of empty tensors is accepted whole.
  EXPECT_NO_THROW(
      read_safetensors_header(header_file(root / "safetensors_header" / "accepted.json")));
}

}  // namespace
}  // namespace tessera
