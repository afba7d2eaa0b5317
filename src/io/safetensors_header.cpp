// The safetensors header: read, parsed and checked before any tensor data is read.
#include "io/safetensors_header.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include <fmt/format.h>

#include "io/files.h"
#include "io/parallel_read.h"
#include "io/printable.h"
#include "tessera/error.h"
#include "tessera/safetensors.h"

// Note [Parsing the header]
// The header is parsed event by event (nlohmann's SAX interface) straight into the entries,
// never into a JSON document, and each event is checked against the one shape the format
// allows: an object of tensors ({"dtype": string, "shape": [n...], "data_offsets": [a, b]})
// and "__metadata__" (an object of strings). Anything else is refused at the token where it
// appears, so nesting never goes deeper than three levels and refusing a 100 MB header of
// nested arrays costs reading it, not the 4 GB and 15 s a document of it took. Refused too:
// a NUL byte (the JSON parser would stop there and ignore what follows; the format pads with
// spaces), a key given twice (a document keeps the last silently), an unknown field in a
// tensor, and tensor names that are empty or hold control characters. Names and keys in
// messages go through io::printable, so no control character reaches a terminal raw.

namespace tessera::io {
namespace {

using Json = nlohmann::json;

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& what) {
  throw IOError(fmt::format("[load_safetensors] '{}': {}", printable(path.string()), what));
}

class HeaderParser {
 public:
  HeaderParser(const std::filesystem::path& path, SafetensorsLayout& out)
      : path_(path), out_(out) {}

  // The SAX interface: each returns true to go on; a refusal throws.
  bool null() {
    // "__metadata__": null is no metadata: PyPI's safetensors reads it so (its field is
    // optional), and other writers emit it.
    if (at_ == At::kMetadataValue) {
      at_ = At::kHeader;
      return true;
    }
    return scalar("null");
  }
  bool boolean(bool) { return scalar("a boolean"); }
  bool number_integer(Json::number_integer_t) { return number(false, 0); }
  bool number_unsigned(Json::number_unsigned_t v) { return number(true, v); }
  bool number_float(Json::number_float_t, const std::string&) { return number(false, 0); }
  bool binary(Json::binary_t&) { return scalar("binary data"); }
  bool string(std::string& s);
  bool start_object(std::size_t);
  bool key(std::string& k);
  bool end_object();
  bool start_array(std::size_t);
  bool end_array();
  bool parse_error(std::size_t, const std::string&, const Json::exception& e) {
    fail(path_, "the header is not valid JSON: " + printable(e.what()));
  }

 private:
  enum class At {
    kStart,           // before the header's object
    kHeader,          // in it: a tensor name, "__metadata__" or its end
    kTensorValue,     // after a tensor's name
    kMetadataValue,   // after "__metadata__"
    kTensor,          // in a tensor's object: a field name or its end
    kField,           // after a field name
    kShape,           // in a shape array
    kOffsets,         // in a data_offsets array
    kMetadata,        // in __metadata__: a key or its end
    kMetadataString,  // after a metadata key
    kEnd,             // after the header's object
  };
  enum class Field { kDtype, kShape, kOffsets };

  [[noreturn]] void refuse(const std::string& what) const { fail(path_, what); }
  std::string tensor() const { return "tensor '" + printable(name_) + "'"; }
  [[noreturn]] void needs_fields() const {
    refuse(tensor() + " needs a dtype string, a shape array and two data_offsets");
  }
  // A value of a kind that fits nowhere in the format (null, a boolean, or a nested
  // array/object where none may be), described by `what`.
  bool scalar(const char* what);
  bool number(bool non_negative, std::uint64_t value);
  void finish_tensor();

  const std::filesystem::path& path_;
  SafetensorsLayout& out_;
  At at_ = At::kStart;
  std::set<std::string> names_;  // every key of the header's object, to refuse duplicates
  std::string name_;             // the tensor (or metadata key) being read
  Field field_ = Field::kDtype;
  bool has_dtype_ = false, has_shape_ = false, has_offsets_ = false;
  std::string dtype_;
  Shape shape_;
  std::uint64_t numel_ = 1;
  std::vector<std::uint64_t> offsets_;
};

bool HeaderParser::scalar(const char* what) {
  switch (at_) {
    case At::kStart:
      refuse("the header is not a JSON object");
    case At::kTensorValue:
      needs_fields();
    case At::kMetadataValue:
      refuse("__metadata__ is not an object of strings");
    case At::kMetadataString:
      refuse("__metadata__." + printable(name_) + " is not a string (metadata values are strings)");
    case At::kField:
      if (field_ == Field::kDtype) refuse(tensor() + " has a dtype that is not a string");
      needs_fields();
    case At::kShape:
      refuse(tensor() + " has a shape entry that is not a non-negative integer");
    case At::kOffsets:
      refuse(tensor() + " has data_offsets that are not non-negative integers");
    default:  // the parser never gives a value where a key is due
      refuse(fmt::format("the header holds {} where the format has none", what));
  }
}

bool HeaderParser::number(bool non_negative, std::uint64_t value) {
  if (at_ == At::kShape && non_negative) {
    if (shape_.size() == static_cast<std::size_t>(kMaxDims)) {
      refuse(fmt::format("{} has more than {} dims; tessera holds at most {}", tensor(), kMaxDims,
                         kMaxDims));
    }
    constexpr std::uint64_t kAbsurd = std::uint64_t{1} << 48;
    if (value > kAbsurd || (value > 0 && numel_ > kAbsurd / value)) {
      refuse(tensor() + " has an absurd shape (over 2^48 elements)");
    }
    shape_.push_back(static_cast<std::int64_t>(value));
    numel_ *= value;
    return true;
  }
  if (at_ == At::kOffsets && non_negative) {
    if (offsets_.size() == 2) refuse(tensor() + " has more than two data_offsets");
    offsets_.push_back(value);
    return true;
  }
  return scalar("a number");
}

bool HeaderParser::string(std::string& s) {
  if (at_ == At::kMetadataString) {
    out_.metadata.emplace(std::move(name_), std::move(s));
    at_ = At::kMetadata;
    return true;
  }
  if (at_ == At::kField && field_ == Field::kDtype) {
    dtype_ = std::move(s);
    at_ = At::kTensor;
    return true;
  }
  return scalar("a string");
}

bool HeaderParser::start_object(std::size_t) {
  switch (at_) {
    case At::kStart:
      at_ = At::kHeader;
      return true;
    case At::kMetadataValue:
      at_ = At::kMetadata;
      return true;
    case At::kTensorValue:
      at_ = At::kTensor;
      has_dtype_ = has_shape_ = has_offsets_ = false;
      shape_ = Shape();
      numel_ = 1;
      offsets_.clear();
      return true;
    default:
      return scalar("an object");
  }
}

bool HeaderParser::start_array(std::size_t) {
  if (at_ == At::kField && field_ == Field::kShape) {
    at_ = At::kShape;
    return true;
  }
  if (at_ == At::kField && field_ == Field::kOffsets) {
    at_ = At::kOffsets;
    return true;
  }
  return scalar("an array");
}

bool HeaderParser::end_array() {
  at_ = At::kTensor;  // the parser ends only arrays it started: shape or data_offsets
  return true;
}

bool HeaderParser::key(std::string& k) {
  if (at_ == At::kHeader) {
    if (!names_.insert(k).second) {
      refuse(
          fmt::format("the header names '{}' twice; each tensor (and __metadata__) appears "
                      "once",
                      printable(k)));
    }
    if (k == "__metadata__") {
      at_ = At::kMetadataValue;
      return true;
    }
    if (k.empty()) refuse("a tensor has an empty name; every tensor needs a name");
    if (has_control_character(k)) {
      refuse(
          fmt::format("tensor name '{}' holds a control character; tessera refuses such "
                      "names (they would reach terminals raw). Rename the tensor",
                      printable(k)));
    }
    name_ = std::move(k);
    at_ = At::kTensorValue;
    return true;
  }
  if (at_ == At::kMetadata) {
    if (out_.metadata.contains(k)) {
      refuse(fmt::format("__metadata__ names '{}' twice; each key appears once", printable(k)));
    }
    name_ = std::move(k);
    at_ = At::kMetadataString;
    return true;
  }
  // In a tensor's object: one of its three fields, each once.
  bool* seen = k == "dtype"          ? &has_dtype_
               : k == "shape"        ? &has_shape_
               : k == "data_offsets" ? &has_offsets_
                                     : nullptr;
  if (seen == nullptr) {
    refuse(fmt::format("{} has a field '{}'; a tensor has dtype, shape and data_offsets only",
                       tensor(), printable(k)));
  }
  if (*seen) refuse(fmt::format("{} gives {} twice", tensor(), k));
  *seen = true;
  field_ = k == "dtype" ? Field::kDtype : k == "shape" ? Field::kShape : Field::kOffsets;
  at_ = At::kField;
  return true;
}

bool HeaderParser::end_object() {
  if (at_ == At::kTensor) {
    finish_tensor();
    at_ = At::kHeader;
  } else if (at_ == At::kMetadata) {
    at_ = At::kHeader;
  } else {
    at_ = At::kEnd;
  }
  return true;
}

void HeaderParser::finish_tensor() {
  if (!has_dtype_ || !has_shape_ || !has_offsets_ || offsets_.size() != 2) needs_fields();
  const auto d = std::find_if(std::begin(kSafetensorsDtypes), std::end(kSafetensorsDtypes),
                              [&](const SafetensorsDtypeName& x) { return dtype_ == x.name; });
  if (d == std::end(kSafetensorsDtypes)) {
    refuse(
        fmt::format("{} has dtype {}, which tessera cannot hold (it holds BOOL, U8, I32, I64, "
                    "F32, F64, BF16, F16); convert the tensor to one of those where the file "
                    "was written (in PyTorch: .to(torch.int32) or .float()) and save it again",
                    tensor(), printable(dtype_)));
  }
  const std::uint64_t begin = offsets_[0], end = offsets_[1];
  const std::uint64_t bytes = numel_ * itemsize(d->dtype);
  if (end < begin) {
    refuse(
        fmt::format("{} has data_offsets [{}, {}], which end before they begin; the file is "
                    "damaged or was not written by a safetensors writer",
                    tensor(), begin, end));
  }
  if (end - begin != bytes) {
    refuse(fmt::format("{} ({} {}) needs {} bytes but its data_offsets [{}, {}] span {}", tensor(),
                       dtype_, shape_.str(), bytes, begin, end, end - begin));
  }
  out_.entries.push_back({name_, d->dtype, shape_, begin, end});
}

}  // namespace

SafetensorsLayout read_safetensors_layout(int fd, const std::filesystem::path& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    fail(path, std::string("cannot read its size: ") + std::strerror(errno));
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size < 8) {
    fail(path, fmt::format("is {} bytes, too short for a safetensors file (the header length "
                           "alone takes 8)",
                           size));
  }
  unsigned char len_bytes[8];
  read_span(fd, {0, 8, reinterpret_cast<char*>(len_bytes)}, path, "load_safetensors");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n > kMaxSafetensorsHeader) {
    fail(path, fmt::format("declares a {}-byte header, over the limit of {} bytes (the reference "
                           "implementation's); the file is corrupt or not safetensors",
                           n, kMaxSafetensorsHeader));
  }
  if (n > size - 8) {
    fail(path, fmt::format("declares a {}-byte header, but the file has {} bytes after the "
                           "length; the file is truncated or not safetensors",
                           n, size - 8));
  }
  std::string text(n, '\0');
  read_span(fd, {8, static_cast<std::size_t>(n), text.data()}, path, "load_safetensors");
  if (const std::size_t nul = text.find('\0'); nul != std::string::npos) {
    fail(path, fmt::format("the header holds a NUL byte at offset {} of {}; a header is JSON text, "
                           "padded with spaces only",
                           nul, n));
  }
  SafetensorsLayout layout;
  layout.data_start = 8 + n;
  HeaderParser parser(path, layout);
  Json::sax_parse(text, &parser);  // throws at the first problem (Note [Parsing the header])

  // The byte ranges must tile the data section exactly: no gap, no overlap, nothing past it.
  std::vector<const SafetensorsEntry*> by_offset;
  by_offset.reserve(layout.entries.size());
  for (const SafetensorsEntry& e : layout.entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const auto* a, const auto* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  std::uint64_t at = 0;
  for (const SafetensorsEntry* e : by_offset) {
    if (e->begin != at) {
      fail(path, fmt::format("tensor '{}' starts at byte {} of the data, expected {} (the byte "
                             "ranges overlap or leave a gap)",
                             printable(e->name), e->begin, at));
    }
    at = e->end;
  }
  if (layout.data_start + at != size) {
    fail(path, fmt::format("the tensors cover {} bytes of data but the file holds {} after the "
                           "header; the file is truncated or has trailing bytes",
                           at, size - layout.data_start));
  }
  return layout;
}

}  // namespace tessera::io

namespace tessera {

SafetensorsHeader read_safetensors_header(const std::filesystem::path& path) {
  const int fd = io::open_for_reading(path, "load_safetensors");
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close_it{fd};
  io::SafetensorsLayout layout = io::read_safetensors_layout(fd, path);
  SafetensorsHeader out;
  out.metadata = std::move(layout.metadata);
  for (io::SafetensorsEntry& e : layout.entries) {
    out.tensors.emplace(std::move(e.name), SafetensorsTensorInfo{e.dtype, e.shape, e.begin, e.end});
  }
  return out;
}

}  // namespace tessera
