// randint: integers drawn on the device by one kernel (philox.h's uniform_int), so the same
// seed gives the same values on every device kind.
#include "backend/backend.h"
#include "core/check.h"
#include "core/device_rules.h"
#include "core/tensor_impl.h"
#include "ops/random.h"
#include "tessera/device_scope.h"
#include "tessera/factories.h"

namespace tessera {

Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape, TensorOptions options) {
  TESSERA_CHECK(low < high, Error,
                "[randint] needs low < high, got low={}, high={}: the range [low, high) is empty",
                low, high);
  const Dtype dtype = options.dtype.value_or(kInt64);
  TESSERA_CHECK(dtype == kInt64, DtypeError,
                "[randint] draws int64 values; got dtype {}. Leave the dtype out and convert the "
                "result with .to()",
                dtype_name(dtype));
  const Device device = options.device.value_or(default_device());
  detail::check_not_capturing(device, "randint", "drawing random numbers");
  Tensor t = detail::make_output(shape, kInt64, device, "randint");
  const auto [seed, offset] = detail::reserve_random(static_cast<std::uint64_t>(t.numel()));
  if (t.numel() > 0) {
    // high - low in uint64: the whole int64 range is a span of 2^64 - 1, which int64 overflows.
    const std::uint64_t span = static_cast<std::uint64_t>(high) - static_cast<std::uint64_t>(low);
    detail::backend_of(device).random_int(t, low, span, seed, offset);
  }
  return t;
}

Tensor randint(std::int64_t high, const Shape& shape, TensorOptions options) {
  return randint(0, high, shape, options);
}

}  // namespace tessera
