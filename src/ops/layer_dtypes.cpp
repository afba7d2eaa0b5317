#include "ops/layer_dtypes.h"

#include <fmt/format.h>

#include "core/check.h"
#include "core/code_names.h"

namespace tessera::detail {

void check_layer_dtypes(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const Dtype xd = x.dtype(), wd = weight.dtype();
  const bool bias_agrees = !bias.defined() || bias.dtype() == xd;
  if (wd == xd && bias_agrees) [[likely]]
    return;
  // Name the one to convert and the dtype to convert it to (the advice used to be the
  // weight's dtype always, which left an odd weight as it was).
  std::string fix;
  if (wd != xd && (!bias.defined() || bias.dtype() == wd)) {
    fix = fmt::format("convert the input with .to({}), or the layer's parameters with .to({})",
                      dtype_code(wd), dtype_code(xd));
  } else if (wd != xd) {
    fix = fmt::format("convert the weight with .to({})", dtype_code(xd));
    if (!bias_agrees) fix += fmt::format(" and the bias with .to({})", dtype_code(xd));
  } else {
    fix = fmt::format("convert the bias with .to({})", dtype_code(xd));
  }
  throw DtypeError(fmt::format(
      "[{}] input, weight and bias must share one dtype, got input {}, "
      "weight {}{}; {}",
      op, dtype_name(xd), dtype_name(wd),
      bias.defined() ? fmt::format(", bias {}", dtype_name(bias.dtype())) : std::string(), fix));
}

}  // namespace tessera::detail
