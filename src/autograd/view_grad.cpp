// Backward formulas of views and copies: a view's gradient goes back to its base's shape.
#include "autograd/formulas.h"
#include "autograd/record.h"
#include "tessera/factories.h"
#include "tessera/operators.h"

namespace tessera::detail {

void record_reshape(const char* name, const Tensor& a, const Tensor& out) {
  const Shape in = a.shape();
  record(name, out, {&a}, [in](const Tensor& g) { return std::vector<Tensor>{g.reshape(in)}; });
}

void record_permute(const Tensor& a, const std::vector<int>& dims, const Tensor& out) {
  Shape inverse;
  inverse.resize(static_cast<int>(dims.size()));
  const int n = static_cast<int>(dims.size());
  for (int i = 0; i < n; ++i) inverse[dims[i] < 0 ? dims[i] + n : dims[i]] = i;
  record("permute", out, {&a},
         [inverse](const Tensor& g) { return std::vector<Tensor>{g.permute(inverse)}; });
}

void record_subview(const char* name, const Tensor& a, const Tensor& out,
                    std::function<Tensor(const Tensor&)> same_view) {
  const Shape in = a.shape();
  const TensorOptions options(a.dtype(), a.device());
  record(name, out, {&a}, [in, options, same_view](const Tensor& g) {
    Tensor base = zeros(in, options);
    Tensor view = same_view(base);
    view.copy_(g);
    return std::vector<Tensor>{base};
  });
}

void record_expand(const Tensor& a, const Tensor& out) {
  const Shape in = a.shape();
  record("expand", out, {&a}, [in](const Tensor& g) { return std::vector<Tensor>{sum_to(g, in)}; });
}

void record_copy(const char* name, const Tensor& a, const Tensor& out) {
  const Device device = a.device();
  const Dtype dtype = a.dtype();
  record(name, out, {&a}, [device, dtype](const Tensor& g) {
    // The gradient goes back to where the input lives: the explicit copy's reverse.
    return std::vector<Tensor>{g.to(device).to(dtype)};
  });
}

void record_cat(const std::vector<Tensor>& inputs, int dim, const Tensor& out) {
  std::vector<const Tensor*> pointers;
  std::vector<std::int64_t> starts;  // where each input begins along dim; the last is the end
  pointers.reserve(inputs.size());
  starts.reserve(inputs.size() + 1);
  std::int64_t start = 0;
  for (const Tensor& t : inputs) {
    pointers.push_back(&t);
    starts.push_back(start);
    start += t.size(dim);
  }
  starts.push_back(start);
  record("cat", out, pointers, [dim, starts = std::move(starts)](const Tensor& g) {
    // Views of g, not copies: the engine copies a gradient it keeps when others can see it.
    std::vector<Tensor> grads;
    grads.reserve(starts.size() - 1);
    for (std::size_t i = 0; i + 1 < starts.size(); ++i) {
      grads.push_back(g.narrow(dim, starts[i], starts[i + 1] - starts[i]));
    }
    return grads;
  });
}

}  // namespace tessera::detail
