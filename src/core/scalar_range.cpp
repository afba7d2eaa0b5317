#include "core/scalar_range.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "core/check.h"
#include "core/half.h"
#include "tessera/dtype.h"

namespace tessera::detail {
namespace {

// The range of an integer dtype, as integers and as the doubles (lo, hi) whose whole part
// (truncated toward zero) fits.
struct IntegerRange {
  std::int64_t min, max;
  double lo, hi;  // exclusive
  const char* text;
};

IntegerRange range_of(Dtype dtype) {
  switch (dtype) {
    case kUInt8:
      return {0, 255, -1.0, 256.0, "0 to 255"};
    case kInt32:
      return {INT32_MIN, INT32_MAX, -2147483649.0, 2147483648.0, "-2147483648 to 2147483647"};
    default:  // int64: -2^63 itself fits, and 2^63 is the first double past the largest
      return {INT64_MIN, INT64_MAX, std::nextafter(-9223372036854775808.0, -INFINITY),
              9223372036854775808.0, "-2^63 to 2^63 - 1"};
  }
}

// Whether `op` makes a tensor (its dtype is an option to ask for), rather than combining a
// value with a tensor that exists (which .to() converts). A factory told users to convert a
// tensor it had not made.
bool is_factory(const char* op) {
  for (const char* factory : {"tensor", "full", "zeros", "ones", "arange", "uniform", "rand",
                              "randn", "normal", "full_like"}) {
    if (std::strcmp(op, factory) == 0) return true;
  }
  return false;
}

// "ask for kInt64 or kFloat64 in its options", "convert the tensor with .to(kFloat64)".
std::string wider_dtype_fix(const char* op, Dtype dtype) {
  const bool integer = !is_floating(dtype) && dtype != kInt64;
  if (is_factory(op)) {
    return fmt::format("ask for a wider dtype in its options ({}kFloat64)",
                       integer ? "kInt64 or " : "");
  }
  return fmt::format("use a wider dtype (convert the tensor with {}.to(kFloat64))",
                     integer ? ".to(kInt64) or " : "");
}

[[noreturn]] void refuse(const char* op, const std::string& value, Dtype dtype,
                         const IntegerRange& r) {
  throw DtypeError(fmt::format("[{}] the value {} does not fit {} ({}); {}", op, value,
                               dtype_name(dtype), r.text, wider_dtype_fix(op, dtype)));
}

// The smallest magnitude that rounds to infinity in a floating dtype: its largest finite
// value plus half a step there (a tie rounds to the even neighbour, infinity).
double overflow_at(Dtype dtype) {
  switch (dtype) {
    case kFloat16:
      return 65520.0;
    case kBFloat16:
      return std::ldexp(2.0 - std::ldexp(1.0, -7), 127) + std::ldexp(1.0, 119);
    case kFloat32:
      return std::ldexp(2.0 - std::ldexp(1.0, -23), 127) + std::ldexp(1.0, 103);
    default:
      return std::numeric_limits<double>::infinity();
  }
}

}  // namespace

void check_scalar_fits_integer(const char* op, double value, Dtype dtype) {
  if (dtype == kBool || is_floating(dtype)) return;
  const IntegerRange r = range_of(dtype);
  if (!(value > r.lo && value < r.hi)) refuse(op, fmt::format("{}", value), dtype, r);
}

void check_integer_fits(const char* op, std::int64_t value, Dtype dtype) {
  if (dtype == kBool || is_floating(dtype)) return;
  const IntegerRange r = range_of(dtype);
  if (value < r.min || value > r.max) refuse(op, fmt::format("{}", value), dtype, r);
}

void check_scalar_fits(const char* op, double value, Dtype dtype) {
  check_scalar_fits_integer(op, value, dtype);
  if (!is_floating(dtype) || !std::isfinite(value)) return;
  TESSERA_CHECK(std::abs(value) < overflow_at(dtype), DtypeError,
                "[{}] the value {} does not fit {}: it would round to infinity; {}", op, value,
                dtype_name(dtype), wider_dtype_fix(op, dtype));
}

double stored_value(double value, Dtype dtype) {
  switch (dtype) {
    case kFloat32:
      return static_cast<float>(value);
    case kBFloat16:
      return static_cast<float>(BFloat16(double_to_float_round_odd(value)));
    case kFloat16:
      return static_cast<float>(Float16(double_to_float_round_odd(value)));
    default:
      return value;
  }
}

}  // namespace tessera::detail
