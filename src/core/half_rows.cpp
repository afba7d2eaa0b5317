// See core/half_rows.h.
#include "core/half_rows.h"

#include "core/convert.h"

namespace tessera::detail {
namespace {

template <typename To, typename From>
void plain_rows(const From* in, To* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = convert_value<To>(in[i]);
}

HalfRowConverters g_half_rows{plain_rows<Float16, float>, plain_rows<float, Float16>,
                              plain_rows<BFloat16, float>, plain_rows<float, BFloat16>};

}  // namespace

void use_half_row_converters(const HalfRowConverters& converters) { g_half_rows = converters; }

const HalfRowConverters& half_rows() { return g_half_rows; }

}  // namespace tessera::detail
