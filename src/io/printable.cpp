#include "io/printable.h"

#include <fmt/format.h>

namespace tessera::io {
namespace {

// The length of the well-formed UTF-8 sequence at s[i] (RFC 3629), or 0.
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  std::size_t len = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the range of the second byte
  if (b < 0x80) return 1;
  if (b >= 0xc2 && b <= 0xdf) {
    len = 2;
  } else if (b >= 0xe0 && b <= 0xef) {
    len = 3, lo = b == 0xe0 ? 0xa0 : 0x80, hi = b == 0xed ? 0x9f : 0xbf;
  } else if (b >= 0xf0 && b <= 0xf4) {
    len = 4, lo = b == 0xf0 ? 0x90 : 0x80, hi = b == 0xf4 ? 0x8f : 0xbf;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    const auto c = static_cast<unsigned char>(s[i + k]);
    if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xbf)) return 0;
  }
  return len;
}

bool is_c0_or_del(unsigned char b) { return b < 0x20 || b == 0x7f; }
// U+0080 to U+009F, encoded as C2 80 to C2 9F.
bool is_c1(std::string_view s, std::size_t i, std::size_t len) {
  return len == 2 && static_cast<unsigned char>(s[i]) == 0xc2 &&
         static_cast<unsigned char>(s[i + 1]) <= 0x9f;
}

}  // namespace

std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const std::size_t len = utf8_length(s, i);
    if (len == 0 || (len == 1 && is_c0_or_del(b))) {
      out += fmt::format("\\x{:02x}", b);
      ++i;
    } else if (is_c1(s, i, len)) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(s[i + 1]));
      i += len;
    } else {
      out.append(s.substr(i, len));
      i += len;
    }
  }
  return out;
}

bool has_control_character(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t len = utf8_length(s, i);
    if (len == 0) {  // not UTF-8: not a control character as such
      ++i;
      continue;
    }
    if ((len == 1 && is_c0_or_del(static_cast<unsigned char>(s[i]))) || is_c1(s, i, len)) {
      return true;
    }
    i += len;
  }
  return false;
}

}  // namespace tessera::io
