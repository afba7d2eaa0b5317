// See Note [Gradient buckets] in gradient_reducer.h.
#include "train/gradient_reducer.h"

#include "core/check.h"
#include "tessera/autograd.h"
#include "tessera/factories.h"

namespace tessera::train {

GradientReducer::GradientReducer(std::vector<std::vector<Tensor>> params,
                                 AllReduceSum all_reduce_sum, std::size_t bucket_bytes,
                                 AgreeUsed agree_used)
    : params_(std::move(params)),
      all_reduce_sum_(std::move(all_reduce_sum)),
      agree_used_(std::move(agree_used)) {
  TESSERA_INTERNAL_ASSERT(!params_.empty(), "a reducer needs replicas");
  const std::vector<Tensor>& first = params_.front();
  std::size_t bytes = 0;
  for (std::size_t p = first.size(); p-- > 0;) {
    const Tensor& t = first[p];
    const bool alone = t.nbytes() >= kInPlaceBytes;  // Note [Gradients reduced in place]
    const bool fits = !buckets_.empty() && !alone && !buckets_.back().in_place &&
                      bytes + t.nbytes() <= bucket_bytes &&
                      first[buckets_.back().slots.front().param].dtype() == t.dtype();
    if (!fits) {
      buckets_.emplace_back();
      buckets_.back().in_place = alone;
      bytes = 0;
    }
    Bucket& b = buckets_.back();
    const std::int64_t offset = b.slots.empty() ? 0 : b.slots.back().offset + b.slots.back().numel;
    b.slots.push_back({p, offset, t.numel()});
    bytes += t.nbytes();
  }
  bucket_of_.resize(first.size());
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = buckets_[i];
    const std::int64_t numel = b.slots.back().offset + b.slots.back().numel;
    const Tensor& like = first[b.slots.front().param];
    for (const std::vector<Tensor>& replica : params_) {
      b.own.push_back(empty({numel}, {like.dtype(), replica.front().device()}));
    }
    b.flat = b.own;
    for (const Slot& s : b.slots) bucket_of_[s.param] = i;
  }
  reset();
  for (std::size_t r = 0; r < params_.size(); ++r) {
    for (std::size_t p = 0; p < params_[r].size(); ++p) {
      set_grad_ready_hook(params_[r][p], [this, r, p](const Tensor&) { mark_ready(r, p); });
    }
  }
}

GradientReducer::~GradientReducer() {
  for (const std::vector<Tensor>& replica : params_) {
    for (const Tensor& p : replica) set_grad_ready_hook(p, {});
  }
}

void GradientReducer::reset() {
  for (Bucket& b : buckets_) {
    b.waiting.assign(params_.size(), b.slots.size());
    b.filled = 0;
    b.launched = false;
  }
  launched_in_backward_ = 0;
  used_.assign(params_.front().size(), 0);
}

void GradientReducer::mark_ready(std::size_t replica, std::size_t param) {
  Bucket& b = buckets_[bucket_of_[param]];
  if (b.waiting[replica] == 0) return;  // filled already (a second backward this step)
  if (--b.waiting[replica] > 0) return;
  fill(b, replica);
  if (b.filled == params_.size()) {
    launch(b);
    ++launched_in_backward_;
  }
}

std::size_t GradientReducer::in_place_buckets() const {
  std::size_t n = 0;
  for (const Bucket& b : buckets_) n += b.in_place ? 1 : 0;
  return n;
}

void GradientReducer::fill(Bucket& b, std::size_t replica) {
  NoGradGuard no_grad;
  b.flat[replica] = b.own[replica];
  if (b.in_place) {
    const Tensor& param = params_[replica][b.slots.front().param];
    const Tensor g = param.grad();
    if (g.defined()) used_[b.slots.front().param] = 1;
    if (g.defined() && g.is_contiguous() && g.dtype() == param.dtype()) {
      b.flat[replica] = g.view({b.slots.front().numel});  // summed where it lies
      b.waiting[replica] = 0;
      ++b.filled;
      return;
    }
  }
  for (const Slot& s : b.slots) {
    Tensor slice = b.flat[replica].narrow(0, s.offset, s.numel);
    const Tensor g = params_[replica][s.param].grad();
    if (g.defined()) {
      used_[s.param] = 1;
      slice.copy_(g.reshape({s.numel}));
    } else {
      slice.zero_();
    }
  }
  b.waiting[replica] = 0;
  ++b.filled;
}

void GradientReducer::launch(Bucket& b) {
  NoGradGuard no_grad;
  all_reduce_sum_(b.flat);
  b.launched = true;
}

void GradientReducer::reduce() {
  for (Bucket& b : buckets_) {
    if (b.launched) continue;
    for (std::size_t r = 0; r < params_.size(); ++r) {
      if (b.waiting[r] > 0) fill(b, r);
    }
    launch(b);
  }
  // The grads are set once every parameter's use is known (Note [Gradient buckets]); a
  // recorded step keeps the uses agreed while it was recorded (the exchange is host work).
  if (agree_used_ && !used_.empty()) agree_used_(used_);
  NoGradGuard no_grad;
  for (Bucket& b : buckets_) {
    for (std::size_t r = 0; r < params_.size(); ++r) {
      for (const Slot& s : b.slots) {
        Tensor param = params_[r][s.param];
        param.set_grad(used_[s.param] != 0
                           ? b.flat[r].narrow(0, s.offset, s.numel).view(param.shape())
                           : Tensor());
      }
    }
  }
  overlapped_ = launched_in_backward_;
  reset();
}

}  // namespace tessera::train
