#pragma once
/// Exceptions thrown by tessera. Every user error derives from tessera::Error; its message
/// names the op in brackets, what was expected, what was got, and how to fix it.
#include <stdexcept>
#include <string>

#include "tessera/export.h"

namespace tessera {

/// Base of every user-facing error (bad shape, wrong device, bad dtype, memory, I/O).
class TESSERA_API Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A device that does not exist or cannot be used (no GPU, index out of range, ...).
class TESSERA_API DeviceError : public Error {
 public:
  using Error::Error;
};

/// An op was given tensors that live on different devices. tessera never copies silently.
class TESSERA_API DeviceMismatchError : public DeviceError {
 public:
  using DeviceError::DeviceError;
};

/// Shapes that do not fit the op (broadcasting, matmul inner sizes, bad dims, views).
class TESSERA_API ShapeError : public Error {
 public:
  using Error::Error;
};

/// A dtype the op does not support, or a value that does not fit the requested type.
class TESSERA_API DtypeError : public Error {
 public:
  using Error::Error;
};

/// An index outside the range of the dim it indexes (index_select, index_add, nn::Embedding).
/// Index values live on the device, so this is thrown when the kernel finds one: by the op on
/// the plain CPU, at the next wait for the device (item(), to_vector(), synchronize())
/// elsewhere.
class TESSERA_API IndexError : public Error {
 public:
  using Error::Error;
};

/// A memory request that the device cannot satisfy (its limit or its physical memory).
class TESSERA_API OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

/// A file that cannot be read or written, or whose contents are malformed.
class TESSERA_API IOError : public Error {
 public:
  using Error::Error;
};

/// A value that must be finite is NaN or infinite: a training run whose loss diverged, or
/// parameters holding such values where a checkpoint would be written.
class TESSERA_API NonFiniteError : public Error {
 public:
  using Error::Error;
};

/// A broken invariant inside tessera: a bug in tessera, never in the caller's code.
/// Deliberately not a tessera::Error, so user-error handlers do not swallow it.
class TESSERA_API InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

}  // namespace tessera
