// Trainer::fit on several devices: one replica of the task per device, each batch split
// across them, gradients summed by the GradientReducer. See Note [Data-parallel steps].
#include <fmt/format.h>

#include <fstream>

#include "core/check.h"
#include "tessera/collectives.h"
#include "tessera/nn/loss.h"
#include "tessera/optim/clip.h"
#include "train/gradient_reducer.h"
#include "train/loop_parts.h"

// Note [Data-parallel steps]
// Replica r gets rows [o_r, o_r + s_r) of each batch of B (s_r = B / k, the first B % k
// replicas one more) and backpropagates its mean loss times s_r / B, so that the sum of the
// replicas' gradients, which the reducer forms with collectives, is exactly the gradient of
// the whole batch's mean loss on one device. Every replica then holds that same gradient:
// its norm is the global norm, so clipping on each replica clips identically, and every
// optimizer takes the same step from the same values (broadcast from replica 0 at the
// start). The host only queues work: each device runs its replica's forward and backward
// while the host queues the next replica's. Metrics and the loss log stay on each device and
// are read once per epoch (and once per fit), as on one device.

namespace tessera::train {
namespace {

// Rows of each replica for a batch of `batch` examples over `k` devices.
std::vector<std::int64_t> shard_sizes(std::int64_t batch, std::size_t k) {
  TESSERA_CHECK(batch >= static_cast<std::int64_t>(k), Error,
                "[Trainer] a batch of {} example(s) cannot be split over {} devices (each "
                "replica needs at least one); use a batch size of at least {}, or drop_last "
                "to skip a short last batch",
                batch, k, k);
  std::vector<std::int64_t> sizes;
  const auto kk = static_cast<std::int64_t>(k);
  for (std::int64_t r = 0; r < kk; ++r) sizes.push_back(batch / kk + (r < batch % kk ? 1 : 0));
  return sizes;
}

// Refuses replicas whose parameters differ from replica 0's, naming the first difference.
void check_same_parameters(const std::vector<std::pair<std::string, Tensor>>& first,
                           const std::vector<std::pair<std::string, Tensor>>& other,
                           std::size_t replica) {
  TESSERA_CHECK(first.size() == other.size(), Error,
                "[Trainer] replica {} has {} parameters but the model has {}; "
                "Task::replicate must build the same model",
                replica, other.size(), first.size());
  for (std::size_t i = 0; i < first.size(); ++i) {
    const auto& [name, t] = first[i];
    const auto& [other_name, u] = other[i];
    TESSERA_CHECK(name == other_name && t.shape() == u.shape() && t.dtype() == u.dtype(), Error,
                  "[Trainer] replica {}'s parameter {} is '{}' {} {} but the model's is '{}' {} "
                  "{}; Task::replicate must build the same model",
                  replica, i, other_name, dtype_name(u.dtype()), u.shape().str(), name,
                  dtype_name(t.dtype()), t.shape().str());
  }
}

}  // namespace

std::vector<EpochMetrics> Trainer::fit_replicas(Task& task, data::DataLoader& train,
                                                data::DataLoader* val) {
  const std::size_t k = devices_.size();
  std::vector<std::unique_ptr<Task>> owned;
  std::vector<Task*> tasks{&task};
  for (std::size_t r = 1; r < k; ++r) {
    owned.push_back(task.replicate());
    tasks.push_back(owned.back().get());
  }
  std::vector<std::vector<Tensor>> params;
  {
    AllowSync deliberate;  // a one-time move, as in prepare_model
    for (std::size_t r = 0; r < k; ++r) tasks[r]->model().to(devices_[r]);
  }
  const auto named = task.model().named_parameters();
  for (std::size_t r = 0; r < k; ++r) {
    check_same_parameters(named, tasks[r]->model().named_parameters(), r);
    params.push_back(tasks[r]->model().parameters());
  }
  // Every replica starts from replica 0's values (parameters and buffers).
  for (std::size_t i = 0; i < params[0].size(); ++i) {
    std::vector<Tensor> group;
    for (std::size_t r = 0; r < k; ++r) group.push_back(params[r][i]);
    NoGradGuard no_grad;
    broadcast(group);
  }
  const auto buffers = task.model().buffers();
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    std::vector<Tensor> group;
    for (std::size_t r = 0; r < k; ++r) group.push_back(tasks[r]->model().buffers()[i]);
    broadcast(group);
  }
  GradientReducer reducer(params, [](const std::vector<Tensor>& flat) { all_reduce(flat); });

  const std::int64_t steps = static_cast<std::int64_t>(options_.max_epochs) * train.batches();
  std::vector<Tensor> logs;  // each replica's share of each step's loss
  for (std::size_t r = 0; r < k; ++r) logs.push_back(zeros({steps}, devices_[r]));
  std::ofstream metrics_file;
  if (!options_.metrics_path.empty()) {
    metrics_file.open(options_.metrics_path);
    TESSERA_CHECK(metrics_file.good(), IOError, "[Trainer] cannot write metrics to '{}'",
                  options_.metrics_path.string());
  }
  std::vector<EpochMetrics> history;
  std::int64_t step = 0;
  for (int epoch = 1; epoch <= options_.max_epochs; ++epoch) {
    const auto start = loop::Clock::now();
    std::vector<loop::DeviceSums> sums;
    for (std::size_t r = 0; r < k; ++r) {
      tasks[r]->model().train();
      sums.emplace_back(devices_[r]);
    }
    loop::Progress progress(options_.progress, epoch, options_.max_epochs, train.batches());
    std::int64_t done = 0;
    for (const data::Batch& b : train) {
      const std::int64_t batch = b.y.size(0);
      const std::vector<std::int64_t> sizes = shard_sizes(batch, k);
      std::vector<StepResult> results;
      std::int64_t offset = 0;
      for (std::size_t r = 0; r < k; ++r) {
        const data::Batch shard{b.x.narrow(0, offset, sizes[r]), b.y.narrow(0, offset, sizes[r])};
        offset += sizes[r];
        tasks[r]->optimizer().zero_grad();
        results.push_back(tasks[r]->training_step(data::to_device(shard, devices_[r])));
        const double share = static_cast<double>(sizes[r]) / static_cast<double>(batch);
        (results.back().loss * share).backward();
      }
      reducer.reduce();
      for (std::size_t r = 0; r < k; ++r) {
        if (options_.gradient_clip_val > 0) {
          optim::clip_grad_norm_(params[r], options_.gradient_clip_val);
        }
        tasks[r]->optimizer().step();
        sums[r].add(results[r], sizes[r]);
        NoGradGuard no_grad;
        const double share = static_cast<double>(sizes[r]) / static_cast<double>(batch);
        logs[r].narrow(0, step, 1).copy_((results[r].loss.detach().to(kFloat32) * share).reshape({1}));
      }
      ++step;
      progress.update(++done);
    }
    progress.finish();
    EpochMetrics m;
    m.epoch = epoch;
    std::vector<const loop::DeviceSums*> parts;
    for (const auto& s : sums) parts.push_back(&s);
    std::tie(m.train_loss, m.train_acc) = loop::DeviceSums::average(parts);
    m.train_seconds = loop::seconds_since(start);  // the read waited for the devices
    m.val_loss = m.val_acc = std::numeric_limits<double>::quiet_NaN();
    if (val != nullptr) {
      const EpochMetrics v = evaluate(task, *val);
      m.val_loss = v.val_loss;
      m.val_acc = v.val_acc;
    }
    m.seconds = loop::seconds_since(start);
    history.push_back(m);
    loop::report_epoch(m, options_.max_epochs, options_.progress, val != nullptr, metrics_file);
  }
  AllowSync deliberate;  // each replica's log, moved in one piece
  Tensor total = logs[0].narrow(0, 0, step).cpu();
  for (std::size_t r = 1; r < k; ++r) total = total + logs[r].narrow(0, 0, step).cpu();
  step_losses_ = total;
  return history;
}

}  // namespace tessera::train
