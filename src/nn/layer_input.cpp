// The input dtype check of the layers with parameters.
#include "nn/layer_input.h"

#include <fmt/format.h>

#include "core/code_names.h"
#include "tessera/autocast.h"
#include "tessera/error.h"

namespace tessera::nn {

void check_input_dtype(const Module& m, const Tensor& x, Dtype params, UnderAutocast rule) {
  const auto castable = [](Dtype d) { return d == kFloat32 || is_half(d); };
  const bool autocast_on = autocast_dtype(x.device().kind()).has_value();
  const bool autocast =
      autocast_on && (rule == UnderAutocast::kCastsBoth ? castable(x.dtype()) && castable(params)
                                                        : is_half(x.dtype()) && params == kFloat32);
  if (x.dtype() != params && !autocast) {
    // A model converts to floating dtypes only: for an integer input the input must move.
    const std::string model_too =
        is_floating(x.dtype())
            ? fmt::format(" or the model with .to({})", detail::dtype_code(x.dtype()))
            : std::string();
    // Under autocast the user expects conversions; say which this layer does not make.
    const std::string not_cast =
        autocast_on && rule == UnderAutocast::kWidensHalfInput
            ? ". Autocast does not convert a normalization layer's input: it takes its "
              "parameters' dtype, or a half input with float32 parameters"
            : std::string();
    throw DtypeError(fmt::format(
        "[{}] {} has {} parameters but the input is {}; convert the input with .to({}){}{}",
        m.type_name(), m.path(), dtype_name(params), dtype_name(x.dtype()),
        detail::dtype_code(params), model_too, not_cast));
  }
}

}  // namespace tessera::nn
