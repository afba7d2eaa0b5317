// Tensor factories. Each resolves its options (default device, float32), allocates on the
// device and fills there; only tensor() and from_vector() carry host data across.
#include "tessera/factories.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "backend/backend.h"
#include "core/check.h"
#include "core/device_rules.h"
#include "core/half.h"
#include "core/scalar_range.h"
#include "core/tensor_impl.h"
#include "ops/random.h"
#include "tessera/autograd.h"
#include "tessera/device_scope.h"
#include "tessera/operators.h"
#include "tessera/ops.h"

namespace tessera {
using detail::make_output;
using detail::make_tensor;

namespace {

Device device_of(const TensorOptions& o) { return o.device.value_or(default_device()); }
Dtype dtype_of_options(const TensorOptions& o, Dtype fallback = kFloat32) {
  return o.dtype.value_or(fallback);
}

// The kernels have no half types: a bfloat16 or float16 factory fills float32 and rounds
// once (Note [Half precision] in ops/half_compute.h).
Dtype kernel_dtype(Dtype d) { return is_half(d) ? kFloat32 : d; }

// Note [Half factories in bounded memory]
// A bfloat16 or float16 factory made a float32 tensor of the whole shape and converted it:
// zeros took 3x the result's memory, rand 7.5x (its float32 draws, their conversion, a mask
// and a where over float32 copies), so a 4 GiB bfloat16 rand ran out of memory where
// PyTorch fits. A filled one now converts one element and broadcasts it with the copy
// kernel; random draws go in pieces of kHalfPiece elements, each converted into its slice
// of the output (element i draws from counter offset + i however the pieces fall, so the
// values are those of one whole draw).
constexpr std::int64_t kHalfPiece = std::int64_t{1} << 22;

Tensor filled(const Shape& shape, double value, const TensorOptions& options, const char* op) {
  const Dtype dtype = dtype_of_options(options);
  detail::check_scalar_fits(op, value, dtype);
  if (is_half(dtype)) {
    NoGradGuard internal;
    Tensor one = make_output({}, kFloat32, device_of(options), op);
    // Rounded once here, so that float32 holds it exactly and .to() keeps it.
    detail::backend_of(one.device()).fill(one, detail::stored_value(value, dtype));
    const Tensor broadcast = one.to(dtype).expand(shape);
    Tensor t = make_output(shape, dtype, one.device(), op);
    detail::backend_of(t.device()).copy(broadcast, t);
    return t;
  }
  Tensor t = make_output(shape, dtype, device_of(options), op);
  detail::backend_of(t.device()).fill(t, value);
  return t;
}

TensorOptions like(const Tensor& t, TensorOptions options, const char* op) {
  detail::check_defined(t, op);
  if (!options.device) options.device = t.device();
  if (!options.dtype) options.dtype = t.dtype();
  return options;
}

// Walks a nested list: records the shape from the first path, checks every other path
// against it, flattens the leaves and notes the widest leaf kind.
void flatten_nested(const NestedList& list, int depth, Shape& shape, bool& shape_known,
                    std::vector<const NestedList*>& out, NestedList::Kind& widest) {
  if (list.kind() != NestedList::Kind::kList) {
    TESSERA_CHECK(!shape_known || depth == shape.size(), ShapeError,
                  "[tensor] the nested list is ragged: a number appears at depth {} but the "
                  "first entries have depth {}",
                  depth, shape.size());
    if (!shape_known) shape_known = true;
    out.push_back(&list);
    if (list.kind() > widest) widest = list.kind();
    return;
  }
  const auto n = static_cast<std::int64_t>(list.items().size());
  if (!shape_known) {
    TESSERA_CHECK(depth < kMaxDims, ShapeError, "[tensor] the nested list is deeper than {} levels",
                  kMaxDims);
    if (shape.size() == depth) shape.push_back(n);
    if (n == 0) shape_known = true;
  }
  TESSERA_CHECK(depth < shape.size(), ShapeError,
                "[tensor] the nested list is ragged: a list appears at depth {} where the first "
                "entries are numbers (depth {}); nest every entry alike",
                depth, shape.size());
  TESSERA_CHECK(shape[depth] == n, ShapeError,
                "[tensor] the nested list is ragged: a list at depth {} has {} entries, expected "
                "{} (every row must have the same length)",
                depth, n, shape[depth]);
  for (const NestedList& item : list.items()) {
    flatten_nested(item, depth + 1, shape, shape_known, out, widest);
  }
}

}  // namespace

long long NestedList::checked_signed(unsigned long long v) {
  TESSERA_CHECK(v <= static_cast<unsigned long long>(std::numeric_limits<std::int64_t>::max()),
                DtypeError,
                "[tensor] the entry {} does not fit int64, the widest integer dtype; pass it as "
                "a double for a floating tensor",
                v);
  return static_cast<long long>(v);
}

Tensor tensor(const NestedList& values, TensorOptions options) {
  Shape shape;
  bool shape_known = false;
  std::vector<const NestedList*> leaves;
  NestedList::Kind widest = NestedList::Kind::kBoolean;
  flatten_nested(values, 0, shape, shape_known, leaves, widest);
  if (leaves.empty() && values.kind() == NestedList::Kind::kList) {
    widest = NestedList::Kind::kFloat;
  }
  const Dtype inferred = widest == NestedList::Kind::kFloat ? kFloat32
                         : widest == NestedList::Kind::kInt ? kInt64
                                                            : kBool;
  if (!options.dtype) options.dtype = inferred;
  detail::check_not_capturing(device_of(options), "tensor", "a copy from the host");
  // Into an integer dtype every entry must fit (converting one that does not is undefined);
  // into a floating one an entry past its range is infinite, as PyTorch's tensor() makes it.
  for (const NestedList* leaf : is_integral(*options.dtype) ? leaves : decltype(leaves){}) {
    if (leaf->kind() == NestedList::Kind::kFloat) {
      detail::check_scalar_fits_integer("tensor", leaf->value(), *options.dtype);
    } else {  // exact: the double may have rounded a large integer into or out of range
      detail::check_integer_fits("tensor", leaf->integer(), *options.dtype);
    }
  }
  // Integers and bools, every bit kept; into an integer dtype also a list with decimals, whose
  // integers went through double before (INT64_MAX became 2^63: wrong, and undefined).
  const bool into_integers = is_integral(*options.dtype);
  if (widest != NestedList::Kind::kFloat || into_integers) {
    std::vector<std::int64_t> flat;
    for (const NestedList* leaf : leaves) {
      flat.push_back(leaf->kind() == NestedList::Kind::kFloat
                         ? static_cast<std::int64_t>(leaf->value())  // fits: checked above
                         : leaf->integer());
    }
    return from_vector(flat.data(), kInt64, flat.size(), shape, options);
  }
  std::vector<double> flat;
  for (const NestedList* leaf : leaves) flat.push_back(leaf->value());
  return from_vector(flat.data(), kFloat64, flat.size(), shape, options);
}

Tensor from_vector(const void* data, Dtype data_dtype, std::size_t count, const Shape& shape,
                   TensorOptions options) {
  TESSERA_CHECK(static_cast<std::int64_t>(count) == shape.numel(), ShapeError,
                "[from_vector] got {} values for shape {}, which holds {}", count, shape.str(),
                shape.numel());
  const Dtype dtype = dtype_of_options(options, data_dtype);
  if (data_dtype == kBool) {
    // Raw bytes handed in as bools must be bools: kernels never see another byte value.
    const auto* bytes = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < count; ++i) {
      TESSERA_CHECK(bytes[i] <= 1, DtypeError,
                    "[from_vector] bool value {} is the byte {}; a bool must be 0 or 1. Convert "
                    "other bytes with (x != 0) before handing them over as bool",
                    i, bytes[i]);
    }
  }
  Tensor t = make_output(shape, data_dtype, device_of(options), "from_vector");
  detail::check_not_capturing(t.device(), "from_vector", "a copy from the host");
  detail::backend_of(t.device()).copy_from_host(data, t);
  detail::count_host_write(t.device(), t.nbytes());
  return t.to(dtype);
}

Tensor empty(const Shape& shape, TensorOptions options) {
  return make_tensor(shape, dtype_of_options(options), device_of(options), "empty");
}
Tensor zeros(const Shape& shape, TensorOptions options) {
  return filled(shape, 0, options, "zeros");
}
Tensor ones(const Shape& shape, TensorOptions options) { return filled(shape, 1, options, "ones"); }
Tensor full(const Shape& shape, double value, TensorOptions options) {
  return filled(shape, value, options, "full");
}
// Errors name the op the user called ("[full_like] the value 1e+19 does not fit int64").
Tensor empty_like(const Tensor& t, TensorOptions o) {
  const TensorOptions options = like(t, o, "empty_like");
  return make_tensor(t.shape(), dtype_of_options(options), device_of(options), "empty_like");
}
Tensor zeros_like(const Tensor& t, TensorOptions o) {
  return filled(t.shape(), 0, like(t, o, "zeros_like"), "zeros_like");
}
Tensor ones_like(const Tensor& t, TensorOptions o) {
  return filled(t.shape(), 1, like(t, o, "ones_like"), "ones_like");
}
Tensor full_like(const Tensor& t, double value, TensorOptions o) {
  return filled(t.shape(), value, like(t, o, "full_like"), "full_like");
}

Tensor arange(Scalar end, TensorOptions options) { return arange(0, end, 1, options); }

namespace {

// arange of integers one of which a double cannot hold (past 2^53), into an integer dtype:
// counted and computed in integers (Note [Scalar promotion] in elementwise.cpp). In double,
// arange(2^53 + 1, 2^53 + 5) began at 2^53 and arange(INT64_MAX - 3, INT64_MAX) was empty.
Tensor arange_exact(std::int64_t start, std::int64_t end, std::int64_t step, Dtype dtype,
                    Device device) {
  TESSERA_CHECK(step != 0, Error, "[arange] needs a non-zero step; got start={}, end={}, step=0",
                start, end);
  const __int128 span = static_cast<__int128>(end) - start;
  TESSERA_CHECK(span == 0 || (span > 0) == (step > 0), Error,
                "[arange] step {} goes away from end: start={}, end={}; flip the step's sign", step,
                start, end);
  const __int128 n128 = span == 0 ? 0 : (span + (step > 0 ? step - 1 : step + 1)) / step;
  // Past 2^53 values (64 PiB of int64s) no tensor holds them; checked before the count is
  // narrowed to int64 (2^63 and more wrapped) and before arange(0, n) below, which would
  // come back here past 2^53.
  TESSERA_CHECK(n128 <= (__int128{1} << 53), OutOfMemoryError,
                "[arange] start={}, end={}, step={} make {} values, more than any tensor holds; "
                "use a larger step or a shorter range",
                start, end, step,
                n128 >= (__int128{1} << 64) ? std::string("2^64")
                                            : std::to_string(static_cast<std::uint64_t>(n128)));
  const auto n = static_cast<std::int64_t>(n128);
  if (n == 0) return make_output({0}, dtype, device, "arange");
  const __int128 offset = static_cast<__int128>(n - 1) * step;  // last - start
  TESSERA_CHECK(offset <= std::numeric_limits<std::int64_t>::max() &&
                    offset >= std::numeric_limits<std::int64_t>::min(),
                Error,
                "[arange] start={}, end={}, step={}: the values span more than int64 holds; "
                "make the range shorter",
                start, end, step);
  detail::check_integer_fits("arange", start, dtype);
  detail::check_integer_fits("arange", static_cast<std::int64_t>(start + offset), dtype);
  // i * step + start, each op exact in int64 (a scalar past 2^53 goes in as a 0-dim tensor).
  const Tensor i = arange(0, n, 1, {kInt64, device});  // n <= 2^53: the double path
  return (i * step + start).to(dtype);
}

}  // namespace

Tensor arange(Scalar start_in, Scalar end_in, Scalar step_in, TensorOptions options) {
  if (start_in.exact_integer() && end_in.exact_integer() && step_in.exact_integer()) {
    constexpr std::int64_t kExact = std::int64_t{1} << 53;
    const auto beyond = [](const Scalar& v) {
      return v.integer() < -kExact || v.integer() > kExact;
    };
    const Dtype dtype = dtype_of_options(options, kInt64);
    if (!is_floating(dtype) && dtype != kBool &&
        (beyond(start_in) || beyond(end_in) || beyond(step_in))) {
      return arange_exact(start_in.integer(), end_in.integer(), step_in.integer(), dtype,
                          device_of(options));
    }
  }
  const double start = start_in.value(), end = end_in.value(), step = step_in.value();
  TESSERA_CHECK(
      step != 0 && std::isfinite(start) && std::isfinite(end) && std::isfinite(step), Error,
      "[arange] needs finite start, end and a non-zero step; got start={}, end={}, step={}", start,
      end, step);
  TESSERA_CHECK((end - start) * step >= 0, Error,
                "[arange] step {} goes away from end: start={}, end={}; flip the step's sign", step,
                start, end);
  // As PyTorch: int64 when every argument was written as an integer (arange(5.0) is float32).
  const bool integral = start_in.integral() && end_in.integral() && step_in.integral();
  const bool whole =
      start == std::floor(start) && end == std::floor(end) && step == std::floor(step);
  const double count = std::ceil((end - start) / step);
  // Converted only when it fits: arange(1e300) converted 1e300 to int64 (undefined) and
  // reported a negative size.
  TESSERA_CHECK(count < 9.2e18, OutOfMemoryError,
                "[arange] start={}, end={}, step={} make {} values, more than any tensor holds; "
                "use a larger step or a shorter range",
                start, end, step, count);
  const auto n = static_cast<std::int64_t>(count);
  const Dtype dtype = dtype_of_options(options, integral ? kInt64 : kFloat32);
  // The first and last values must fit the dtype: an int32 arange past 2^31 converted out
  // of range (undefined; it gave INT_MIN).
  if (n > 0 && !is_floating(dtype)) {
    detail::check_scalar_fits("arange", start, dtype);
    double last = start + static_cast<double>(n - 1) * step;
    if (whole && n > 1) {
      // In int64, as the kernels count: in double 2^63 - 1 rounds up to 2^63, past int64.
      std::int64_t exact = 0;
      TESSERA_CHECK(std::abs(step) < 9.2e18 &&
                        !__builtin_mul_overflow(n - 1, static_cast<std::int64_t>(step), &exact) &&
                        !__builtin_add_overflow(exact, static_cast<std::int64_t>(start), &exact),
                    Error,
                    "[arange] start={}, end={}, step={} run past int64's range; use a shorter "
                    "range",
                    start, end, step);
      if (dtype == kInt64)
        last = start;  // every value between two int64s fits
      else
        last = static_cast<double>(exact);  // exact below 2^53, and narrower types fit there
    }
    detail::check_scalar_fits("arange", last, dtype);
  }
  Tensor t = make_output({n}, kernel_dtype(dtype), device_of(options), "arange");
  detail::backend_of(t.device()).arange(t, start, step);
  return t.to(dtype);
}

namespace {

// The largest value of the half dtype `dtype` below `high`.
double largest_below(double high, Dtype dtype) {
  const bool bf16 = dtype == kBFloat16;
  const auto value = [&](std::uint16_t bits) {
    return static_cast<double>(bf16 ? detail::bfloat16_bits_to_float(bits)
                                    : detail::float16_bits_to_float(bits));
  };
  const auto f = static_cast<float>(high);
  std::uint16_t bits = bf16 ? detail::float_to_bfloat16_bits(f) : detail::float_to_float16_bits(f);
  while (value(bits) >= high) {  // one step toward -inf (sign and magnitude)
    const bool zero = (bits & 0x7fff) == 0;
    bits = zero ? 0x8001 : (bits & 0x8000) ? bits + 1 : bits - 1;
  }
  return value(bits);
}

// Random draws are floating: checked before the ranges, whose messages assume it.
Dtype floating_draw_dtype(const TensorOptions& options, const char* op) {
  const Dtype dtype = dtype_of_options(options);
  TESSERA_CHECK(is_floating(dtype), DtypeError,
                "[{}] draws floating-point values; got dtype {}. Use a floating dtype and "
                "convert with .to() if needed",
                op, dtype_name(dtype));
  return dtype;
}

Tensor random_tensor(const Shape& shape, detail::RandomKind kind, double a, double b,
                     TensorOptions options, const char* op) {
  const Dtype dtype = floating_draw_dtype(options, op);
  detail::check_not_capturing(device_of(options), op, "drawing random numbers");
  const bool uniform = kind == detail::RandomKind::kUniform;
  if (uniform) {  // uniform(-1e5, 1e5) in float16 drew -inf
    detail::check_scalar_fits(op, a, dtype);
    detail::check_scalar_fits(op, b, dtype);
  }
  Tensor t = make_output(shape, dtype, device_of(options), op);
  const std::int64_t n = t.numel();
  const auto [seed, offset] = detail::reserve_random(static_cast<std::uint64_t>(n));
  if (!is_half(dtype)) {
    detail::backend_of(t.device()).random(t, kind, a, b, seed, offset);
    return t;
  }
  // In pieces: Note [Half factories in bounded memory].
  NoGradGuard internal;
  const Tensor flat = t.view({n});
  for (std::int64_t start = 0; start < n; start += kHalfPiece) {
    const std::int64_t length = std::min(kHalfPiece, n - start);
    const Tensor draws = make_output({length}, kFloat32, t.device(), op);
    detail::backend_of(t.device())
        .random(draws, kind, a, b, seed, offset + static_cast<std::uint64_t>(start));
    Tensor rounded = draws.to(dtype);
    if (uniform) {
      // Rounded to nearest, a float32 draw just below `b` becomes `b` (0.2% of bfloat16
      // rand() values were 1.0, and a dropout mask drawn so kept too few): those take the
      // value below `b` (PyTorch's bfloat16 rand also tops out at 255/256). Every other draw
      // keeps the format's precision: small values too (a grid of k / 256 had no value in
      // (0, 1/256)).
      rounded = where(rounded >= b, largest_below(b, dtype), rounded);
    }
    detail::backend_of(t.device()).copy(rounded, flat.narrow(0, start, length));
  }
  return t;
}

}  // namespace

Tensor rand(const Shape& shape, TensorOptions options) {
  return random_tensor(shape, detail::RandomKind::kUniform, 0, 1, options, "rand");
}
Tensor randn(const Shape& shape, TensorOptions options) {
  return random_tensor(shape, detail::RandomKind::kNormal, 0, 1, options, "randn");
}
Tensor uniform(const Shape& shape, double low, double high, TensorOptions options) {
  const Dtype d = floating_draw_dtype(options, "uniform");
  TESSERA_CHECK(low < high, Error, "[uniform] needs low < high; got low={}, high={}", low, high);
  // low + (high - low) * u: a span past the dtype's range fills inf (or NaN).
  const double most = d == kFloat64 ? std::numeric_limits<double>::max()
                                    : static_cast<double>(std::numeric_limits<float>::max());
  TESSERA_CHECK(std::isfinite(low) && std::isfinite(high) && high - low <= most, Error,
                "[uniform] the range [{}, {}) spans more than {} holds (high - low = {}); "
                "choose a narrower range",
                low, high, dtype_name(d), high - low);
  return random_tensor(shape, detail::RandomKind::kUniform, low, high, options, "uniform");
}
Tensor normal(const Shape& shape, double mean, double stddev, TensorOptions options) {
  TESSERA_CHECK(stddev >= 0, Error, "[normal] needs stddev >= 0; got {}", stddev);
  return random_tensor(shape, detail::RandomKind::kNormal, mean, stddev, options, "normal");
}

}  // namespace tessera
