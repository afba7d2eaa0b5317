#include "ops/layer_dtypes.h"

#include <fmt/format.h>

#include "core/check.h"
#include "core/code_names.h"

namespace tessera::detail {

void check_layer_dtypes(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  TESSERA_CHECK(
      weight.dtype() == x.dtype() && (!bias.defined() || bias.dtype() == x.dtype()), DtypeError,
      "[{}] input, weight and bias must share one dtype, got input {}, weight {}{}; "
      "convert the odd one out, e.g. with .to({}) (a layer's parameters with layer.to({}))",
      op, dtype_name(x.dtype()), dtype_name(weight.dtype()),
      bias.defined() ? fmt::format(", bias {}", dtype_name(bias.dtype())) : std::string(),
      detail::dtype_code(weight.dtype()), detail::dtype_code(weight.dtype()));
}

}  // namespace tessera::detail
