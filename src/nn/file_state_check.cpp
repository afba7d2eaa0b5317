#include "nn/file_state_check.h"

#include <fmt/format.h>

#include <string_view>

#include "io/printable.h"
#include "tessera/error.h"

namespace tessera::nn {
namespace {

// The message of load_state_dict's error `what` as `op`'s about `file`.
std::string reworded(const char* op, const std::filesystem::path& file, std::string_view what) {
  constexpr std::string_view kPrefix = "[load_state_dict] ";
  constexpr std::string_view kAdvice = " Pass strict=false to load only the names that match";
  std::string rest(what.substr(what.starts_with(kPrefix) ? kPrefix.size() : 0));
  if (const std::size_t at = rest.find(kAdvice); at != std::string::npos) {
    rest.replace(at, kAdvice.size(), " The file was saved from another model");
  }
  constexpr std::string_view kDict = "the state dict";
  for (std::size_t at = rest.find(kDict); at != std::string::npos; at = rest.find(kDict, at)) {
    rest.replace(at, kDict.size(), "the file");
  }
  return fmt::format("[{}] '{}': {}", op, io::printable(file.string()), rest);
}

}  // namespace

void check_file_state(const char* op, const std::filesystem::path& file, const Module& module,
                      const std::map<std::string, Module::TensorLayout>& layouts) {
  try {
    module.check_state_dict(layouts);
  } catch (const ShapeError& e) {
    throw ShapeError(reworded(op, file, e.what()));
  } catch (const DtypeError& e) {
    throw DtypeError(reworded(op, file, e.what()));
  } catch (const Error& e) {
    throw Error(reworded(op, file, e.what()));
  }
}

}  // namespace tessera::nn
