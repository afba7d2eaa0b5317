// The input dtype check of the layers with parameters.
#include "nn/layer_input.h"

#include <fmt/format.h>

#include "core/code_names.h"
#include "tessera/autocast.h"
#include "tessera/error.h"

namespace tessera::nn {

void check_input_dtype(const Module& m, const Tensor& x, Dtype params) {
  const auto castable = [](Dtype d) { return d == kFloat32 || is_half(d); };
  const bool autocast =
      autocast_dtype(x.device().kind()).has_value() && castable(x.dtype()) && castable(params);
  if (x.dtype() != params && !autocast) {
    // A model converts to floating dtypes only: for an integer input the input must move.
    const std::string model_too =
        is_floating(x.dtype())
            ? fmt::format(" or the model with .to({})", detail::dtype_code(x.dtype()))
            : std::string();
    throw DtypeError(fmt::format(
        "[{}] {} has {} parameters but the input is {}; convert the input with .to({}){}",
        m.type_name(), m.path(), dtype_name(params), dtype_name(x.dtype()),
        detail::dtype_code(params), model_too));
  }
}

}  // namespace tessera::nn
