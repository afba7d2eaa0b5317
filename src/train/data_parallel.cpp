// Trainer::fit on several devices: one replica of the task per device, each batch split
// across them, gradients summed by the GradientReducer. See Note [Data-parallel steps].
#include <fmt/format.h>

#include <bit>
#include <fstream>

#include "core/check.h"
#include "ops/rank_errors.h"
#include "tessera/autograd.h"
#include "tessera/collectives.h"
#include "tessera/factories.h"
#include "tessera/nn/loss.h"
#include "tessera/operators.h"
#include "tessera/optim/clip.h"
#include "tessera/random.h"
#include "tessera/sync_guard.h"
#include "train/gradient_reducer.h"
#include "train/loop_parts.h"
#include "train/rank_checks.h"
#include "train/step_graph.h"
#include "train/step_record.h"

// Note [Data-parallel steps]
// Each of R ranks gathers only its part of each batch of B (DataLoader::shard: B / R rows,
// the first B % R ranks one more), and cuts it the same way over its k devices. Replica r
// thus gets s_r rows of the batch (every row exactly once, over all ranks) and backpropagates
// its mean loss times s_r / B, so that the sum of the replicas' gradients, which the reducer
// forms with collectives, is exactly the gradient of
// the whole batch's mean loss on one device. Every replica then holds that same gradient:
// its norm is the global norm, so clipping on each replica clips identically, and every
// optimizer takes the same step from the same values (broadcast from replica 0 at the
// start). The host only queues work: each device runs its replica's forward and backward
// while the host queues the next replica's. Metrics and each step's loss stay on each device
// and are read once per epoch, as on one device.

// Note [Buffers across replicas]
// A buffer that training changes (BatchNorm's running statistics) takes each replica's own
// shard into account, so the replicas' copies drift apart, as they do under PyTorch's
// DistributedDataParallel. PyTorch broadcasts rank 0's buffers before every forward; the
// replicas here use their buffers only in evaluation mode, so rank 0's replica 0's are given
// to every replica at the end of each epoch instead (one broadcast per buffer and epoch,
// none when the model has no buffer): the validation pass, a checkpoint and the models each
// rank holds after fit then agree. The batch statistics themselves are each replica's
// shard's (no SyncBatchNorm), so a model with batch normalization does not train exactly as
// one device with the whole batch would.

// Note [One copy of a batch]
// The host used to gather this rank's rows of a batch into host memory (cpu:0's, with
// logical CPU devices) and cut it into views: replica r > 0's piece was then copied to its
// device every step, and with TrainerOptions::graph copied again there into the recorded
// step's inputs, on the device's core. DataLoader::split instead gathers each replica's
// piece straight into its device's memory where the host can write it (logical CPU
// devices): eager steps copy no batch, recorded steps copy each piece once, within its
// device. GPUs' pieces are still gathered on the host and copied once by prepare_batch.

namespace tessera::train {
namespace {

// Refuses a batch of `batch` examples that leaves one of the replicas (`ranks` times `k`
// devices) without a row.
void check_splittable(std::int64_t batch, std::size_t ranks, std::size_t k) {
  const std::size_t replicas = ranks * k;
  TESSERA_CHECK(
      batch >= static_cast<std::int64_t>(replicas), Error,
      "[Trainer] a batch of {} example(s) cannot be split over {} {} (each "
      "replica needs at least one); choose a batch size that leaves every batch, the "
      "last of an epoch too, at least {} examples, or drop a short last batch "
      "(LoaderOptions::drop_last; tessera train --drop-last)",
      batch, replicas,
      ranks == 1 ? "devices" : fmt::format("replicas ({} ranks of {} device(s))", ranks, k),
      replicas);
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

// Note [Each rank's random numbers]
// Every rank starts each epoch from rank 0's generator (a run resumed from rank 0's file
// continues exactly), but draws from a stream of its own: rank 0 goes on with that state,
// rank r >= 1 with a seed mixed from it, r and the offset, and offset 0. Otherwise every
// rank's shard drew the same dropout masks, row by row, where two logical devices (which
// draw one after the other) draw different ones. The offset in the mix gives each epoch a
// fresh stream, so one rank's streams never overlap across epochs.
std::uint64_t mix64(std::uint64_t x) {  // SplitMix64's finalizer
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

RngState stream_of_rank(const RngState& rank0, int rank) {
  if (rank == 0) return rank0;
  return {mix64(mix64(rank0.seed ^ mix64(static_cast<std::uint64_t>(rank))) ^ rank0.offset), 0};
}

// Every rank takes rank 0's generator state (host work: one short exchange).
void take_rank0_generator(const ProcessGroup& host) {
  const RngState mine = rng_state();
  const std::vector<std::int64_t> all = host.exchange(
      {std::bit_cast<std::int64_t>(mine.seed), std::bit_cast<std::int64_t>(mine.offset)});
  set_rng_state({std::bit_cast<std::uint64_t>(all[0]), std::bit_cast<std::uint64_t>(all[1])});
}

}  // namespace

std::vector<EpochMetrics> Trainer::fit_replicas(Task& task, data::DataLoader& train,
                                                data::DataLoader* val) {
  const std::size_t k = devices_.size();
  // Across processes: this rank trains on its part of each batch (Note [Data-parallel steps]).
  // A group of one takes the same path (its collectives leave the values as they are): the
  // group a program passes is the one it trains on.
  const ProcessGroup* group = options_.process_group;
  // Host tensors (the start-up checks, the epoch's metrics, the loss log) go through MPI even
  // when the gradients go through NCCL, which moves GPU tensors only (MPI is joined already).
  const ProcessGroup* host = group == nullptr || group->backend() == ProcessBackend::kMpi
                                 ? group
                                 : &ProcessGroup::init(ProcessBackend::kMpi);
  const std::size_t ranks = group != nullptr ? static_cast<std::size_t>(group->size()) : 1;
  const std::size_t rank = group != nullptr ? static_cast<std::size_t>(group->rank()) : 0;
  const bool lead = rank == 0;  // prints and writes files
  std::vector<std::unique_ptr<Task>> owned;
  std::vector<Task*> tasks{&task};
  // The replicas' initial values are replaced by replica 0's (broadcast below), so the draws
  // that made them give the generator back: they moved it once per replica and fit, so the
  // dropout masks after fit depended on the device count and on how epochs were split into
  // fits (one device draws nothing here).
  const RngState before_replicas = rng_state();
  for (std::size_t r = 1; r < k; ++r) {
    owned.push_back(task.replicate());
    tasks.push_back(owned.back().get());
  }
  set_rng_state(before_replicas);
  std::vector<std::vector<Tensor>> params;
  {
    AllowSync deliberate;  // a one-time move, as in prepare_model
    for (std::size_t r = 0; r < k; ++r) tasks[r]->model().to(devices_[r]);
  }
  // Lazy layers' parameters, if any, on every replica: replica 0's draw as one device's do,
  // the others' (replaced by the broadcast below) give the generator back, as above. A
  // second fit finds the task's model built and its fresh replicas lazy (they were refused).
  const auto lazy = [&](std::size_t r) { return !tasks[r]->model().all_built(); };
  bool any_lazy = false;
  for (std::size_t r = 0; r < k; ++r) any_lazy = any_lazy || lazy(r);
  if (any_lazy) {
    const data::Batch example = train.batch(0);
    if (lazy(0)) tasks[0]->build(prepare_batch(example, devices_[0]));
    const RngState after_first = rng_state();
    for (std::size_t r = 1; r < k; ++r) {
      if (lazy(r)) tasks[r]->build(prepare_batch(example, devices_[r]));
    }
    set_rng_state(after_first);
  }
  const auto named = task.model().named_parameters();
  for (std::size_t r = 0; r < k; ++r) {
    check_same_parameters(named, tasks[r]->model().named_parameters(), r);
    params.push_back(tasks[r]->model().parameters());
  }
  // Only what trains is summed: a frozen parameter (requires_grad off) gets no gradient and
  // no grad-ready hook, as on one device. Which ones are frozen is the task's model's say:
  // the replicas, fresh from the factory, are frozen alike (a mask per replica laid the
  // buckets out for one and hooked another's: a crash).
  std::vector<std::vector<Tensor>> trainable(k);
  for (std::size_t i = 0; i < params[0].size(); ++i) {
    const bool trains = params[0][i].requires_grad();
    for (std::size_t r = 0; r < k; ++r) {
      Tensor p = params[r][i];
      if (p.requires_grad() != trains) p.requires_grad_(trains);
      if (trains) trainable[r].push_back(p);
    }
  }
  if (group != nullptr) {
    // With NCCL each rank drives its own GPUs (rank r: gpu(local_rank)): their number must
    // agree, not their indices. MPI pairs CPU devices by index, so those must.
    std::string devices;
    for (const Device d : devices_) devices += (devices.empty() ? "" : ",") + d.str();
    if (group->backend() == ProcessBackend::kNccl) {
      devices = fmt::format("{} GPU(s)", devices_.size());
    }
    const data::LoaderOptions& order = train.options();
    RunFacts facts;
    facts.batch_size = order.batch_size;
    facts.batches = train.batches();
    facts.examples = train.size();
    facts.max_epochs = options_.max_epochs;
    facts.gradient_clip_val = options_.gradient_clip_val;
    const auto describe = [&](const char* what, std::string text) {
      facts.described.emplace_back(what, std::move(text));
    };
    describe("devices", devices);
    describe("precision", std::string(dtype_name(options_.precision)));
    describe("recording of steps (graph)", options_.graph ? "on" : "off");
    describe("data order", fmt::format("shuffle={}, seed={}, drop_last={}", order.shuffle,
                                       order.seed, order.drop_last));
    describe("optimizer", task.optimizer().str());
    describe("lr schedule", loop::schedule_description(options_));
    describe("model", task.model().str());
    detail::on_every_rank([&] { check_ranks_agree(*host, facts, named); });
  }
  // Every batch, the short last one too, before anything trains (its size is known now).
  for (const std::int64_t b : {train.batch_length(0), train.batch_length(train.batches() - 1)}) {
    detail::on_every_rank([&] { check_splittable(b, ranks, k); });  // the ranks' sizes agree
  }
  // Every replica starts from rank 0's replica 0's values (parameters and buffers).
  const auto start_from_first = [&](const std::vector<Tensor>& one_per_replica) {
    NoGradGuard no_grad;
    if (group != nullptr) group->broadcast(one_per_replica[0], 0);
    if (k > 1) broadcast(one_per_replica);
  };
  for (std::size_t i = 0; i < params[0].size(); ++i) {
    std::vector<Tensor> same;
    for (std::size_t r = 0; r < k; ++r) same.push_back(params[r][i]);
    start_from_first(same);
  }
  // Each buffer on every replica, and rank 0's replica 0's values given to them all: at the
  // start, and at the end of every epoch (Note [Buffers across replicas]).
  std::vector<std::vector<Tensor>> buffers(task.model().buffers().size());
  for (std::size_t r = 0; r < k; ++r) {
    const std::vector<Tensor> mine = tasks[r]->model().buffers();
    for (std::size_t i = 0; i < buffers.size(); ++i) buffers[i].push_back(mine[i]);
  }
  const auto buffers_from_first = [&] {
    for (const std::vector<Tensor>& same : buffers) start_from_first(same);
  };
  buffers_from_first();
  // The replicas' optimizers start from the task's state too: a second fit() (or a task
  // whose optimizer stepped before) gave the replicas empty momentum and Adam moments, so
  // replica 1 took another step than replica 0 and every later gradient was off. (An
  // optimizer that cannot save its state has none to copy; it throws, and so would resume.)
  if (k > 1) {
    optim::OptimizerState state;
    bool saved = true;
    try {
      state = task.optimizer().state_dict();
    } catch (const Error&) {
      saved = false;  // state_dict's default: this optimizer keeps no state it can save
    }
    if (saved && !state.empty()) {
      AllowSync deliberate;  // a one-time copy, as the model's move above
      for (std::size_t r = 1; r < k; ++r) tasks[r]->optimizer().load_state_dict(state);
    }
  }
  // Sums over this process's devices, then over the ranks, then back to every device.
  // Which parameters some rank's backward reached: Note [Gradient buckets] (unused ones).
  GradientReducer::AgreeUsed agree_used;
  if (group != nullptr) {
    agree_used = [host](std::vector<std::uint8_t>& used) {
      const std::vector<std::int64_t> all = host->exchange({used.begin(), used.end()});
      for (std::size_t i = 0; i < all.size(); ++i) used[i % used.size()] |= all[i] != 0;
    };
  }
  GradientReducer reducer(
      trainable,
      [group, k](const std::vector<Tensor>& flat) {
        if (k > 1) all_reduce(flat);
        if (group == nullptr) return;
        group->all_reduce(flat[0]);
        if (k > 1) broadcast(flat);
      },
      std::size_t{25} << 20, std::move(agree_used));

  std::vector<loop::StepRecord> records;  // each replica's
  for (std::size_t r = 0; r < k; ++r) records.emplace_back(devices_[r]);
  std::vector<double> step_losses;  // this rank's replicas' shares of each step's loss
  loop::MetricsLog metrics(options_, lead);
  std::vector<optim::GradScaler> scalers;  // one per replica, on its device
  for (std::size_t r = 0; r < k; ++r) scalers.push_back(loop::scaler_for(options_.precision));
  // One step of every replica on its shard (already on its device) of a batch of `batch`.
  const auto replicas_step = [&](const std::vector<data::Batch>& shards, std::int64_t batch) {
    std::vector<StepResult> results;
    for (std::size_t r = 0; r < k; ++r) {
      tasks[r]->optimizer().zero_grad();
      {
        const AutocastGuard precision = loop::precision_scope(devices_[r], options_.precision);
        results.push_back(tasks[r]->training_step(shards[r]));
        loop::check_step_result(results.back(), "training_step");
      }
      const double share = static_cast<double>(shards[r].examples()) / static_cast<double>(batch);
      scalers[r].scale(results.back().loss * share).backward();
    }
    reducer.reduce();
    // The replicas' summed grads are equal, so every replica's scaler skips the same steps.
    for (std::size_t r = 0; r < k; ++r) {
      optim::Optimizer& opt = tasks[r]->optimizer();
      if (options_.gradient_clip_val > 0) {
        scalers[r].unscale_(opt);
        optim::clip_grad_norm_(trainable[r], options_.gradient_clip_val);
      }
      scalers[r].step(opt);
      scalers[r].update();
    }
    return results;
  };
  std::vector<optim::GradScaler*> scaler_of;
  for (optim::GradScaler& s : scalers) scaler_of.push_back(&s);
  // A rank that resumed alone, or from another file of the same epoch (a stale copy on one
  // host), would train other values (rank 0's were broadcast before): refused before any
  // rank loads its file, which would leave that rank's optimizer state and loader behind
  // for a retry. Files with the same bytes load the same values.
  if (group != nullptr) {
    const int held = loop::epochs_to_resume(options_);
    const std::uint64_t digest = held > 0 ? loop::resume_file_digest(options_) : 0;
    detail::on_every_rank([&] { check_ranks_resume_alike(*host, held, digest); });
  }
  const int done_before = loop::resume(options_, tasks, scaler_of, train);
  metrics.resume_after(done_before);
  if (group != nullptr) {
    // Every rank walks rank 0's shuffle (seed + epochs begun): a loader that began another
    // count of epochs on one rank (an evaluate() on rank 0 alone) shuffled it otherwise, and
    // the ranks' shards overlapped.
    const std::vector<std::int64_t> begun =
        host->exchange({static_cast<std::int64_t>(train.epochs_begun())});
    train.set_epoch(static_cast<std::uint64_t>(begun[0]));
  }
  std::vector<std::unique_ptr<loop::CapturableFor>> capturable;
  for (std::size_t r = 0; r < k; ++r) {
    capturable.push_back(
        std::make_unique<loop::CapturableFor>(tasks[r]->optimizer(), options_.graph));
  }
  // Every replica's lr from replica 0's base, so all replicas and ranks step alike.
  std::vector<optim::Optimizer*> optimizers;
  for (Task* t : tasks) optimizers.push_back(&t->optimizer());
  loop::ScheduledLr scheduled(options_.lr_schedule, optimizers);
  std::unique_ptr<StepGraph> graph;  // Note [Recorded steps]
  bool warmed_up = false;            // a full batch has run eagerly

  if (group != nullptr) take_rank0_generator(*host);  // Note [Each rank's random numbers]

  // Each step's loss: the replicas' and ranks' shares summed (every rank calls this at once).
  const auto all_step_losses = [&] {
    if (group == nullptr) return loop::step_losses_tensor(step_losses);
    AllowSync deliberate;  // the fit's last exchange
    const Tensor total = from_vector(step_losses, {static_cast<std::int64_t>(step_losses.size())},
                                     {kFloat64, cpu()});
    host->all_reduce(total);  // each rank logged its shards' share
    return loop::step_losses_tensor(total.to_vector<double>());
  };
  std::vector<EpochMetrics> history;
  for (int epoch = done_before + 1; epoch <= options_.max_epochs; ++epoch) {
    const auto start = loop::Clock::now();
    if (scheduled.begin_epoch(epoch)) graph.reset();  // Note [Scheduled learning rates]
    if (group != nullptr) set_rng_state(stream_of_rank(rng_state(), static_cast<int>(rank)));
    for (std::size_t r = 0; r < k; ++r) {
      tasks[r]->model().train();
      records[r].begin(train.batches());
    }
    loop::Progress progress(options_.progress && lead, epoch, options_.max_epochs, train.batches());
    std::int64_t done = 0;
    // Each rank gathers only its own rows of every batch (its part of `ranks`), each
    // replica's piece straight into its device's memory where the host writes it (logical
    // CPU devices), so prepare_batch copies nothing there (Note [One copy of a batch]).
    for (const std::vector<data::Batch>& pieces :
         train.split(static_cast<std::int64_t>(rank), static_cast<std::int64_t>(ranks), devices_)) {
      const std::int64_t batch = train.batch_length(done);
      detail::on_every_rank([&] { check_splittable(batch, ranks, k); });
      std::vector<std::int64_t> sizes;
      std::vector<data::Batch> on_devices;  // each replica's piece, on its device
      for (std::size_t r = 0; r < k; ++r) {
        sizes.push_back(pieces[r].examples());
        on_devices.push_back(prepare_batch(pieces[r], devices_[r]));
      }
      const bool full = batch == train.options().batch_size;
      std::vector<StepResult> results;
      if (options_.graph && full && warmed_up) {
        if (!graph) {
          graph = std::make_unique<StepGraph>(
              devices_, on_devices,
              [&](const std::vector<data::Batch>& in) { return replicas_step(in, batch); });
        }
        results = graph->run(on_devices);
      } else {
        results = replicas_step(on_devices, batch);
        warmed_up = warmed_up || full;
      }
      for (std::size_t r = 0; r < k; ++r) {
        const double share = static_cast<double>(sizes[r]) / static_cast<double>(batch);
        records[r].add(results[r], sizes[r], share);
      }
      progress.update(++done);
    }
    progress.finish();
    if (!buffers.empty()) buffers_from_first();  // before the validation pass reads them
    EpochMetrics m;
    m.epoch = epoch;
    m.lr = scheduled.lr();
    std::vector<loop::PassTotals> parts;
    const std::size_t first = step_losses.size();  // this epoch's first step
    for (const loop::StepRecord& record : records) {
      const loop::StepRecord::Read pass = record.read();
      parts.push_back(pass.totals);
      step_losses.resize(first + pass.step_losses.size());
      for (std::size_t i = 0; i < pass.step_losses.size(); ++i) {
        step_losses[first + i] += pass.step_losses[i];
      }
    }
    std::tie(m.train_loss, m.train_acc) = loop::PassTotals::average(parts, host);
    m.train_seconds = loop::seconds_since(start);  // the read waited for the devices
    m.val_loss = m.val_acc = std::numeric_limits<double>::quiet_NaN();
    if (val != nullptr) {
      const EpochMetrics v = evaluate(task, *val);
      m.val_loss = v.val_loss;
      m.val_acc = v.val_acc;
    }
    m.seconds = loop::seconds_since(start);
    history.push_back(m);
    // Its divergence check reads the loss reduced over the ranks: every rank throws alike.
    try {
      detail::on_every_rank([&] {
        loop::report_epoch(m, options_.max_epochs, options_.progress && lead, val != nullptr,
                           metrics, options_.lr_schedule != nullptr);
      });
    } catch (const NonFiniteError&) {
      step_losses_ = all_step_losses();  // the diverged run's steps: which one went NaN
      throw;
    }
    // Every rank goes on from rank 0's generator, as a run resumed from rank 0's file would
    // (Note [Each rank's random numbers]): shards of different sizes draw different counts
    // of numbers. After the last epoch every rank is left with rank 0's state.
    if (group != nullptr) take_rank0_generator(*host);
    loop::save_state(options_, task, scalers[0], train, epoch, lead, scheduled.base_description());
  }
  step_losses_ = all_step_losses();
  return history;
}

}  // namespace tessera::train
