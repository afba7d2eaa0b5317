#pragma once
// Whether a C++ scalar (every scalar arrives as double) has a value in a dtype: converting
// one that does not is undefined for integers (full({2}, 300, kUInt8) gave 44) and overflows
// floats to infinity.
#include <cstdint>

#include "tessera/dtype.h"

namespace tessera::detail {

// DtypeError naming `op` unless `value` converts to `dtype` without overflow: for integer
// dtypes, a finite value whose whole part is in the dtype's range; for floating dtypes, a
// value that is infinite or NaN itself or whose conversion stays finite. Any value fits
// bool (non-zero is true).
void check_scalar_fits(const char* op, double value, Dtype dtype);
// The same for integer dtypes only: a scalar combined with a tensor (x < 1e300 compares in
// float32 as well as PyTorch does, but an int32 tensor cannot hold 3e9).
void check_scalar_fits_integer(const char* op, double value, Dtype dtype);
// The same for an exact integer (a literal past 2^53, which no double holds).
void check_integer_fits(const char* op, std::int64_t value, Dtype dtype);
// The value a floating `dtype` holds for `value`, rounded once to nearest even (for the
// half types straight from the double, not through float32 first); `value` for others.
double stored_value(double value, Dtype dtype);

}  // namespace tessera::detail
