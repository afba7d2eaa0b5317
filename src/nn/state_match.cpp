#include "nn/state_match.h"

#include <fmt/format.h>

#include <set>

#include "core/check.h"

namespace tessera::detail {

std::vector<std::pair<std::string, Tensor>> match_state(
    const nn::Module& module, const std::map<std::string, StateEntry>& state, bool strict) {
  std::vector<std::pair<std::string, Tensor>> own = module.named_parameters();
  for (auto& entry : module.named_buffers()) own.push_back(std::move(entry));
  std::vector<std::pair<std::string, Tensor>> matched;
  std::vector<std::string> missing, unexpected;
  std::set<std::string> own_names;
  for (const auto& [name, t] : own) {
    own_names.insert(name);
    auto it = state.find(name);
    if (it == state.end()) {
      missing.push_back(name);
      continue;
    }
    TESSERA_CHECK(it->second.shape == t.shape(), ShapeError,
                  "[load_state_dict] {} has shape {} in the module but {} in the state dict; the "
                  "state dict belongs to a differently configured model",
                  name, t.shape().str(), it->second.shape.str());
    TESSERA_CHECK(is_floating(it->second.dtype) == is_floating(t.dtype()), DtypeError,
                  "[load_state_dict] {} is {} in the module but {} in the state dict", name,
                  dtype_name(t.dtype()), dtype_name(it->second.dtype));
    matched.emplace_back(name, t);
  }
  for (const auto& [name, entry] : state) {
    if (!own_names.contains(name)) unexpected.push_back(name);
  }
  if (strict && (!missing.empty() || !unexpected.empty())) {
    auto join = [](const std::vector<std::string>& v) {
      std::string s;
      for (const auto& n : v) s += (s.empty() ? "" : ", ") + n;
      return s.empty() ? std::string("none") : s;
    };
    throw Error(fmt::format(
        "[load_state_dict] the state dict does not match {}: missing {}; unexpected {}. Pass "
        "strict=false to load the names that match",
        module.path(), join(missing), join(unexpected)));
  }
  return matched;
}

}  // namespace tessera::detail
