#include "train/state_metadata.h"

#include <charconv>

#include "core/check.h"
#include "io/printable.h"

namespace tessera::train {

std::uint64_t metadata_count(const char* op, const std::filesystem::path& file,
                             const std::map<std::string, std::string>& metadata,
                             const std::string& key, std::uint64_t max) {
  const auto it = metadata.find(key);
  TESSERA_CHECK(it != metadata.end(), Error,
                "[{}] {} has no '{}' metadata, which a training-state file keeps; the file is "
                "damaged or was not written by save_training_state",
                op, io::printable(file.string()), io::printable(key));
  const std::string& text = it->second;
  std::uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  const bool digits_only =
      !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  TESSERA_CHECK(digits_only && error == std::errc() && stop == end && value <= max, Error,
                "[{}] {}'s '{}' metadata is '{}', not a whole number from 0 to {}; the file is "
                "damaged or was not written by save_training_state",
                op, io::printable(file.string()), io::printable(key), io::printable(text), max);
  return value;
}

}  // namespace tessera::train
