#pragma once
/// Trainer: the book's Trainer(max_epochs, num_gpus, gradient_clip_val) in C++. It moves the
/// model to its first GPU (prepare_model) and each batch there (prepare_batch), and keeps
/// every metric on the device: a training step makes no host wait and no transfer besides
/// its batch; each step's loss and correct count are copied into device buffers, moved to
/// the host in one piece per epoch ("log on the device, move only larger logs").
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "tessera/data/loader.h"
#include "tessera/device.h"
#include "tessera/export.h"
#include "tessera/nn/module.h"
#include "tessera/optim/lr_schedule.h"
#include "tessera/optim/optimizer.h"
#include "tessera/process_group.h"

namespace tessera::train {

struct TESSERA_API TrainerOptions {
  int max_epochs = 10;
  /// GPUs to use: the first min(num_gpus, num_gpus()) (the book's default 0: the CPU). Asked
  /// for more than exist, the trainer says so once. Two or more train data-parallel (see
  /// `devices`).
  int num_gpus = 0;
  double gradient_clip_val = 0;  ///< clip the global gradient norm to this when > 0
  /// A progress bar with ETA when stderr is a terminal, one line per epoch otherwise.
  bool progress = true;
  /// One JSON object per epoch (epoch, train_loss, train_acc, val_loss, val_acc, seconds,
  /// train_seconds, lr; null for a value that is NaN or infinite). After each epoch the whole
  /// file is replaced in one step, as checkpoints are: a file there before stays until the
  /// first epoch ends, and a kill or a full disk never leaves a part (a write that fails
  /// stops the run with IOError). When resuming (resume_from) it continues the file's lines,
  /// less those of epochs past the resumed one (which the resumed run trains again); empty:
  /// none. Written by rank 0 alone across processes.
  std::filesystem::path metrics_path;
  /// Train on this device instead (any device: cuda:1, a logical cpu:1, the CPU); unset:
  /// the first GPU chosen by num_gpus, else the CPU.
  std::optional<Device> device;
  /// Also train across the processes of this group (ranks started by mpirun; see
  /// process_group.h): every rank calls fit with the same options, model and data, and each
  /// global batch of batch_size examples is split over all ranks' devices (Note [Data-parallel
  /// steps]). Only rank 0 prints and writes the metrics file. A group of one trains as this
  /// process alone would, through the group's collectives. nullptr: this process alone.
  const ProcessGroup* process_group = nullptr;
  /// Train data-parallel on these devices, all of one kind (cpu:0 and cpu:1, or GPUs): the
  /// model is replicated on each (Task::replicate, values broadcast from the first), each
  /// batch is split across them, the gradients are summed with collectives, and every
  /// replica's optimizer takes the same step. Frozen parameters (requires_grad off) and
  /// parameters no replica's loss reached keep no gradient, as on one device. Parameters of
  /// a half type have their gradients summed in that type (Note [Half collectives]); float32
  /// parameters under `precision` keep float32 gradients. The reduction takes over the
  /// parameters' grad-ready hooks (autograd.h) for the fit and removes them after it. Also
  /// with a process_group of several ranks. Empty: num_gpus or device decides.
  std::vector<Device> devices;
  /// Record the training step once as a graph (graph.h) and replay it for every batch of
  /// batch_size examples: forward, loss, backward, the gradient all-reduce, clipping, the
  /// optimizer step and the step's metrics cost the host one launch per device instead of
  /// every op's front-end cost. Results equal eager training. The first full batch of a fit
  /// runs eagerly (it creates the optimizer's state) and a shorter batch always does; the
  /// optimizer is made capturable for the fit (Optimizer::set_capturable). A step that
  /// draws random numbers on the host (dropout) or reads a value throws GraphCaptureError at
  /// the recording. On a GPU a graph holds one device: with several GPUs, DeviceError. A
  /// device records one graph at a time: a fit recording its step on a device another
  /// thread is recording on throws GraphCaptureError (fits on other devices run alongside).
  bool graph = false;
  /// The precision of the training and validation steps: kFloat32, or kBFloat16 / kFloat16
  /// to run them under AutocastGuard (autocast.h): matmul, linear and conv in the half type,
  /// softmax, the loss and the parameters (the optimizer's weights) in float32. float16
  /// steps also scale the loss with a GradScaler (optim/grad_scaler.h, default options, one
  /// per device), so small gradients keep their digits and a step whose gradients overflow
  /// is skipped on the device, without a host wait. Any other dtype: DtypeError from the
  /// constructor.
  Dtype precision = kFloat32;
  /// After every epoch, save the training state to this file (train/training_state.h: the
  /// model, the optimizer, the float16 step's gradient scaler, the epochs done and the random
  /// generator's position), atomically, replacing the epoch before; only rank 0 writes.
  /// An epoch whose loss diverged is not saved, so the file keeps the last good one. Empty:
  /// none.
  std::filesystem::path state_path;
  /// Continue the run whose state this file holds (as state_path writes it): fit loads it
  /// into the model and the optimizer (every replica's) and the gradient scaler, puts the
  /// random generator and the training loader's epoch where they were, and trains from the
  /// next epoch up to max_epochs, numbering epochs on from the file's; the result equals
  /// that of the run not interrupted. Error when the file holds max_epochs or more epochs,
  /// when the run saved another batch size, optimizer options (Optimizer::str: lr,
  /// momentum, ...; the lr as the optimizer was made, before any schedule) or lr_schedule than
  /// this one's, and the errors of load_training_state (a plain checkpoint, another model or
  /// optimizer).
  /// Empty: start afresh.
  std::filesystem::path resume_from;
  /// Before each epoch e (1-based), set the lr of the optimizer (every replica's, on every
  /// rank) to lr_schedule->lr(base, e - 1), where base is the lr the task's optimizer has when
  /// fit starts; after fit (also one that threw) each optimizer has its lr from before again.
  /// Resuming goes on with the schedule at the file's epoch; a state saved under another
  /// schedule (LrSchedule::str) is refused, as other optimizer options are. With `graph`,
  /// the step is recorded again in an epoch whose lr differs from the last (Note [Scheduled
  /// learning rates] in src/train/loop_parts.h). nullptr: the optimizer's lr throughout.
  std::shared_ptr<const optim::LrSchedule> lr_schedule;
};

/// What a training and a validation step return, on the device: the batch's mean loss
/// (0-dim, differentiable in training) and its number of correct predictions (0-dim int64;
/// undefined when the task has no notion of accuracy).
struct TESSERA_API StepResult {
  Tensor loss;
  Tensor correct;
};

/// The model, its optimizer and its steps: the book's d2l.Module. Override the steps for
/// another loss; the defaults classify with cross-entropy on model()(batch.x).
class TESSERA_API Task {
 public:
  virtual ~Task() = default;
  virtual nn::Module& model() = 0;
  virtual optim::Optimizer& optimizer() = 0;
  virtual StepResult training_step(const data::Batch& batch);
  /// Runs without recording a graph.
  virtual StepResult validation_step(const data::Batch& batch);
  /// Builds what waits for the first batch, as the book's Trainer does before fitting
  /// (apply_init on one batch): the parameters of lazy layers (nn::LazyLinear), by one call
  /// of the model on `example` without gradients, in eval mode (the mode is restored). The
  /// Trainer calls it before the first step when the model has lazy layers not built yet,
  /// with the first training batch on the model's device (override it for a model that does
  /// not take batch.x). A model without lazy layers is left as it is. Error when the optimizer
  /// lacks a parameter built here: it was made from model.parameters() before the layer had them,
  /// and would never train it (Classifier made by factories makes its optimizer here instead).
  virtual void build(const data::Batch& example);
  /// A new task with a model of the same architecture and an optimizer with the same
  /// settings, for a data-parallel replica (the trainer overwrites its values). The default
  /// throws Error saying how to provide one.
  virtual std::unique_ptr<Task> replicate();
};

using ModelFactory = std::function<std::shared_ptr<nn::Module>()>;
using OptimizerFactory =
    std::function<std::unique_ptr<optim::Optimizer>(const std::vector<Tensor>& params)>;

/// A Task for a classifier: given by reference (one device), or built by factories, which
/// also build the replicas of data-parallel training.
class TESSERA_API Classifier : public Task {
 public:
  Classifier(nn::Module& model, optim::Optimizer& optimizer)
      : model_(&model), optimizer_(&optimizer) {}
  Classifier(ModelFactory make_model, OptimizerFactory make_optimizer);
  nn::Module& model() override { return *model_; }
  /// Made by make_optimizer with the model's parameters; with lazy layers, once build()
  /// (the Trainer, before the first step) has made theirs. Error before that.
  optim::Optimizer& optimizer() override;
  void build(const data::Batch& example) override;
  std::unique_ptr<Task> replicate() override;

 private:
  void make_owned_optimizer();  // from make_optimizer_ and the model's parameters
  nn::Module* model_;
  optim::Optimizer* optimizer_ = nullptr;
  ModelFactory make_model_;
  OptimizerFactory make_optimizer_;
  std::shared_ptr<nn::Module> owned_model_;
  std::unique_ptr<optim::Optimizer> owned_optimizer_;
};

/// One epoch's numbers. train_loss is the mean over the epoch's training examples of each
/// step's loss (each batch weighted by its size, a short last batch too; with drop_last only
/// the examples trained), taken as the steps ran, so with the weights changing during the
/// epoch; train_acc the count of argmax == label over those examples, the same way.
/// val_loss and val_acc are the same over the validation data after the epoch, with the
/// epoch's final weights. Each step's loss is kept in float64 on the device, and the sums
/// are made in float64 after the epoch's one read.
/// The metrics file writes null for a value that is NaN or infinite.
struct TESSERA_API EpochMetrics {
  int epoch = 0;  ///< 1-based
  double train_loss = 0, train_acc = 0;
  double val_loss = 0, val_acc = 0;  ///< NaN without validation data
  double seconds = 0;                ///< the whole epoch, validation included
  double train_seconds = 0;          ///< the pass over the training data alone (throughput)
  double lr = 0;                     ///< the optimizer's lr during the epoch
};

class TESSERA_API Trainer {
 public:
  explicit Trainer(TrainerOptions options = {});
  virtual ~Trainer() = default;

  /// The devices it trains on: one (the first GPU, the chosen device, or cpu()), or the
  /// replicas' devices of data-parallel training.
  const std::vector<Device>& devices() const { return devices_; }
  Device device() const { return devices_.front(); }
  const TrainerOptions& options() const { return options_; }

  void prepare_model(nn::Module& model) const;
  /// prepare_batch(batch, device()).
  data::Batch prepare_batch(const data::Batch& batch) const {
    return prepare_batch(batch, device());
  }
  /// The book's prepare_batch: every tensor of `batch` (x, y and `more`), as the DataLoader
  /// made it, moved to `device` (data::to_device), for the step on that device. fit() and
  /// evaluate() call it for every batch, and for each device's share of it when training on
  /// several; with TrainerOptions::graph its result is copied into the recorded step's
  /// inputs, so it must keep the shapes and dtypes of every full batch alike. Override it to
  /// move or reshape batches another way (declare `using Trainer::prepare_batch;` to keep
  /// the one-argument form visible in the subclass).
  virtual data::Batch prepare_batch(const data::Batch& batch, Device device) const;

  /// Trains task.model() for max_epochs on `train`, validating on `val` after each epoch
  /// when given; returns each epoch's metrics (also printed and written per options). With
  /// several devices, throws Error for a batch smaller than the number of devices and for
  /// replicas whose parameters differ in names or shapes; across processes, also for ranks
  /// whose models or options differ (naming the difference, on every rank). Throws
  /// NonFiniteError naming the epoch when its mean training loss (or validation loss) is NaN
  /// or infinite: checked once per epoch on the sums already read, so no step waits; every
  /// rank throws the same. The model is left as the diverged run made it.
  std::vector<EpochMetrics> fit(Task& task, data::DataLoader& train,
                                data::DataLoader* val = nullptr);

  /// Every training step's loss of the last fit(), float32 on the CPU; after a fit that
  /// diverged (NonFiniteError), the steps it ran, to find the one that went NaN; undefined
  /// after a fit that threw otherwise.
  const Tensor& step_losses() const { return step_losses_; }

  /// Loss and accuracy of task.model() over `data` (evaluation mode, no graph), in val_loss
  /// and val_acc (the other fields stay 0). Moves the model to device() first, as fit() does.
  EpochMetrics evaluate(Task& task, data::DataLoader& data);

 private:
  std::vector<EpochMetrics> fit_replicas(Task& task, data::DataLoader& train,
                                         data::DataLoader* val);

  TrainerOptions options_;
  std::vector<Device> devices_;
  Tensor step_losses_;
};

}  // namespace tessera::train
