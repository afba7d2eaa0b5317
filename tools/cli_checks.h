#pragma once
// Option checks that say what was wrong in words: CLI11's Range said "Value 1.5 not in
// range 0 to 100000" for a number that is in range but not whole, and let NaN through.
#include <CLI/CLI.hpp>

namespace tessera::cli {

// A whole number (digits, an optional sign) from `lo` to `hi`, rewritten in plain decimal:
// give it with ->transform(), not ->check(), so that "010" is read as 10 (CLI11 reads a
// leading 0 as octal).
CLI::Validator whole_number_in(long long lo, long long hi);
// A number, NaN excluded, from `lo` to `hi`.
CLI::Validator number_in(double lo, double hi);

}  // namespace tessera::cli
