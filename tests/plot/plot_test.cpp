// The training chart (the tessera::plot library, src/plot/): SVG and PNG files with axes,
// series and a legend, and its errors.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "plot/canvas.h"
#include "support/device_test.h"
#include "tessera/train/plot.h"

namespace tessera {
namespace {

// The legend goes where it hides the fewest points: the top right covered the validation
// accuracy's last epochs in most runs (accuracy rises there).
TEST(Plot, TheLegendGoesWhereTheSeriesAreNot) {
  using detail::Box;
  const std::vector<Box> boxes{{100, 0, 50, 20}, {100, 80, 50, 20}, {0, 0, 50, 20}};
  // Rising accuracy: from the bottom left to the top right, through two of the boxes' corners.
  const std::vector<std::pair<double, double>> rising{{0, 100}, {150, 0}};
  const Box b = detail::least_covered({rising}, boxes);
  EXPECT_EQ(b.x, 100);
  EXPECT_EQ(b.y, 80) << "the bottom right holds none of the series";
  // A segment that only crosses a box (no vertex inside) counts too.
  const std::vector<std::pair<double, double>> across{{90, 90}, {160, 90}};
  const Box c = detail::least_covered({across}, {{100, 80, 50, 20}, {0, 0, 50, 20}});
  EXPECT_EQ(c.x, 0);
  // Nothing to hide: the first candidate; a NaN point lifts the pen and counts nowhere.
  EXPECT_EQ(detail::least_covered({}, boxes).y, 0);
  const std::vector<std::pair<double, double>> gap{{0, 10}, {NAN, NAN}, {200, 10}};
  EXPECT_EQ(detail::least_covered({gap}, {{20, 0, 100, 20}, {0, 0, 10, 20}}).x, 20);
}

// Note [Charts replaced whole]: a chart that cannot be written (here a file-size limit, as a
// full disk) leaves the chart that was there, and no temporary file: the SVG was truncated
// when its surface was made and the PNG written in place, so the old chart was lost.
TEST(Plot, AChartThatCannotBeWrittenKeepsTheOldOne) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("tessera_plot_keep_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::vector<train::EpochMetrics> h{{.epoch = 1, .train_loss = 1, .train_acc = 0.5, .seconds = 1}};
  const auto read = [](const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  for (const char* name : {"chart.svg", "chart.png"}) {
    const auto path = dir / name;
    train::plot_history(h, path, {}, "the old chart");
    const std::string old = read(path);
    ASSERT_GT(old.size(), 1000u);
    h.push_back({.epoch = 2, .train_loss = 0.5, .train_acc = 0.7, .seconds = 1});
    rlimit before{};
    ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &before), 0);
    const auto handler = std::signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails, EFBIG
    rlimit small = before;
    small.rlim_cur = 512;
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
    bool threw = false;
    try {
      train::plot_history(h, path, {}, "the new chart");
    } catch (const IOError& e) {
      threw = true;
      EXPECT_NE(std::string(e.what()).find("[plot_history] cannot write"), std::string::npos)
          << e.what();
    }
    setrlimit(RLIMIT_FSIZE, &before);
    std::signal(SIGXFSZ, handler);
    EXPECT_TRUE(threw) << name;
    EXPECT_EQ(read(path), old) << name;
    int files = 0;
    for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir)) ++files;
    EXPECT_EQ(files, 1) << "a temporary file was left beside " << name;
    std::filesystem::remove(path);
  }
  std::filesystem::remove_all(dir);
}

TEST(Plot, PlotsHistoryAsSvgAndPng) {
  // Per process: CTest runs this binary in several configurations at once.
  const auto dir =
      std::filesystem::temp_directory_path() / ("tessera_plot_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::vector<train::EpochMetrics> h;
  for (int e = 1; e <= 4; ++e) {
    h.push_back({.epoch = e,
                 .train_loss = 1.0 / e,
                 .train_acc = 0.5,
                 .val_loss = 1.2 / e,
                 .val_acc = 0.6 + 0.05 * e,
                 .seconds = 1});
  }
  const Tensor steps =
      from_vector(std::vector<float>{1.5, 1.1, 0.9, 0.8, 0.6, 0.5, 0.45, 0.4}, {8});
  train::plot_history(h, dir / "tessera_plot_test.svg", steps, "test chart");
  std::ifstream svg(dir / "tessera_plot_test.svg");
  const std::string text{std::istreambuf_iterator<char>(svg), {}};
  EXPECT_NE(text.find("<svg"), std::string::npos);
  EXPECT_GT(text.size(), 2000u) << "axes, series and legend are drawn";
  train::plot_history(h, dir / "tessera_plot_test.png");
  std::ifstream png(dir / "tessera_plot_test.png", std::ios::binary);
  char sig[8] = {};
  png.read(sig, 8);
  EXPECT_EQ(std::string(sig + 1, 3), "PNG");
  std::filesystem::remove_all(dir);
  testing::expect_throw_with<Error>([&] { train::plot_history(h, dir / "chart.pdf"); },
                                    {".svg or .png"});
  testing::expect_throw_with<IOError>([&] { train::plot_history(h, "/nonexistent-dir/chart.png"); },
                                      {"[plot_history]", "cannot write"});
  // A title Cairo cannot draw is refused before the file is made (it said "cannot write"
  // and left a chart behind).
  const std::filesystem::path bad =
      std::filesystem::temp_directory_path() / "tessera_bad_title.svg";
  std::filesystem::remove(bad);
  testing::expect_throw_with<Error>([&] { train::plot_history(h, bad, {}, "bad \xff title"); },
                                    {"[plot_history] the title is not valid UTF-8"});
  EXPECT_FALSE(std::filesystem::exists(bad));
  train::plot_history(h, bad, {}, "caf\xc3\xa9");  // UTF-8 is drawn
  EXPECT_TRUE(std::filesystem::exists(bad));
  std::filesystem::remove(bad);
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), {}};
}

// The largest x of every "M x y" / "L x y" / "C ..." coordinate pair in the SVG's paths.
double largest_path_x(const std::string& svg) {
  double largest = 0;
  for (std::size_t at = svg.find(" d=\""); at != std::string::npos; at = svg.find(" d=\"", at)) {
    at += 4;
    const std::size_t end = svg.find('"', at);
    std::istringstream path(svg.substr(at, end - at));
    std::string word;
    bool x_next = false;
    while (path >> word) {
      if (std::isalpha(static_cast<unsigned char>(word[0])) != 0) {
        x_next = true;
        continue;
      }
      if (x_next) largest = std::max(largest, std::stod(word));
      x_next = !x_next;
    }
  }
  return largest;
}

TEST(Plot, TinyLossesGetAFewTicksAndAResumedRunStaysOnTheChart) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("tessera_plot_ticks_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const auto history = [](int first, int last, double loss) {
    std::vector<train::EpochMetrics> h;
    for (int e = first; e <= last; ++e) {
      h.push_back({.epoch = e, .train_loss = loss / e, .val_loss = loss, .val_acc = 0.5});
    }
    return h;
  };
  // Ticks were summed up to the top with a fixed 1e-12 of slack: a loss of 1e-22 meant
  // billions of tick labels (a hang), one of 1e-310 a step that never moved the sum.
  train::plot_history(history(1, 3, 1.0), dir / "usual.svg");
  const std::size_t usual = read_file(dir / "usual.svg").size();
  for (const double tiny : {1e-22, 1e-310, 5e-324}) {
    train::plot_history(history(1, 3, tiny), dir / "tiny.svg");
    EXPECT_LT(read_file(dir / "tiny.svg").size(), 2 * usual) << tiny;
  }
  // Epochs 3 to 5 of a run resumed after epoch 2, with their step losses: the x axis runs
  // from 2 to 5, so nothing is drawn right of the chart's 800-pixel width.
  const Tensor steps = from_vector(std::vector<float>{0.9, 0.8, 0.7, 0.6, 0.5, 0.4}, {6});
  train::plot_history(history(3, 5, 1.0), dir / "resumed.svg", steps);
  const double right = largest_path_x(read_file(dir / "resumed.svg"));
  EXPECT_GT(right, 600.0);
  EXPECT_LE(right, 800.0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera
