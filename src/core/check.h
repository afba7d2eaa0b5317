#pragma once
// Error helpers. TESSERA_CHECK is for user errors (throws a tessera::Error subclass whose
// message the caller formats); TESSERA_INTERNAL_ASSERT is for tessera's own invariants.
#include <fmt/format.h>

#include "tessera/error.h"

#define TESSERA_CHECK(cond, ErrorType, ...)                   \
  do {                                                        \
    if (!(cond)) [[unlikely]] {                               \
      throw ::tessera::ErrorType(::fmt::format(__VA_ARGS__)); \
    }                                                         \
  } while (false)

#define TESSERA_INTERNAL_ASSERT(cond, ...)                                                        \
  do {                                                                                            \
    if (!(cond)) [[unlikely]] {                                                                   \
      throw ::tessera::InternalError(                                                             \
          ::fmt::format("internal error at {}:{}: {} ({}). Please report this as a tessera bug.", \
                        __FILE__, __LINE__, #cond, ::fmt::format("" __VA_ARGS__)));               \
    }                                                                                             \
  } while (false)
