#include "bench/method.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>

#include "tessera/error.h"
#include "tessera/version.h"
#include "timing.h"  // bench/timing.h: Note [Timing], shared with bench/

namespace tessera::tools::bench {
namespace {

namespace timing = ::tessera::bench;

Timing from(const timing::Timing& t) { return {t.median, t.min, t.inner}; }

}  // namespace

Timing time_calls(const std::function<void()>& call, const std::function<void()>& wait,
                  double target_s, int reps) {
  // One timed call after the warm-up sizes `inner`; the device is idle before each.
  const double one = std::max(timing::time_calls(3, 1, 1, call, wait).median, 1e-9);
  const int inner = static_cast<int>(std::clamp(std::round(target_s / one), 1.0, 1000.0));
  return from(timing::time_calls(0, reps, inner, call, wait));
}

Timing time_runs(const std::function<void()>& run, int reps) {
  return from(timing::time_calls(1, reps, 1, run, [] {}));
}

void Report::note(const std::string& text) {
  notes.push_back(text);
  std::cout << "note: " << text << std::endl;
}

void Report::write_json(const std::filesystem::path& path) const {
  Json doc;
  doc["framework"] = "tessera";
  doc["version"] = kVersion;
  doc["devices"] = devices;
  doc["notes"] = notes;
  doc["rows"] = rows;
  std::ofstream out(path);
  out << doc.dump(1) << "\n";
  if (!out) throw IOError(fmt::format("[bench] cannot write '{}'", path.string()));
}

void Report::write_csv(const std::filesystem::path& path) const {
  std::vector<std::string> columns;
  for (const Json& row : rows) {
    for (const auto& [key, value] : row.items()) {
      if (std::find(columns.begin(), columns.end(), key) == columns.end()) columns.push_back(key);
    }
  }
  std::ofstream out(path);
  for (std::size_t i = 0; i < columns.size(); ++i) out << (i ? "," : "") << columns[i];
  out << "\n";
  for (const Json& row : rows) {
    for (std::size_t i = 0; i < columns.size(); ++i) {
      if (i) out << ",";
      if (!row.contains(columns[i]) || row[columns[i]].is_null()) continue;
      const Json& v = row[columns[i]];
      std::string text;
      if (v.is_array()) {  // e.g. the two devices of a parallel row: "cuda:0 cuda:1"
        for (const Json& e : v) {
          if (!text.empty()) text += ' ';
          text += e.is_string() ? e.get<std::string>() : e.dump();
        }
      } else {
        text = v.is_string() ? v.get<std::string>() : v.dump();
      }
      if (text.find_first_of(",\"") == std::string::npos) {
        out << text;
      } else {  // RFC 4180: quote, doubling inner quotes
        out << '"';
        for (char ch : text) out << (ch == '"' ? "\"\"" : std::string(1, ch));
        out << '"';
      }
    }
    out << "\n";
  }
  if (!out) throw IOError(fmt::format("[bench] cannot write '{}'", path.string()));
}

std::string format_seconds(double s) {
  if (!std::isfinite(s)) return "-";
  if (s < 1e-3) return fmt::format("{:.3g} us", s * 1e6);
  if (s < 1) return fmt::format("{:.3g} ms", s * 1e3);
  return fmt::format("{:.3g} s", s);
}

}  // namespace tessera::tools::bench
