#include "tessera/shape.h"

#include <ostream>

#include "core/check.h"

namespace tessera {

void Shape::push_back(std::int64_t d) {
  TESSERA_CHECK(size_ < kMaxDims, ShapeError,
                "[Shape] a tensor has at most {} dimensions; a shape of more was built (a "
                "list of {} or more sizes)",
                kMaxDims, kMaxDims + 1);
  dims_[size_++] = d;
}

void Shape::insert(int pos, std::int64_t d) {
  TESSERA_INTERNAL_ASSERT(pos >= 0 && pos <= size_, "insert at {} of {}", pos, size_);
  push_back(0);
  for (int i = size_ - 1; i > pos; --i) dims_[i] = dims_[i - 1];
  dims_[pos] = d;
}

void Shape::erase(int pos) {
  TESSERA_INTERNAL_ASSERT(pos >= 0 && pos < size_, "erase at {} of {}", pos, size_);
  for (int i = pos; i + 1 < size_; ++i) dims_[i] = dims_[i + 1];
  --size_;
}

void Shape::resize(int n, std::int64_t value) {
  TESSERA_CHECK(n >= 0 && n <= kMaxDims, ShapeError,
                "[Shape] a tensor has at most {} dimensions; asked for {}", kMaxDims, n);
  for (int i = size_; i < n; ++i) dims_[i] = value;
  size_ = n;
}

std::int64_t Shape::numel() const {
  for (int i = 0; i < size_; ++i) {
    if (dims_[i] == 0) return 0;  // before any product of the others can overflow
  }
  std::int64_t n = 1;
  for (int i = 0; i < size_; ++i) {
    // Sizes whose product overflows allocate nothing (make_tensor refuses them); saturate
    // rather than run into undefined behaviour.
    if (__builtin_mul_overflow(n, dims_[i], &n)) return INT64_MAX;
  }
  return n;
}

std::string Shape::str() const {
  std::string out = "[";
  for (int i = 0; i < size_; ++i) out += (i ? ", " : "") + std::to_string(dims_[i]);
  return out + "]";
}

std::ostream& operator<<(std::ostream& os, const Shape& shape) { return os << shape.str(); }

}  // namespace tessera
