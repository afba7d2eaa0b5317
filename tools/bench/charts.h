#pragma once
// The charts of `tessera bench`: a line chart on log axes (matmul speed against size) and a
// grouped bar chart (the other exercises), as SVG or PNG.
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace tessera::tools::bench {

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), both positive
};

// Both axes logarithmic (base 2 for x, 10 for y). IOError when the file cannot be written.
void line_chart(const std::filesystem::path& path, const std::string& title,
                const std::string& x_label, const std::string& y_label,
                const std::vector<Series>& series);

struct BarGroup {
  std::string label;
  std::vector<double> values;  // one per series name; NaN leaves a gap
};

// Groups of bars along x, one color per series, y linear from 0.
void bar_chart(const std::filesystem::path& path, const std::string& title,
               const std::string& y_label, const std::vector<std::string>& series_names,
               const std::vector<BarGroup>& groups);

}  // namespace tessera::tools::bench
