// Training end to end on every device: an MLP fits XOR, one step on the CPU and on another
// device agree, and a training loop records no transfer and no host wait.
#include <cmath>

#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_close;

class Training : public DeviceTest {};

nn::Sequential make_mlp(Device d, int in, int hidden, int out) {
  return nn::Sequential(nn::Linear(in, hidden, true, d), nn::Tanh(),
                        nn::Linear(hidden, out, true, d));
}

TEST_P(Training, MlpFitsXor) {
  const Device d = device();
  manual_seed(0);
  nn::Sequential net = make_mlp(d, 2, 8, 2);
  const Tensor x = tensor({{0., 0.}, {0., 1.}, {1., 0.}, {1., 1.}}, d);
  const Tensor y = from_vector(std::vector<std::int64_t>{0, 1, 1, 0}, {4}, d);
  optim::Adam opt(net.parameters(), {.lr = 0.05});
  for (int step = 0; step < 300; ++step) {
    opt.zero_grad();
    nn::cross_entropy(net(x), y).backward();
    opt.step();
  }
  NoGradGuard no_grad;
  const Tensor logits = net(x);
  EXPECT_LT(nn::cross_entropy(logits, y).item<double>(), 0.05);
  EXPECT_EQ(argmax(logits, 1).to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 1, 1, 0}));
}

TEST_P(Training, OneStepMatchesTheCpu) {
  const Device d = device();
  auto one_step = [](Device on) {
    manual_seed(42);  // same seed: the same parameters and data on every device
    nn::Sequential net(nn::Linear(20, 16, true, on), nn::ReLU(), nn::Dropout(0.2),
                       nn::Linear(16, 5, true, on));
    const Tensor x = randn({32, 20}, on);
    const Tensor y = argmax(randn({32, 5}, on), 1);
    optim::SGD opt(net.parameters(), {.lr = 0.1, .momentum = 0.9});
    nn::cross_entropy(net(x), y).backward();
    opt.step();
    std::vector<std::vector<double>> params;
    for (const Tensor& p : net.parameters()) params.push_back(p.to_vector<double>());
    return params;
  };
  const auto here = one_step(d), on_cpu = one_step(cpu());
  ASSERT_EQ(here.size(), on_cpu.size());
  for (std::size_t i = 0; i < here.size(); ++i) {
    expect_close(here[i], on_cpu[i], 1e-5, 1e-6, "parameter " + std::to_string(i));
  }
}

TEST_P(Training, TrainingLoopRecordsNoTransferAndNoHostWait) {
  const Device d = device();
  manual_seed(1);
  nn::Sequential net(nn::Linear(10, 32, true, d), nn::ReLU(), nn::Linear(32, 3, true, d));
  const Tensor x = randn({64, 10}, d);
  const Tensor y = argmax(randn({64, 3}, d), 1);
  optim::SGD opt(net.parameters(), {.lr = 0.1});
  Tensor loss_sum = zeros({}, d);
  synchronize(d);
  reset_transfer_stats();
  {
    SyncGuard strict(SyncMode::kError);  // any implicit host wait throws
    for (int step = 0; step < 20; ++step) {
      opt.zero_grad();
      const Tensor loss = nn::cross_entropy(net(x), y);
      loss.backward();
      optim::clip_grad_norm_(net.parameters(), 1.0);
      opt.step();
      loss_sum.add_(loss.detach());
    }
  }
  EXPECT_EQ(transfer_stats(), TransferStats{});
  EXPECT_GT(loss_sum.item<double>(), 0);
}

TEST_P(Training, LossFallsAndParametersStayOnTheirDevice) {
  const Device d = device();
  manual_seed(3);
  nn::Sequential net(nn::Flatten(), nn::LazyLinear(16), nn::Sigmoid(), nn::LazyLinear(4));
  const Tensor x = randn({64, 2, 3}, d);
  const Tensor y = argmax(x.flatten(1).narrow(1, 0, 4), 1);  // a learnable rule
  net(x);                                                    // builds the lazy layers
  optim::SGD opt(net.parameters(), {.lr = 0.5});
  double first = 0, last = 0;
  for (int step = 0; step < 50; ++step) {
    opt.zero_grad();
    const Tensor loss = nn::cross_entropy(net(x), y);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, 0.7 * first);
  EXPECT_EQ(net.device(), d);
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Training);

}  // namespace
}  // namespace tessera
