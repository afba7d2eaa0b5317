// The training chart (the tessera::plot library, src/plot/): SVG and PNG files with axes,
// series and a legend, and its errors.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "support/device_test.h"
#include "tessera/train/plot.h"

namespace tessera {
namespace {

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
}

}  // namespace
}  // namespace tessera
