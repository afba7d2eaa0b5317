// Learning-rate schedules: argument checks, then PyTorch's closed forms. See Note [Schedules
// as functions of the epoch].
#include "tessera/optim/lr_schedule.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/check.h"

// Note [Schedules as functions of the epoch]
// PyTorch's schedulers are stateful: step() multiplies the optimizer's current lr (the
// "chainable" form), and a resumed run must restore each scheduler's state_dict beside the
// optimizer's. Here a schedule is the closed form PyTorch keeps for step(epoch)
// (_get_closed_form_lr): lr(base_lr, epoch) alone. The Trainer sets the lr from the
// optimizer's base lr before every epoch, so nothing accumulates (no rounding drifts in over
// hundreds of epochs, no lr fed back into itself), and a run resumed after epoch k needs
// only k, which its state file already holds. The chainable and closed forms agree to the
// last bits or so (PyTorch's chained cosine reads 0.10000000000000006 where the closed form
// gives 0.1); the tests compare with PyTorch's chained values to a relative 1e-12.

namespace tessera::optim {
namespace {

void check_gamma(const char* op, double gamma) {
  TESSERA_CHECK(std::isfinite(gamma) && gamma > 0, Error,
                "[{}] gamma is {}; it must be a finite factor > 0 (0.1 divides the lr by 10 at "
                "each decay)",
                op, gamma);
}

// Milestones: increasing epochs >= 1 (at epoch 0 a schedule has not stepped yet).
void check_milestones(const char* op, const std::vector<int>& milestones) {
  for (std::size_t i = 0; i < milestones.size(); ++i) {
    TESSERA_CHECK(milestones[i] >= 1 && (i == 0 || milestones[i] > milestones[i - 1]), Error,
                  "[{}] milestones are [{}]; they must be increasing epochs >= 1, each given "
                  "once. Sort them",
                  op, fmt::join(milestones, ", "));
  }
}

// How many of the increasing `milestones` are <= epoch (Python's bisect_right).
std::size_t reached(const std::vector<int>& milestones, int epoch) {
  return static_cast<std::size_t>(std::upper_bound(milestones.begin(), milestones.end(), epoch) -
                                  milestones.begin());
}

}  // namespace

double LrSchedule::lr(double base_lr, int epoch) const {
  TESSERA_CHECK(epoch >= 0, Error,
                "[LrSchedule::lr] epoch is {}; epochs count from 0 (the epochs trained before)",
                epoch);
  TESSERA_CHECK(std::isfinite(base_lr) && base_lr >= 0, Error,
                "[LrSchedule::lr] base_lr is {}; it must be a finite lr >= 0", base_lr);
  const double lr = lr_at(base_lr, epoch);
  // Refused here, naming the schedule, not at the optimizer's set_lr in the middle of a fit.
  TESSERA_CHECK(std::isfinite(lr), Error,
                "[{}] the lr of epoch {} (epochs counted from 0) for base_lr {} is {}: the "
                "schedule grows past the largest double by then. Use a factor <= 1, or fewer "
                "epochs",
                str(), epoch, base_lr, lr);
  return lr;
}

StepLR::StepLR(int step_size, double gamma) : step_size_(step_size), gamma_(gamma) {
  TESSERA_CHECK(step_size >= 1, Error,
                "[StepLR] step_size is {}; it must be a count of epochs >= 1 between decays",
                step_size);
  check_gamma("StepLR", gamma);
}

std::string StepLR::str() const {
  return fmt::format("StepLR(step_size={}, gamma={})", step_size_, gamma_);
}

double StepLR::lr_at(double base_lr, int epoch) const {
  return base_lr * std::pow(gamma_, epoch / step_size_);
}

MultiStepLR::MultiStepLR(std::vector<int> milestones, double gamma)
    : milestones_(std::move(milestones)), gamma_(gamma) {
  check_milestones("MultiStepLR", milestones_);
  check_gamma("MultiStepLR", gamma);
}

std::string MultiStepLR::str() const {
  return fmt::format("MultiStepLR(milestones=[{}], gamma={})", fmt::join(milestones_, ", "),
                     gamma_);
}

double MultiStepLR::lr_at(double base_lr, int epoch) const {
  return base_lr * std::pow(gamma_, static_cast<double>(reached(milestones_, epoch)));
}

ExponentialLR::ExponentialLR(double gamma) : gamma_(gamma) { check_gamma("ExponentialLR", gamma); }

std::string ExponentialLR::str() const { return fmt::format("ExponentialLR(gamma={})", gamma_); }

double ExponentialLR::lr_at(double base_lr, int epoch) const {
  return base_lr * std::pow(gamma_, epoch);
}

CosineAnnealingLR::CosineAnnealingLR(int t_max, double eta_min) : t_max_(t_max), eta_min_(eta_min) {
  TESSERA_CHECK(t_max >= 1, Error,
                "[CosineAnnealingLR] t_max is {}; it must be the epochs >= 1 from the base lr "
                "down to eta_min (usually the run's epochs)",
                t_max);
  TESSERA_CHECK(std::isfinite(eta_min) && eta_min >= 0, Error,
                "[CosineAnnealingLR] eta_min is {}; it must be a finite lr >= 0", eta_min);
}

std::string CosineAnnealingLR::str() const {
  return fmt::format("CosineAnnealingLR(t_max={}, eta_min={})", t_max_, eta_min_);
}

double CosineAnnealingLR::lr_at(double base_lr, int epoch) const {
  const double phase = std::numbers::pi * static_cast<double>(epoch) / t_max_;
  return eta_min_ + (base_lr - eta_min_) * (1 + std::cos(phase)) / 2;
}

LinearLR::LinearLR(double start_factor, double end_factor, int total_iters)
    : start_factor_(start_factor), end_factor_(end_factor), total_iters_(total_iters) {
  TESSERA_CHECK(start_factor > 0 && start_factor <= 1, Error,
                "[LinearLR] start_factor is {}; it must be in (0, 1]: the first epoch trains "
                "at base_lr * start_factor",
                start_factor);
  TESSERA_CHECK(end_factor >= 0 && end_factor <= 1, Error,
                "[LinearLR] end_factor is {}; it must be in [0, 1]", end_factor);
  TESSERA_CHECK(total_iters >= 1, Error,
                "[LinearLR] total_iters is {}; it must be the epochs >= 1 from start_factor to "
                "end_factor",
                total_iters);
}

std::string LinearLR::str() const {
  return fmt::format("LinearLR(start_factor={}, end_factor={}, total_iters={})", start_factor_,
                     end_factor_, total_iters_);
}

double LinearLR::lr_at(double base_lr, int epoch) const {
  const double done = static_cast<double>(std::min(epoch, total_iters_)) / total_iters_;
  return base_lr * (start_factor_ + (end_factor_ - start_factor_) * done);
}

SequentialLR::SequentialLR(std::vector<std::shared_ptr<const LrSchedule>> schedules,
                           std::vector<int> milestones)
    : schedules_(std::move(schedules)), milestones_(std::move(milestones)) {
  TESSERA_CHECK(!schedules_.empty(), Error, "[SequentialLR] got no schedules; give at least one");
  for (std::size_t i = 0; i < schedules_.size(); ++i) {
    TESSERA_CHECK(schedules_[i] != nullptr, Error,
                  "[SequentialLR] schedule {} is null; give a schedule for every stage", i);
  }
  TESSERA_CHECK(milestones_.size() + 1 == schedules_.size(), Error,
                "[SequentialLR] got {} schedules and {} milestones; give one milestone less "
                "than schedules (the epoch each schedule after the first starts at)",
                schedules_.size(), milestones_.size());
  check_milestones("SequentialLR", milestones_);
}

std::string SequentialLR::str() const {
  std::vector<std::string> parts;
  for (const auto& s : schedules_) parts.push_back(s->str());
  return fmt::format("SequentialLR(schedules=[{}], milestones=[{}])", fmt::join(parts, ", "),
                     fmt::join(milestones_, ", "));
}

double SequentialLR::lr_at(double base_lr, int epoch) const {
  const std::size_t stage = reached(milestones_, epoch);
  const int start = stage == 0 ? 0 : milestones_[stage - 1];
  return schedules_[stage]->lr(base_lr, epoch - start);
}

std::shared_ptr<const LrSchedule> with_linear_warmup(int warmup_epochs,
                                                     std::shared_ptr<const LrSchedule> then) {
  TESSERA_CHECK(warmup_epochs >= 1, Error,
                "[with_linear_warmup] warmup_epochs is {}; it must be >= 1 (no warm-up: use "
                "the schedule itself)",
                warmup_epochs);
  auto warmup = std::make_shared<LinearLR>(1.0 / (warmup_epochs + 1.0), 1.0, warmup_epochs);
  if (then == nullptr) return warmup;
  return std::make_shared<SequentialLR>(
      std::vector<std::shared_ptr<const LrSchedule>>{std::move(warmup), std::move(then)},
      std::vector<int>{warmup_epochs});
}

}  // namespace tessera::optim
