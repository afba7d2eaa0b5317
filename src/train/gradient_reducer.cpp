// See Note [Gradient buckets] in gradient_reducer.h.
#include "train/gradient_reducer.h"

#include "core/check.h"
#include "tessera/autograd.h"
#include "tessera/factories.h"

namespace tessera::train {

GradientReducer::GradientReducer(std::vector<std::vector<Tensor>> params,
                                 AllReduceSum all_reduce_sum, std::size_t bucket_bytes)
    : params_(std::move(params)), all_reduce_sum_(std::move(all_reduce_sum)) {
  TESSERA_INTERNAL_ASSERT(!params_.empty(), "a reducer needs replicas");
  const std::vector<Tensor>& first = params_.front();
  std::size_t bytes = 0;
  for (std::size_t p = first.size(); p-- > 0;) {
    const Tensor& t = first[p];
    const bool fits = !buckets_.empty() && bytes + t.nbytes() <= bucket_bytes &&
                      first[buckets_.back().slots.front().param].dtype() == t.dtype();
    if (!fits) {
      buckets_.emplace_back();
      bytes = 0;
    }
    Bucket& b = buckets_.back();
    const std::int64_t offset =
        b.slots.empty() ? 0 : b.slots.back().offset + b.slots.back().numel;
    b.slots.push_back({p, offset, t.numel()});
    bytes += t.nbytes();
  }
  for (Bucket& b : buckets_) {
    const std::int64_t numel = b.slots.back().offset + b.slots.back().numel;
    const Tensor& like = first[b.slots.front().param];
    for (const std::vector<Tensor>& replica : params_) {
      b.flat.push_back(empty({numel}, {like.dtype(), replica.front().device()}));
    }
  }
}

void GradientReducer::reduce() {
  NoGradGuard no_grad;
  for (Bucket& b : buckets_) {
    for (std::size_t r = 0; r < params_.size(); ++r) {
      for (const Slot& s : b.slots) {
        Tensor slice = b.flat[r].narrow(0, s.offset, s.numel);
        const Tensor g = params_[r][s.param].grad();
        if (g.defined()) {
          slice.copy_(g.reshape({s.numel}));
        } else {
          slice.zero_();
        }
      }
    }
    all_reduce_sum_(b.flat);
    for (std::size_t r = 0; r < params_.size(); ++r) {
      for (const Slot& s : b.slots) {
        Tensor param = params_[r][s.param];
        param.set_grad(b.flat[r].narrow(0, s.offset, s.numel).view(param.shape()));
      }
    }
  }
}

}  // namespace tessera::train
