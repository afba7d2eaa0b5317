#pragma once
/// Element types.
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string_view>
#include <type_traits>

#include "tessera/export.h"

namespace tessera {

/// The element types. bfloat16 (8-bit exponent, 7-bit mantissa) and float16 (IEEE binary16)
/// are storage types: ops on them compute and accumulate in float32 and round the result
/// to the nearest even half-precision value. A float64 value converted to a half type goes
/// through float32, as in PyTorch, so a value a float32 rounds onto a tie between two half
/// values can round to the farther one (one unit in the last place).
enum class Dtype : std::uint8_t {
  kBool,
  kUInt8,
  kInt32,
  kInt64,
  kFloat32,
  kFloat64,
  kBFloat16,
  kFloat16
};

inline constexpr Dtype kBool = Dtype::kBool;
inline constexpr Dtype kUInt8 = Dtype::kUInt8;
inline constexpr Dtype kInt32 = Dtype::kInt32;
inline constexpr Dtype kInt64 = Dtype::kInt64;
inline constexpr Dtype kFloat32 = Dtype::kFloat32;
inline constexpr Dtype kFloat64 = Dtype::kFloat64;
inline constexpr Dtype kBFloat16 = Dtype::kBFloat16;
inline constexpr Dtype kFloat16 = Dtype::kFloat16;

/// Bytes per element.
constexpr std::size_t itemsize(Dtype dtype) {
  switch (dtype) {
    case Dtype::kBool:
    case Dtype::kUInt8:
      return 1;
    case Dtype::kBFloat16:
    case Dtype::kFloat16:
      return 2;
    case Dtype::kInt32:
    case Dtype::kFloat32:
      return 4;
    case Dtype::kInt64:
    case Dtype::kFloat64:
      return 8;
  }
  return 0;
}

/// bfloat16 or float16: a 2-byte floating type that ops compute in float32.
constexpr bool is_half(Dtype d) { return d == Dtype::kBFloat16 || d == Dtype::kFloat16; }
constexpr bool is_floating(Dtype d) {
  return d == Dtype::kFloat32 || d == Dtype::kFloat64 || is_half(d);
}
constexpr bool is_integral(Dtype d) { return !is_floating(d) && d != Dtype::kBool; }

/// "float32", "int64", "bfloat16", "float16", ...
TESSERA_API std::string_view dtype_name(Dtype dtype);
TESSERA_API std::ostream& operator<<(std::ostream& os, Dtype dtype);

/// The dtype both operands of a binary op are converted to: the larger of the two, where a
/// floating type beats any integer type and bool is the smallest (NumPy/PyTorch style);
/// a half type beats integers, loses to float32 and float64, and bfloat16 with float16
/// gives float32 (neither holds the other).
TESSERA_API Dtype promote_types(Dtype a, Dtype b);

/// The C++ type of each dtype, and the dtype of each C++ type.
template <typename T>
struct DtypeOf;
template <>
struct DtypeOf<bool> {
  static constexpr Dtype value = kBool;
};
template <>
struct DtypeOf<std::uint8_t> {
  static constexpr Dtype value = kUInt8;
};
template <>
struct DtypeOf<std::int32_t> {
  static constexpr Dtype value = kInt32;
};
template <>
struct DtypeOf<std::int64_t> {
  static constexpr Dtype value = kInt64;
};
template <>
struct DtypeOf<float> {
  static constexpr Dtype value = kFloat32;
};
template <>
struct DtypeOf<double> {
  static constexpr Dtype value = kFloat64;
};
// `long long` where std::int64_t is `long` (Linux): the same 64 bits, another C++ type, so
// from_vector(std::vector<long long>) and to_vector<long long>() work too.
template <typename T>
  requires(std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) == 8 &&
           !std::is_same_v<T, std::int64_t>)
struct DtypeOf<T> {
  static constexpr Dtype value = kInt64;
};
template <typename T>
inline constexpr Dtype dtype_of = DtypeOf<T>::value;

}  // namespace tessera
