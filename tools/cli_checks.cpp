#include "cli_checks.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <string>

namespace tessera::cli {

CLI::Validator whole_number_in(long long lo, long long hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        long long v = 0;
        const char* end = text.data() + text.size();
        const char* begin = text.data() + (!text.empty() && text[0] == '+' ? 1 : 0);
        const auto [stop, error] = std::from_chars(begin, end, v);
        if (text.empty() || error != std::errc() || stop != end || v < lo || v > hi) {
          return fmt::format("must be a whole number from {} to {}, got {}", lo, hi, text);
        }
        // The value as checked, in plain decimal: CLI11 converts with strtoll's base 0, which
        // read "010" as 8 (--epochs 010 trained 8 epochs).
        text = std::to_string(v);
        return "";
      },
      fmt::format("INT in [{} - {}]", lo, hi));
}

CLI::Validator number_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        char* stop = nullptr;
        const double v = std::strtod(text.c_str(), &stop);
        if (text.empty() || *stop != '\0' || !(v >= lo && v <= hi)) {  // NaN fails
          return fmt::format("must be a number from {} to {}, got {}", lo, hi, text);
        }
        return "";
      },
      fmt::format("FLOAT in [{} - {}]", lo, hi));
}

}  // namespace tessera::cli
