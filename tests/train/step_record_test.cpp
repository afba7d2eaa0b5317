// StepRecord: each step's loss and correct count kept on the device and read once per pass
// (Note [Metrics on the device]).
#include "train/step_record.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "support/device_test.h"

namespace tessera::train::loop {
namespace {

using testing::DeviceTest;

class StepRecordTest : public DeviceTest {};

// A pass of steps with random losses (float32 and float64), batch sizes with a short last
// batch, correct counts and weights: the totals and the per-step log equal float64 sums made
// here in step order, to the bit.
TEST_P(StepRecordTest, TotalsAndStepLossesEqualAFloat64Reference) {
  constexpr int kSteps = 7;
  const std::vector<double> losses = testing::random_values(kSteps, 3, 0, 3);
  const std::vector<std::int64_t> examples{32, 32, 32, 32, 32, 32, 5};
  const std::vector<double> weights = testing::random_values(kSteps, 4, 0, 1);
  StepRecord record(device());
  record.begin(kSteps + 2);  // room to spare: a pass may end before its buffers do
  double loss_sum = 0, correct_sum = 0, n = 0;
  std::vector<double> logged;
  for (int i = 0; i < kSteps; ++i) {
    // Even steps give float32 losses (as models do), odd ones float64 (kept to the bit).
    const Dtype dtype = i % 2 == 0 ? kFloat32 : kFloat64;
    const Tensor loss = testing::make_input({losses[i]}, {}, dtype, device());
    const double held = loss.item<double>();
    const std::int64_t correct = (i * 5) % 17;
    record.add({loss, full({1}, static_cast<double>(correct), {kInt64, device()})}, examples[i],
               weights[i]);
    loss_sum += held * static_cast<double>(examples[i]);
    correct_sum += static_cast<double>(correct);
    n += static_cast<double>(examples[i]);
    logged.push_back(held * weights[i]);
  }
  const StepRecord::Read read = record.read();
  EXPECT_EQ(read.totals.loss_sum, loss_sum);
  EXPECT_EQ(read.totals.correct_sum, correct_sum);
  EXPECT_EQ(read.totals.examples, n);
  EXPECT_TRUE(read.totals.has_correct);
  EXPECT_EQ(read.step_losses, logged);
  const auto [mean_loss, accuracy] = PassTotals::average({read.totals});
  EXPECT_EQ(mean_loss, loss_sum / n);
  EXPECT_EQ(accuracy, correct_sum / n);
}

// A new pass starts from nothing; a pass whose steps count nothing correct has no accuracy
// (NaN), and several devices' totals average by their examples.
TEST_P(StepRecordTest, PassesStartAfreshAndAverageOverDevices) {
  StepRecord record(device());
  record.begin(2);
  record.add({full({}, 9.0, device()), full({}, 3.0, {kInt64, device()})}, 4);
  const PassTotals first = record.read().totals;
  record.begin(2);
  record.add({full({}, 1.0, device()), Tensor()}, 2);
  record.add({full({}, 2.0, device()), Tensor()}, 2);
  const StepRecord::Read second = record.read();
  EXPECT_EQ(second.step_losses, (std::vector<double>{1.0, 2.0}));
  EXPECT_FALSE(second.totals.has_correct);
  EXPECT_TRUE(std::isnan(PassTotals::average({second.totals}).second));
  const auto [loss, accuracy] = PassTotals::average({first, second.totals});
  EXPECT_EQ(loss, (9.0 * 4 + 1.0 * 2 + 2.0 * 2) / 8);
  EXPECT_EQ(accuracy, 3.0 / 8);
  StepRecord empty_pass(device());
  empty_pass.begin(3);
  EXPECT_TRUE(empty_pass.read().step_losses.empty());
}

// What a step costs: two operations (its loss's copy, its correct count's copy), recorded
// here where the Trainer's recorded steps would hold them; read once per pass.
TEST_P(StepRecordTest, AStepCostsTwoOperationsAndNoHostWait) {
  StepRecord record(device());
  record.begin(4);
  const Tensor loss = full({}, 0.5, device());
  const Tensor correct = full({}, 2.0, {kInt64, device()});
  synchronize();
  reset_transfer_stats();
  const Graph graph = Graph::capture(device(), [&] { record.add({loss, correct}, 8); });
  EXPECT_EQ(graph.node_count(), 2u);
  for (int i = 0; i < 3; ++i) record.add({loss, correct}, 8);
  EXPECT_EQ(transfer_stats().host_waits, 0u) << transfer_stats();
  graph.replay();  // wrote the first step's slots again, with the same values
  const StepRecord::Read read = record.read();
  EXPECT_EQ(read.totals.loss_sum, 0.5 * 8 * 4);
  EXPECT_EQ(read.totals.correct_sum, 2.0 * 4);
}

TESSERA_INSTANTIATE_DEVICE_SUITE(StepRecordTest);

}  // namespace
}  // namespace tessera::train::loop
