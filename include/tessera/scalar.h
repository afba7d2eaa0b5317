#pragma once
/// Scalar: a C++ number given to an op with a tensor (x + 1, x * 0.5, pow(x, 2)). Whether it
/// was written as an integer or as a floating value decides the result's dtype, as in
/// PyTorch: an integer scalar keeps an integer tensor's dtype (int_tensor + 1 is int64 for an
/// int64 tensor; a bool tensor gives int64), a floating one makes it float32
/// (uint8_image - 128.0 is float32, not wrapped uint8). A floating tensor keeps its dtype
/// either way. Comparisons (x == 2.0) compare exactly, whatever the scalar's type.
#include <concepts>

namespace tessera {

class Scalar {
 public:
  template <typename T>
    requires std::integral<T>
  Scalar(T v) : value_(static_cast<double>(v)), integral_(true) {}  // NOLINT: implicit
  template <typename T>
    requires std::floating_point<T>
  Scalar(T v) : value_(static_cast<double>(v)), integral_(false) {}  // NOLINT: implicit

  double value() const { return value_; }
  /// Written as an integer (1, a size_t, true), not as a floating value (1.0).
  bool integral() const { return integral_; }

 private:
  double value_;
  bool integral_;
};

}  // namespace tessera
