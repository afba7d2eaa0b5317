#pragma once
/// Scalar: a C++ number given to an op with a tensor (x + 1, x * 0.5, pow(x, 2)). Whether it
/// was written as an integer or as a floating value decides the result's dtype, as in
/// PyTorch: an integer scalar keeps an integer tensor's dtype (int_tensor + 1 is int64 for an
/// int64 tensor; a bool tensor gives int64), a floating one makes it float32
/// (uint8_image - 128.0 is float32, not wrapped uint8), and a bool scalar keeps a bool
/// tensor bool (mask * false). A floating tensor keeps its dtype either way. Integers keep
/// every bit (a 64-bit constant past 2^53 too). Comparisons go by the scalar's value,
/// whatever its type: against an integer or bool tensor exactly (int64 x == 2^53 + 1;
/// x < 2.5 is x <= 2; uint8 x < 256 is true), against a floating tensor in its dtype, the
/// scalar rounded to it first as in PyTorch (float32 x == 0.1 is x == 0.1f).
#include <concepts>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace tessera {

class Scalar {
 public:
  enum class Kind { kBoolean, kInteger, kFloating };

  Scalar(bool v) : value_(v ? 1.0 : 0.0), integer_(v ? 1 : 0), kind_(Kind::kBoolean) {}  // NOLINT
  template <typename T>
    requires(std::integral<T> && !std::same_as<T, bool>)
  Scalar(T v) : value_(static_cast<double>(v)), kind_(Kind::kInteger) {  // NOLINT: implicit
    if constexpr (std::is_signed_v<T>) {
      integer_ = static_cast<std::int64_t>(v);
      exact_ = true;
    } else {
      exact_ = static_cast<unsigned long long>(v) <=
               static_cast<unsigned long long>(std::numeric_limits<std::int64_t>::max());
      integer_ = exact_ ? static_cast<std::int64_t>(v) : 0;
    }
  }
  template <typename T>
    requires std::floating_point<T>
  Scalar(T v) : value_(static_cast<double>(v)), kind_(Kind::kFloating) {}  // NOLINT: implicit
  /// An unscoped enum's constant (enum { kBatch = 32 }) is the integer it stands for.
  template <typename T>
    requires(std::is_enum_v<T> && std::is_convertible_v<T, std::underlying_type_t<T>>)
  Scalar(T v) : Scalar(static_cast<std::underlying_type_t<T>>(v)) {}  // NOLINT: implicit

  /// Anything else that converts to a number: a std::atomic<int> or another wrapper of an
  /// integer type (value_type) is that integer, a type with operator double() a floating value.
  template <typename T>
    requires(!std::is_arithmetic_v<T> && !std::is_enum_v<T> &&
             std::is_convertible_v<const T&, double>)
  Scalar(const T& v) : Scalar(converted(v)) {}  // NOLINT: implicit

  double value() const { return value_; }
  Kind kind() const { return kind_; }
  /// Written as an integer or a bool (1, a size_t, true), not as a floating value (1.0).
  bool integral() const { return kind_ != Kind::kFloating; }
  /// An integral scalar's value, every bit of it, when it fits int64 (exact_integer()).
  std::int64_t integer() const { return integer_; }
  bool exact_integer() const { return integral() && exact_; }

 private:
  template <typename T>
  static auto converted(const T& v) {
    if constexpr (requires { typename T::value_type; }) {
      if constexpr (std::is_arithmetic_v<typename T::value_type>) {
        return static_cast<typename T::value_type>(v);
      } else {
        return static_cast<double>(v);
      }
    } else {
      return static_cast<double>(v);
    }
  }

  double value_;
  std::int64_t integer_ = 0;
  Kind kind_;
  bool exact_ = true;
};

}  // namespace tessera
