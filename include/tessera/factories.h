#pragma once
/// Functions that create tensors. Each takes TensorOptions: a device and/or a dtype, e.g.
/// `zeros({2, 3})`, `ones({2, 3}, try_gpu())`, `rand({2, 3}, {kFloat64, cpu(1)})`. Without a
/// device they use default_device() (see DeviceScope). They throw DeviceError when the
/// device does not exist and OutOfMemoryError when it cannot hold the tensor.
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <vector>

#include "tessera/device.h"
#include "tessera/dtype.h"
#include "tessera/export.h"
#include "tessera/shape.h"
#include "tessera/tensor.h"

namespace tessera {

struct TESSERA_API TensorOptions {
  TensorOptions() = default;
  TensorOptions(Device d) : device(d) {}
  TensorOptions(Dtype t) : dtype(t) {}
  TensorOptions(Dtype t, Device d) : device(d), dtype(t) {}
  TensorOptions(Device d, Dtype t) : device(d), dtype(t) {}

  std::optional<Device> device;
  std::optional<Dtype> dtype;
};

/// A nested list of numbers for tensor(): `{1, 2, 3}` or `{{1., 2.}, {3., 4.}}`.
class TESSERA_API NestedList {
 public:
  NestedList(double v) : value_(v), kind_(Kind::kFloat) {}
  NestedList(float v) : value_(v), kind_(Kind::kFloat) {}
  NestedList(int v) : value_(v), integer_(v), kind_(Kind::kInt) {}
  NestedList(long v) : value_(static_cast<double>(v)), integer_(v), kind_(Kind::kInt) {}
  NestedList(long long v) : value_(static_cast<double>(v)), integer_(v), kind_(Kind::kInt) {}
  /// Unsigned entries ({1u}, a size_t) must fit int64 (the widest integer dtype): Error
  /// otherwise.
  NestedList(unsigned v) : NestedList(static_cast<long long>(v)) {}
  NestedList(unsigned long v) : NestedList(checked_signed(v)) {}
  NestedList(unsigned long long v) : NestedList(checked_signed(v)) {}
  NestedList(bool v) : value_(v ? 1.0 : 0.0), integer_(v ? 1 : 0), kind_(Kind::kBoolean) {}
  NestedList(std::initializer_list<NestedList> items) : items_(items), kind_(Kind::kList) {}

  enum class Kind { kBoolean, kInt, kFloat, kList };
  Kind kind() const { return kind_; }
  double value() const { return value_; }
  /// The exact value of an integer or bool entry (value() rounds past 2^53).
  std::int64_t integer() const { return integer_; }
  const std::vector<NestedList>& items() const { return items_; }

 private:
  static long long checked_signed(unsigned long long v);
  double value_ = 0;
  std::int64_t integer_ = 0;
  std::vector<NestedList> items_;
  Kind kind_;
};

/// A tensor from nested lists, like torch.tensor: the dtype is int64 for integers, float32
/// when any entry is floating, bool for bools, unless options say otherwise. Integers keep
/// every bit (2^53 + 1 stays itself). Throws ShapeError for ragged lists, DtypeError for an
/// entry that does not fit the integer dtype the options give (300 in uint8); in a floating
/// dtype an entry past its range is infinite.
TESSERA_API Tensor tensor(const NestedList& values, TensorOptions options = {});

/// A tensor of `shape` holding a copy of `data` (row-major); its dtype is T's unless the
/// options give one. Throws ShapeError when sizes differ, and DtypeError when bool data
/// holds a byte other than 0 or 1.
TESSERA_API Tensor from_vector(const void* data, Dtype data_dtype, std::size_t count,
                               const Shape& shape, TensorOptions options);
template <typename T>
Tensor from_vector(const std::vector<T>& data, const Shape& shape, TensorOptions options = {}) {
  if (!options.dtype) options.dtype = dtype_of<T>;
  return from_vector(data.data(), dtype_of<T>, data.size(), shape, options);
}
/// A 1-D tensor from a vector.
template <typename T>
Tensor from_vector(const std::vector<T>& data, TensorOptions options = {}) {
  return from_vector(data, Shape{static_cast<std::int64_t>(data.size())}, options);
}
/// std::vector<bool> packs its bits (it has no data()): bool tensors from it, a byte each.
inline Tensor from_vector(const std::vector<bool>& data, const Shape& shape,
                          TensorOptions options = {}) {
  const std::vector<std::uint8_t> bytes(data.begin(), data.end());
  if (!options.dtype) options.dtype = kBool;
  return from_vector(bytes.data(), kBool, bytes.size(), shape, options);
}
inline Tensor from_vector(const std::vector<bool>& data, TensorOptions options = {}) {
  return from_vector(data, Shape{static_cast<std::int64_t>(data.size())}, options);
}

/// The n x m identity (ones on the main diagonal; m = n when left out or -1), float32 unless
/// told, made on the device (no copy from the host). Error for a negative n, or m below -1.
TESSERA_API Tensor eye(std::int64_t n, std::int64_t m = -1, TensorOptions options = {});

/// Uninitialized values.
TESSERA_API Tensor empty(const Shape& shape, TensorOptions options = {});
TESSERA_API Tensor zeros(const Shape& shape, TensorOptions options = {});
TESSERA_API Tensor ones(const Shape& shape, TensorOptions options = {});
TESSERA_API Tensor full(const Shape& shape, double value, TensorOptions options = {});
/// Same shape, dtype and device as `t` unless options say otherwise.
TESSERA_API Tensor empty_like(const Tensor& t, TensorOptions options = {});
TESSERA_API Tensor zeros_like(const Tensor& t, TensorOptions options = {});
TESSERA_API Tensor ones_like(const Tensor& t, TensorOptions options = {});
TESSERA_API Tensor full_like(const Tensor& t, double value, TensorOptions options = {});

/// [0, end) and [start, end) by step, 1-D. The dtype defaults to int64 when every argument
/// is written as an integer (scalar.h), else float32: arange(5) is int64, arange(5.0) float32.
/// Throws Error for step 0 or a step of the wrong sign.
TESSERA_API Tensor arange(Scalar end, TensorOptions options = {});
TESSERA_API Tensor arange(Scalar start, Scalar end, Scalar step = 1, TensorOptions options = {});

/// Uniform in [0, 1) and standard normal values from the default generator (manual_seed).
/// Floating dtypes only (DtypeError otherwise).
TESSERA_API Tensor rand(const Shape& shape, TensorOptions options = {});
TESSERA_API Tensor randn(const Shape& shape, TensorOptions options = {});
/// Integers uniform in [low, high) (or [0, high)) from the default generator, int64 (the
/// only dtype: DtypeError for another; convert with .to()). The same seed draws the same
/// values on every device. Throws Error unless low < high.
TESSERA_API Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape,
                           TensorOptions options = {});
TESSERA_API Tensor randint(std::int64_t high, const Shape& shape, TensorOptions options = {});
/// Uniform in [low, high), normal with mean and standard deviation.
TESSERA_API Tensor uniform(const Shape& shape, double low, double high, TensorOptions options = {});
TESSERA_API Tensor normal(const Shape& shape, double mean, double stddev,
                          TensorOptions options = {});

}  // namespace tessera
