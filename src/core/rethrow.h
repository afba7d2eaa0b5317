#pragma once
// Rethrowing an error with more said, as the same tessera error type.
#include <exception>
#include <functional>
#include <string>

namespace tessera::detail {

// Rethrows `error` with the message `reword(what())` as the same tessera error type (a
// caller's catch (const ShapeError&) still matches), or unchanged when it is no
// tessera::Error (std::bad_alloc, an internal error).
[[noreturn]] void rethrow_reworded(const std::exception_ptr& error,
                                   const std::function<std::string(const std::string&)>& reword);

}  // namespace tessera::detail
