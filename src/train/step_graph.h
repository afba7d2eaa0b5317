#pragma once
// A training step recorded once as a graph and replayed for every batch of its size. See
// Note [Recorded steps].
#include <functional>
#include <memory>
#include <vector>

#include "tessera/data/loader.h"
#include "tessera/graph.h"
#include "tessera/train/trainer.h"

namespace tessera::train {

// Note [Recorded steps]
// With TrainerOptions::graph, a training step (zero_grad, forward, loss, backward, the
// gradient all-reduce between replicas, clipping, the optimizer step, the step's loss and
// correct count) is recorded once, over input tensors the recording owns, and each later
// batch of the same size, once Trainer::prepare_batch (which a user may override) has put
// it on the device, is copied into those inputs there and the recording replayed: the host
// pays its copies and one launch per device instead of the front end's cost of every op. The
// results the recording made (loss, correct) hold each replay's values, so the device-side
// metrics (Note [Metrics on the device]) are added from them as in eager training.
//
// What a replay cannot repeat is handled by when the recording is made: the first full
// batch runs eagerly, so the optimizer's state exists (SGD's host flag for a fresh momentum
// buffer is then fixed) and Adam counts its steps on the device (set_capturable); a batch
// of another size (the last, short one) runs eagerly. The recorded gradients are the
// recording's own tensors: eager steps in between allocate theirs, and the optimizer of a
// replay reads the recorded ones, so the two never mix. A step that draws random numbers
// on the host (dropout) or reads a value is refused at the recording with a
// GraphCaptureError that says so.
class StepGraph {
 public:
  // The step over one batch per device, already on the devices; returns each device's
  // result.
  using Step = std::function<std::vector<StepResult>(const std::vector<data::Batch>& shards)>;

  // Records `step` on `devices` over inputs of the shapes and dtypes of `like` (one batch per
  // device, on it). Throws GraphCaptureError naming the Trainer option when the step does
  // what a replay cannot repeat; the devices are then usable as before.
  StepGraph(const std::vector<Device>& devices, const std::vector<data::Batch>& like,
            const Step& step);

  // Copies each device's batch (prepare_batch's, on that device) into the recorded inputs
  // and replays; the results hold this step's values. Queued work only. Error when a batch's
  // tensors differ in shape, dtype or device from those recorded.
  const std::vector<StepResult>& run(const std::vector<data::Batch>& shards);
  // Operations in the recording (kernels, copies, collectives' parts).
  std::size_t nodes() const { return graph_->node_count(); }

 private:
  std::vector<data::Batch> inputs_;
  std::vector<StepResult> results_;
  std::unique_ptr<Graph> graph_;
};

}  // namespace tessera::train
