#pragma once
// How `tessera bench` measures, and where its numbers go. bench/peers/pytorch_exercises.py
// measures PyTorch the same way, so the two JSON files pair up (bench/exercises/compare.py).
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::tools::bench {

using Json = nlohmann::ordered_json;

struct Timing {
  double median = 0;  // seconds per call
  double min = 0;
  int inner = 0;  // calls per repetition
};

// Note [Timing] in bench/timing.h, with `inner` sized here: warm-up (3 calls, then wait), one
// timed call to size `inner` so that a repetition takes about `target_s` (1 to 1000 calls),
// then `reps` repetitions of `inner` calls followed by `wait`; the median and minimum over
// repetitions of (repetition time / inner).
Timing time_calls(const std::function<void()>& call, const std::function<void()>& wait,
                  double target_s, int reps);

// A whole run timed as one (Note [Timing], inner 1): one warm-up run, then `reps` runs;
// median and minimum seconds.
Timing time_runs(const std::function<void()>& run, int reps);

// What one `tessera bench` run measured: flat rows, written as JSON and CSV.
struct Report {
  Json devices = Json::array();
  std::vector<std::string> notes;
  std::vector<Json> rows;
  int failures = 0;  // result checks that failed (the exit status is then 1)

  void note(const std::string& text);  // kept, and printed at once
  void write_json(const std::filesystem::path& path) const;
  // One column per key seen in any row, in order of first appearance.
  void write_csv(const std::filesystem::path& path) const;
};

// Options and outputs shared by the exercises.
struct Context {
  Report report;
  bool quick = false;
  int max_n_cpu = 4096;
  std::filesystem::path out_dir;   // JSON, CSV and charts
  std::filesystem::path temp_dir;  // the checkpoint file
  std::string chart_ext = ".svg";
  double target_s() const { return quick ? 0.01 : 0.02; }
  int reps() const { return quick ? 3 : 5; }
  std::filesystem::path chart(const std::string& name) const {
    return out_dir / (name + chart_ext);
  }
};

// "12.3 us", "4.56 ms", "1.2 s".
std::string format_seconds(double s);

}  // namespace tessera::tools::bench
