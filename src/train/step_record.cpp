// See Note [Metrics on the device] in trainer.cpp.
#include "train/step_record.h"

#include <algorithm>
#include <limits>

#include "core/check.h"
#include "tessera/autograd.h"
#include "tessera/factories.h"
#include "tessera/sync_guard.h"

namespace tessera::train::loop {

std::pair<double, double> PassTotals::average(const std::vector<PassTotals>& parts,
                                              const ProcessGroup* group) {
  double loss_sum = 0, correct_sum = 0, n = 0, any_correct = 0;
  for (const PassTotals& p : parts) {
    loss_sum += p.loss_sum;
    correct_sum += p.correct_sum;
    n += p.examples;
    any_correct += p.has_correct ? 1 : 0;
  }
  if (group != nullptr) {
    AllowSync deliberate;  // the pass's one exchange between the ranks
    const Tensor all = from_vector(std::vector<double>{loss_sum, correct_sum, n, any_correct}, {4},
                                   {kFloat64, cpu()});
    group->all_reduce(all);
    const std::vector<double> v = all.to_vector<double>();
    loss_sum = v[0], correct_sum = v[1], n = v[2], any_correct = v[3];
  }
  const double count = std::max(n, 1.0);
  return {loss_sum / count,
          any_correct > 0 ? correct_sum / count : std::numeric_limits<double>::quiet_NaN()};
}

void StepRecord::begin(std::int64_t steps) {
  losses_ = zeros({steps}, {kFloat64, device_});
  correct_ = zeros({steps}, {kInt64, device_});
  examples_.clear();
  weights_.clear();
  has_correct_ = false;
}

void StepRecord::add(const StepResult& r, std::int64_t examples, double weight) {
  const auto step = static_cast<std::int64_t>(examples_.size());
  TESSERA_INTERNAL_ASSERT(losses_.defined() && step < losses_.size(0),
                          "StepRecord: step {} of a pass begun for {}", step,
                          losses_.defined() ? losses_.size(0) : 0);
  NoGradGuard no_grad;
  // One-element views: the copies convert the dtype (a float32 loss into float64) and cost
  // one operation each.
  losses_.narrow(0, step, 1).copy_(r.loss.detach().reshape({1}));
  if (r.correct.defined()) {
    correct_.narrow(0, step, 1).copy_(r.correct.detach().reshape({1}));
    has_correct_ = true;
  }
  examples_.push_back(examples);
  weights_.push_back(weight);
}

StepRecord::Read StepRecord::read() const {
  AllowSync deliberate;
  Read out;
  const auto steps = static_cast<std::int64_t>(examples_.size());
  if (steps == 0) return out;
  const std::vector<double> losses = losses_.narrow(0, 0, steps).to_vector<double>();
  std::vector<std::int64_t> correct;
  if (has_correct_) correct = correct_.narrow(0, 0, steps).to_vector<std::int64_t>();
  PassTotals& t = out.totals;
  t.has_correct = has_correct_;
  out.step_losses.reserve(losses.size());
  // In step order, as the running sums on the device added them (the same bits).
  for (std::size_t i = 0; i < losses.size(); ++i) {
    t.loss_sum += losses[i] * static_cast<double>(examples_[i]);
    if (has_correct_) t.correct_sum += static_cast<double>(correct[i]);
    t.examples += static_cast<double>(examples_[i]);
    out.step_losses.push_back(losses[i] * weights_[i]);
  }
  return out;
}

Tensor step_losses_tensor(const std::vector<double>& losses) {
  const std::vector<float> rounded(losses.begin(), losses.end());
  return from_vector(rounded, {static_cast<std::int64_t>(rounded.size())}, cpu());
}

}  // namespace tessera::train::loop
