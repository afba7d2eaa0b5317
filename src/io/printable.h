#pragma once
// Text from a file (a tensor name, a metadata key, a path) made safe to put in an error
// message: a control character printed raw could move the cursor, clear the terminal or
// forge a line of output.
#include <string>
#include <string_view>

namespace tessera::io {

// `s` with printable ASCII and well-formed UTF-8 kept as they are, and every control
// character (C0, DEL, C1) and every byte that is not UTF-8 written as \xNN (C1 characters as
// \u0080 to \u009f). A backslash stays a backslash.
std::string printable(std::string_view s);

// Whether `s` holds a control character (C0, DEL or C1).
bool has_control_character(std::string_view s);

}  // namespace tessera::io
