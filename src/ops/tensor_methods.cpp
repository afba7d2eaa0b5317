// The method forms of ops.h (x.sum(), x.matmul(y), ...): each forwards to the free function,
// so checks, errors and autograd are the op's own.
#include "tessera/ops.h"
#include "tessera/tensor.h"

namespace tessera {

Tensor Tensor::sum() const { return tessera::sum(*this); }
Tensor Tensor::sum(const std::vector<int>& dims, bool keepdim) const {
  return tessera::sum(*this, dims, keepdim);
}
Tensor Tensor::mean() const { return tessera::mean(*this); }
Tensor Tensor::mean(const std::vector<int>& dims, bool keepdim) const {
  return tessera::mean(*this, dims, keepdim);
}
Tensor Tensor::max() const { return tessera::max(*this); }
Tensor Tensor::max(const std::vector<int>& dims, bool keepdim) const {
  return tessera::max(*this, dims, keepdim);
}
Tensor Tensor::min() const { return tessera::min(*this); }
Tensor Tensor::min(const std::vector<int>& dims, bool keepdim) const {
  return tessera::min(*this, dims, keepdim);
}
Tensor Tensor::argmax() const { return tessera::argmax(*this); }
Tensor Tensor::argmax(int dim, bool keepdim) const { return tessera::argmax(*this, dim, keepdim); }
Tensor Tensor::argmin() const { return tessera::argmin(*this); }
Tensor Tensor::argmin(int dim, bool keepdim) const { return tessera::argmin(*this, dim, keepdim); }
Tensor Tensor::norm() const { return tessera::norm(*this); }
Tensor Tensor::matmul(const Tensor& other) const { return tessera::matmul(*this, other); }
Tensor Tensor::pow(Scalar exponent) const { return tessera::pow(*this, exponent); }
Tensor Tensor::neg() const { return tessera::neg(*this); }
Tensor Tensor::exp() const { return tessera::exp(*this); }
Tensor Tensor::log() const { return tessera::log(*this); }
Tensor Tensor::sqrt() const { return tessera::sqrt(*this); }
Tensor Tensor::abs() const { return tessera::abs(*this); }
Tensor Tensor::relu() const { return tessera::relu(*this); }
Tensor Tensor::sigmoid() const { return tessera::sigmoid(*this); }
Tensor Tensor::tanh() const { return tessera::tanh(*this); }
Tensor Tensor::softmax(int dim) const { return tessera::softmax(*this, dim); }
Tensor Tensor::log_softmax(int dim) const { return tessera::log_softmax(*this, dim); }
Tensor Tensor::diag() const { return tessera::diag(*this); }
Tensor Tensor::trace() const { return tessera::trace(*this); }
std::vector<Tensor> Tensor::split(std::int64_t split_size, int dim) const {
  return tessera::split(*this, split_size, dim);
}
std::vector<Tensor> Tensor::split(const std::vector<std::int64_t>& sizes, int dim) const {
  return tessera::split(*this, sizes, dim);
}
std::vector<Tensor> Tensor::chunk(std::int64_t chunks, int dim) const {
  return tessera::chunk(*this, chunks, dim);
}

Tensor Tensor::index_select(int dim, const Tensor& index) const {
  return tessera::index_select(*this, dim, index);
}
Tensor Tensor::index_add(int dim, const Tensor& index, const Tensor& source) const {
  return tessera::index_add(*this, dim, index, source);
}

}  // namespace tessera
