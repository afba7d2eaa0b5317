// Trainer: the training loop with metrics kept on the device. See Note [Metrics on the
// device].
#include "tessera/train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <string>

#include "core/check.h"
#include "core/device_registry.h"
#include "ops/rank_errors.h"
#include "tessera/autograd.h"
#include "tessera/factories.h"
#include "tessera/nn/loss.h"
#include "tessera/operators.h"
#include "tessera/ops.h"
#include "tessera/optim/clip.h"
#include "tessera/sync_guard.h"
#include "train/loop_parts.h"
#include "train/step_graph.h"
#include "train/step_record.h"

// Note [Metrics on the device]
// Reading a loss with item() makes the host wait for the device, which starves a GPU of
// queued work every step. The trainer instead copies each step's loss and correct count into
// the next slots of device buffers sized for the pass (loop::StepRecord): two queued copies
// a step, and nothing else. The buffers are read once per pass, inside an AllowSync scope
// (the deliberate read); the host then makes the pass's sums in float64, in step order, and
// keeps each step's loss for step_losses(). The progress bar therefore shows batches and
// time, not the running loss.

namespace tessera::train {
namespace {

using loop::Clock;
using loop::Progress;
using loop::seconds_since;

StepResult classify(nn::Module& model, const data::Batch& b) {
  const Tensor logits = model(b.x);
  const Tensor loss = nn::cross_entropy(logits, b.y);
  NoGradGuard no_grad;
  return {loss, sum(eq(argmax(logits.detach(), 1), b.y))};
}

// A loader with no batches (drop_last with fewer examples than a batch) would give an epoch
// with no steps, whose mean loss reads as 0 (or NaN): refused before anything runs.
void check_has_batches(const data::DataLoader& loader, const char* what) {
  TESSERA_CHECK(loader.batches() > 0, Error,
                "[Trainer] the {} data gives no batches: {} examples, batch_size {} and "
                "drop_last drops them all. Use a smaller batch_size or drop_last=false",
                what, loader.size(), loader.options().batch_size);
}

}  // namespace

StepResult Task::training_step(const data::Batch& batch) { return classify(model(), batch); }

Trainer::Trainer(TrainerOptions options) : options_(std::move(options)) {
  TESSERA_CHECK(options_.max_epochs >= 0 && options_.num_gpus >= 0, Error,
                "[Trainer] max_epochs ({}) and num_gpus ({}) must not be negative",
                options_.max_epochs, options_.num_gpus);
  TESSERA_CHECK(std::isfinite(options_.gradient_clip_val) && options_.gradient_clip_val >= 0, Error,
                "[Trainer] gradient_clip_val ({}) must be a finite norm >= 0 (0 turns clipping "
                "off)",
                options_.gradient_clip_val);
  TESSERA_CHECK(options_.precision == kFloat32 || is_half(options_.precision), DtypeError,
                "[Trainer] precision must be float32, bfloat16 or float16, got {}",
                dtype_name(options_.precision));
  const int available = num_gpus();
  const int used = std::min(options_.num_gpus, available);
  for (int i = 0; i < used; ++i) devices_.push_back(gpu(i));
  if (options_.num_gpus > available) {
    std::cerr << "Trainer: asked for " << options_.num_gpus << " GPU(s), this machine has "
              << available << "; "
              << (used > 0 ? "using " + std::to_string(used) : std::string("training on the CPU"))
              << "\n";
  }
  TESSERA_CHECK(!(options_.device && !options_.devices.empty()), Error,
                "[Trainer] got both device ({}) and devices ({} of them); give one device, or "
                "the list of devices to train on data-parallel",
                options_.device ? options_.device->str() : "", options_.devices.size());
  if (options_.device) {
    detail::check_device(*options_.device, "Trainer");
    devices_ = {*options_.device};
  }
  if (!options_.devices.empty()) {
    for (std::size_t i = 0; i < options_.devices.size(); ++i) {
      const Device d = options_.devices[i];
      detail::check_device(d, "Trainer");
      TESSERA_CHECK(d.kind() == options_.devices.front().kind(), DeviceError,
                    "[Trainer] devices mixes {} and {}; data-parallel replicas run on devices "
                    "of one kind (all GPUs, or all logical CPU devices)",
                    options_.devices.front().str(), d.str());
      for (std::size_t j = 0; j < i; ++j) {
        TESSERA_CHECK(options_.devices[j] != d, DeviceError,
                      "[Trainer] devices lists {} twice; give each device once", d.str());
      }
    }
    devices_ = options_.devices;
  }
  if (devices_.empty()) devices_.push_back(cpu());
  TESSERA_CHECK(!(options_.graph && devices_.size() > 1 && devices_.front().is_cuda()), DeviceError,
                "[Trainer] graph records the step of one GPU, and this Trainer has {}; train "
                "with graph=false on several GPUs, or on one GPU per process (mpirun) with "
                "graph=true",
                devices_.size());
}

namespace {

// Calls `model` once on `example` when it has lazy layers, without gradients and in eval
// mode (no dropout numbers drawn); the parameters it made, in model.parameters() order.
std::vector<Tensor> build_lazy_layers(nn::Module& model, const data::Batch& example) {
  if (model.all_built()) return {};
  const std::vector<Tensor> before = model.parameters();
  const bool training = model.is_training();
  model.eval();
  try {
    NoGradGuard no_grad;
    (void)model(example.x);
  } catch (...) {
    model.train(training);
    throw;
  }
  model.train(training);
  std::vector<Tensor> made;
  for (const Tensor& p : model.parameters()) {
    const bool old =
        std::any_of(before.begin(), before.end(), [&](const Tensor& b) { return b.is_same(p); });
    if (!old) made.push_back(p);
  }
  return made;
}

}  // namespace

void Task::build(const data::Batch& example) {
  nn::Module& m = model();
  const std::vector<Tensor> made = build_lazy_layers(m, example);
  if (made.empty()) return;
  const std::vector<Tensor>& held = optimizer().params();
  for (const auto& named : m.named_parameters()) {
    const Tensor& p = named.second;  // not a structured binding: clang's OpenMP cannot capture one
    const bool is_new =
        std::any_of(made.begin(), made.end(), [&](const Tensor& t) { return t.is_same(p); });
    const bool optimized =
        std::any_of(held.begin(), held.end(), [&](const Tensor& t) { return t.is_same(p); });
    TESSERA_CHECK(!is_new || optimized, Error,
                  "[Trainer] the model's parameter '{}' was made by its lazy layer at the first "
                  "call, after the optimizer was made from model.parameters(), so the "
                  "optimizer would never train it. Call the model once on an example batch "
                  "before making the optimizer, or build the task as "
                  "train::Classifier(make_model, make_optimizer), which makes the optimizer "
                  "after the lazy layers",
                  named.first);
  }
}

StepResult Task::validation_step(const data::Batch& batch) {
  NoGradGuard no_grad;
  return classify(model(), batch);
}

std::unique_ptr<Task> Task::replicate() {
  throw Error(
      "[Trainer] data-parallel training needs a replica of the task on each device, and this "
      "Task cannot make one: build it as train::Classifier(make_model, make_optimizer), or "
      "override Task::replicate()");
}

Classifier::Classifier(ModelFactory make_model, OptimizerFactory make_optimizer)
    : make_model_(std::move(make_model)), make_optimizer_(std::move(make_optimizer)) {
  owned_model_ = make_model_();
  TESSERA_CHECK(owned_model_ != nullptr, Error, "[Classifier] make_model returned no model");
  model_ = owned_model_.get();
  // With lazy layers the optimizer waits for build(): made now, it would lack their
  // parameters (and with only lazy layers make_optimizer would get none at all).
  if (model_->all_built()) make_owned_optimizer();
}

void Classifier::make_owned_optimizer() {
  owned_optimizer_ = make_optimizer_(owned_model_->parameters());
  TESSERA_CHECK(owned_optimizer_ != nullptr, Error,
                "[Classifier] make_optimizer returned no optimizer");
  optimizer_ = owned_optimizer_.get();
}

optim::Optimizer& Classifier::optimizer() {
  TESSERA_CHECK(optimizer_ != nullptr, Error,
                "[Classifier] the model has lazy layers without parameters yet, so its "
                "optimizer is not made yet; call build(batch) first (Trainer::fit does, with "
                "the first training batch)");
  return *optimizer_;
}

void Classifier::build(const data::Batch& example) {
  if (optimizer_ != nullptr || !make_optimizer_) {
    Task::build(example);
    return;
  }
  (void)build_lazy_layers(*model_, example);
  make_owned_optimizer();
}

std::unique_ptr<Task> Classifier::replicate() {
  if (!make_model_) return Task::replicate();
  return std::make_unique<Classifier>(make_model_, make_optimizer_);
}

void Trainer::prepare_model(nn::Module& model) const {
  // A one-time move the user asked for by choosing the device: waiting for a queued logical
  // CPU device that built the parameters is deliberate, not a per-step stall.
  AllowSync deliberate;
  model.to(device());
}

data::Batch Trainer::prepare_batch(const data::Batch& batch, Device device) const {
  return data::to_device(batch, device);
}

EpochMetrics Trainer::evaluate(Task& task, data::DataLoader& loader) {
  check_has_batches(loader, "evaluation");
  nn::Module& model = task.model();
  prepare_model(model);  // as fit() does: evaluate() alone met a model still on another device
  // The model goes back to the mode it had, also when a step throws: evaluate() between
  // fits, or on a model the user put in eval mode, must not switch dropout back on.
  struct RestoreMode {
    nn::Module& model;
    bool training;
    ~RestoreMode() {
      if (training) {
        model.train();
      } else {
        model.eval();
      }
    }
  } restore{model, model.is_training()};
  model.eval();
  loop::StepRecord record(device());
  record.begin(loader.batches());
  for (const data::Batch& b : loader) {
    const data::Batch on_device = prepare_batch(b);
    const AutocastGuard precision = loop::precision_scope(device(), options_.precision);
    const StepResult r = task.validation_step(on_device);
    loop::check_step_result(r, "validation_step");
    record.add(r, b.examples());
  }
  EpochMetrics m;
  std::tie(m.val_loss, m.val_acc) = loop::PassTotals::average({record.read().totals});
  return m;
}

std::vector<EpochMetrics> Trainer::fit(Task& task, data::DataLoader& train, data::DataLoader* val) {
  step_losses_ = Tensor();  // not the last fit's, if this one throws before it has any
  check_has_batches(train, "training");
  if (val != nullptr) check_has_batches(*val, "validation");
  const ProcessGroup* group = options_.process_group;
  if (group != nullptr && group->size() > 1) {
    try {
      return fit_replicas(task, train, val);
    } catch (const std::exception& e) {
      // The other ranks may be waiting for this one in an all-reduce: the exit must not wait
      // for them for ever (Note [Leaving after an error alone] in mpi_world.cpp), unless
      // every rank threw this error at once.
      if (!detail::thrown_on_every_rank(std::current_exception())) {
        group->note_failure(std::string("Trainer::fit: ") + e.what());
      }
      throw;
    } catch (...) {
      if (!detail::thrown_on_every_rank(std::current_exception())) {
        group->note_failure("Trainer::fit: an exception that is not a std::exception");
      }
      throw;
    }
  }
  if (devices_.size() > 1 || group != nullptr) {
    return fit_replicas(task, train, val);
  }
  nn::Module& model = task.model();
  prepare_model(model);
  if (!model.all_built()) task.build(prepare_batch(train.batch(0), device()));  // lazy layers
  optim::Optimizer& opt = task.optimizer();
  const std::vector<Tensor> params = model.parameters();
  loop::StepRecord record(device());
  std::vector<double> step_losses;  // every epoch's, read with its metrics
  loop::MetricsLog metrics(options_, true);
  optim::GradScaler scaler = loop::scaler_for(options_.precision);
  const auto one_step = [&](const data::Batch& batch) {
    opt.zero_grad();
    StepResult r;
    {
      const AutocastGuard precision = loop::precision_scope(device(), options_.precision);
      r = task.training_step(batch);
      loop::check_step_result(r, "training_step");
    }
    scaler.scale(r.loss).backward();
    if (options_.gradient_clip_val > 0) {
      scaler.unscale_(opt);
      optim::clip_grad_norm_(params, options_.gradient_clip_val);
    }
    scaler.step(opt);
    scaler.update();
    return r;
  };
  const int done_before = loop::resume(options_, {&task}, {&scaler}, train);
  metrics.resume_after(done_before);
  const loop::CapturableFor capturable(opt, options_.graph);
  loop::ScheduledLr scheduled(options_.lr_schedule, {&opt});
  std::unique_ptr<StepGraph> graph;  // Note [Recorded steps]
  bool warmed_up = false;            // a full batch has run eagerly
  std::vector<EpochMetrics> history;
  for (int epoch = done_before + 1; epoch <= options_.max_epochs; ++epoch) {
    const auto start = Clock::now();
    if (scheduled.begin_epoch(epoch)) graph.reset();  // Note [Scheduled learning rates]
    model.train();
    record.begin(train.batches());
    Progress progress(options_.progress, epoch, options_.max_epochs, train.batches());
    std::int64_t done = 0;
    for (const data::Batch& b : train) {
      const std::int64_t examples = b.examples();
      const bool full = examples == train.options().batch_size;
      const data::Batch on_device = prepare_batch(b, device());
      StepResult r;
      if (options_.graph && full && warmed_up) {
        if (!graph) {
          graph = std::make_unique<StepGraph>(devices_, std::vector<data::Batch>{on_device},
                                              [&](const std::vector<data::Batch>& in) {
                                                return std::vector<StepResult>{one_step(in[0])};
                                              });
        }
        r = graph->run({on_device})[0];
      } else {
        r = one_step(on_device);
        warmed_up = warmed_up || full;
      }
      record.add(r, examples);
      progress.update(++done);
    }
    progress.finish();
    EpochMetrics m;
    m.epoch = epoch;
    m.lr = scheduled.lr();
    const loop::StepRecord::Read pass = record.read();
    step_losses.insert(step_losses.end(), pass.step_losses.begin(), pass.step_losses.end());
    std::tie(m.train_loss, m.train_acc) = loop::PassTotals::average({pass.totals});
    m.train_seconds = seconds_since(start);  // the read waited for the devices
    m.val_loss = m.val_acc = std::numeric_limits<double>::quiet_NaN();
    if (val != nullptr) {
      const EpochMetrics v = evaluate(task, *val);
      m.val_loss = v.val_loss;
      m.val_acc = v.val_acc;
    }
    m.seconds = seconds_since(start);
    history.push_back(m);
    try {
      loop::report_epoch(m, options_.max_epochs, options_.progress, val != nullptr, metrics,
                         options_.lr_schedule != nullptr);
    } catch (const NonFiniteError&) {
      step_losses_ = loop::step_losses_tensor(step_losses);  // which step went NaN
      throw;
    }
    loop::save_state(options_, task, scaler, train, epoch, true, scheduled.base_description());
  }
  step_losses_ = loop::step_losses_tensor(step_losses);
  return history;
}

}  // namespace tessera::train
