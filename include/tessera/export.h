#pragma once
/// What the shared library exports. tessera builds with hidden visibility
/// (-fvisibility=hidden -fvisibility-inlines-hidden), so only what carries TESSERA_API is
/// visible to a program: the classes and functions of these public headers. Internals
/// (namespace detail, src/) stay inside the library and cannot clash with a program's own.
#if defined(__GNUC__) || defined(__clang__)
#define TESSERA_API __attribute__((visibility("default")))
/// A member of an exported class that only the library calls (it names internal types).
#define TESSERA_HIDDEN __attribute__((visibility("hidden")))
#else
#define TESSERA_API
#define TESSERA_HIDDEN
#endif
