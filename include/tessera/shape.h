#pragma once
/// Shape: the sizes (or strides) of a tensor, stored inline so that ops on small tensors
/// allocate nothing for their metadata.
#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <string>
#include <vector>

#include "tessera/export.h"

namespace tessera {

/// Most dimensions a tensor may have.
inline constexpr int kMaxDims = 8;

class TESSERA_API Shape {
 public:
  Shape() = default;
  /// Throws ShapeError with more than kMaxDims entries.
  Shape(std::initializer_list<std::int64_t> dims) { assign(dims.begin(), dims.end()); }
  Shape(const std::vector<std::int64_t>& dims) { assign(dims.begin(), dims.end()); }
  template <typename It>
  Shape(It first, It last) {
    assign(first, last);
  }

  int size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::int64_t& operator[](int i) { return dims_[static_cast<std::size_t>(i)]; }
  std::int64_t operator[](int i) const { return dims_[static_cast<std::size_t>(i)]; }
  std::int64_t* begin() { return dims_.data(); }
  std::int64_t* end() { return dims_.data() + size_; }
  const std::int64_t* begin() const { return dims_.data(); }
  const std::int64_t* end() const { return dims_.data() + size_; }
  std::int64_t back() const { return dims_[static_cast<std::size_t>(size_ - 1)]; }
  const std::int64_t* data() const { return dims_.data(); }

  /// Throws ShapeError when full.
  void push_back(std::int64_t d);
  void insert(int pos, std::int64_t d);
  void erase(int pos);
  void resize(int n, std::int64_t value = 0);

  /// Product of the entries (1 for an empty shape).
  std::int64_t numel() const;
  std::vector<std::int64_t> vec() const { return {begin(), end()}; }
  /// "[2, 3]"
  std::string str() const;

  friend bool operator==(const Shape& a, const Shape& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }

 private:
  template <typename It>
  void assign(It first, It last) {
    for (; first != last; ++first) push_back(static_cast<std::int64_t>(*first));
  }

  std::array<std::int64_t, kMaxDims> dims_{};
  int size_ = 0;
};

using Strides = Shape;

TESSERA_API std::ostream& operator<<(std::ostream& os, const Shape& shape);

}  // namespace tessera
