#pragma once
// What a pass over a loader leaves for its metrics: each step's loss and correct count on
// the device, read once per pass. See Note [Metrics on the device] in trainer.cpp.
#include <cstdint>
#include <utility>
#include <vector>

#include "tessera/process_group.h"
#include "tessera/tensor.h"
#include "tessera/train/trainer.h"

namespace tessera::train::loop {

// A pass's totals on the host. Sums in float64: a float32 sum of a float64 model's losses
// drifted by about 3e-6 over 20,000 steps.
struct PassTotals {
  double loss_sum = 0;     // each step's loss times its examples
  double correct_sum = 0;  // correct predictions
  double examples = 0;
  bool has_correct = false;  // some step counted its correct predictions

  // Mean loss and accuracy (NaN without correct counts) over several devices' totals
  // (data-parallel replicas) and, when given, over every rank of `group` (one small
  // all-reduce; every rank calls it at once).
  static std::pair<double, double> average(const std::vector<PassTotals>& parts,
                                           const ProcessGroup* group = nullptr);
};

// One device's record of one pass. Each step costs two queued copies (its loss into a
// float64 slot, its correct count into an int64 slot of buffers sized for the pass); the
// examples and weights stay on the host; the sums are made on the host after the pass's one
// read. Summing there in step order gives the bits the float64 running sums on the device
// gave, with three fewer operations a step (a kernel launch each on a GPU).
class StepRecord {
 public:
  explicit StepRecord(Device device) : device_(device) {}

  // A new pass of at most `steps` steps.
  void begin(std::int64_t steps);
  // Queues copies of the step's loss and correct count (StepResult's contract, checked by
  // check_step_result). `weight` scales the step's entry in read()'s log: a replica's share
  // of the batch, so that the replicas' entries add up to the step's loss.
  void add(const StepResult& r, std::int64_t examples, double weight = 1);

  struct Read {
    PassTotals totals;
    std::vector<double> step_losses;  // each step's loss times its weight
  };
  // The pass's deliberate read (two copies to the host, waiting for the device).
  Read read() const;

 private:
  Device device_;
  Tensor losses_, correct_;  // float64 and int64, one slot per step
  std::vector<std::int64_t> examples_;
  std::vector<double> weights_;
  bool has_correct_ = false;
};

// Trainer::step_losses() of these steps' losses: float32 on the CPU.
Tensor step_losses_tensor(const std::vector<double>& losses);

}  // namespace tessera::train::loop
