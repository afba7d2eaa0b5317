// Training-state files: a run saved and resumed in fresh objects ends where one run straight
// does (SGD momentum with a GradScaler, Adam), the file still loads as a plain checkpoint,
// and refused files (a plain checkpoint, another optimizer, a scaler missing) change nothing.
#include <stdlib.h>

#include <filesystem>

#include "support/device_test.h"
#include "support/temp_dir.h"
#include "tessera/nn/checkpoint.h"
#include "tessera/nn/linear.h"
#include "tessera/nn/sequential.h"
#include "tessera/ops.h"
#include "tessera/optim/adam.h"
#include "tessera/optim/sgd.h"
#include "tessera/random.h"
#include "tessera/safetensors.h"
#include "tessera/train/training_state.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::DeviceTest;
using testing::expect_throw_with;
using testing::random_values;
using testing::TempDir;

class TrainingState : public DeviceTest {
 protected:
  std::unique_ptr<nn::Sequential> make_net() const {
    manual_seed(3);
    return std::make_unique<nn::Sequential>(nn::Linear(4, 3, true, device()));
  }
  // Steps [from, to) of a scaled loop on a fixed batch per step: loss = mean(net(x)^2).
  void train(nn::Module& net, optim::Optimizer& opt, optim::GradScaler& scaler, int from,
             int to) const {
    for (int step = from; step < to; ++step) {
      opt.zero_grad();
      const Tensor x = testing::make_input(random_values(8, 50 + step), {2, 4}, kFloat32, device());
      const Tensor y = net(x);
      scaler.scale(mean(mul(y, y))).backward();
      scaler.step(opt);
      scaler.update();
    }
  }
};

TEST_P(TrainingState, ResumedRunEqualsStraightRun) {
  TempDir dir;
  const fs::path path = dir / "state.safetensors";
  const optim::GradScalerOptions so{.init_scale = 1024, .growth_interval = 2};
  auto straight = make_net();
  optim::SGD opt_straight(straight->parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::GradScaler scaler_straight(so);
  train(*straight, opt_straight, scaler_straight, 0, 6);

  auto first = make_net();
  optim::SGD opt_first(first->parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::GradScaler scaler_first(so);
  train(*first, opt_first, scaler_first, 0, 3);
  train::save_training_state(path, *first, opt_first, &scaler_first, 3, {{"note", "x"}});

  manual_seed(99);  // other initial values: all of them must come from the file
  nn::Sequential resumed(nn::Linear(4, 3, true, device()));
  optim::SGD opt_resumed(resumed.parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::GradScaler scaler_resumed(so);
  const auto meta = train::load_training_state(path, resumed, opt_resumed, &scaler_resumed);
  EXPECT_EQ(meta.at(train::kEpochKey), "3");
  EXPECT_EQ(meta.at("note"), "x");
  EXPECT_EQ(scaler_resumed.get_scale(), scaler_first.get_scale());
  train(resumed, opt_resumed, scaler_resumed, 3, 6);
  for (const auto& [name, t] : straight->state_dict()) {
    EXPECT_EQ(resumed.tensor(name).to_vector<double>(), t.to_vector<double>()) << name;
    EXPECT_EQ(resumed.tensor(name).device(), device()) << name;
  }
  EXPECT_EQ(scaler_resumed.get_scale(), scaler_straight.get_scale());

  // The file is a plain checkpoint to nn::load_checkpoint (tessera train --load).
  manual_seed(7);
  nn::Sequential plain(nn::Linear(4, 3, true, device()));
  nn::load_checkpoint(plain, path);
  for (const auto& [name, t] : first->state_dict()) {
    EXPECT_EQ(plain.tensor(name).to_vector<double>(), t.to_vector<double>()) << name;
  }
}

TEST_P(TrainingState, RefusedFilesChangeNothing) {
  TempDir dir;
  auto net = make_net();
  optim::SGD sgd(net->parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::GradScaler scaler;
  train(*net, sgd, scaler, 0, 1);
  const fs::path state = dir / "state.safetensors";
  const fs::path model = dir / "model.safetensors";
  train::save_training_state(state, *net, sgd, &scaler, 1);
  nn::save_checkpoint(*net, model);

  manual_seed(5);
  nn::Sequential other(nn::Linear(4, 3, true, device()));
  const auto weight_before = other.tensor("0.weight").to_vector<double>();
  optim::Adam adam(other.parameters(), {.lr = 0.01});
  optim::GradScaler other_scaler;
  expect_throw_with<Error>(
      [&] { train::load_training_state(model, other, adam, &other_scaler); },
      {"[load_training_state]", "is a model checkpoint without optimizer state",
       "nn::load_checkpoint"});
  expect_throw_with<Error>([&] { train::load_training_state(state, other, adam, &other_scaler); },
                           {"[Adam.load_state_dict] unknown key '0.momentum_buffer'"});
  optim::SGD other_sgd(other.parameters(), {.lr = 0.05, .momentum = 0.9});
  expect_throw_with<Error>([&] { train::load_training_state(state, other, other_sgd, nullptr); },
                           {"holds a GradScaler's state but no enabled scaler was given",
                            "tessera train --precision fp16"});
  EXPECT_EQ(other.tensor("0.weight").to_vector<double>(), weight_before);
  EXPECT_TRUE(other_sgd.state_dict().empty());
  EXPECT_EQ(other_scaler.get_scale(), 65536.0);
  expect_throw_with<Error>(
      [&] {
        train::save_training_state(state, *net, sgd, nullptr, 1, {{"epoch", "2"}});
      },
      {"metadata key 'epoch' is reserved"});
}

TEST_P(TrainingState, DamagedMetadataIsRefused) {
  TempDir dir;
  auto net = make_net();
  optim::SGD sgd(net->parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::GradScaler scaler;
  train(*net, sgd, scaler, 0, 1);
  const fs::path state = dir / "state.safetensors";
  train::save_training_state(state, *net, sgd, &scaler, 1);
  const SafetensorsFile good = load_safetensors(state);
  const auto damaged = [&](const std::string& key, const std::string& value) {
    std::map<std::string, std::string> meta = good.metadata;
    if (value.empty()) {
      meta.erase(key);
    } else {
      meta[key] = value;
    }
    const fs::path path = dir / "damaged.safetensors";
    save_safetensors(path, good.tensors, meta);
    return path;
  };
  const auto weight_before = net->tensor("0.weight").to_vector<double>();
  // std::stoi read "-3" as -3 (a run trained epochs -2 to 2) and "0x" as 0.
  for (const std::string& epoch : {"-3", "0x", " 0", "abc", "99999999999"}) {
    const fs::path path = damaged(train::kEpochKey, epoch);
    expect_throw_with<Error>(
        [&] { train::load_training_state(path, *net, sgd, &scaler); },
        {"[load_training_state]", path.string(), "'epoch' metadata is '" + epoch + "'",
         "not a whole number from 0 to 2147483647"});
  }
  // A control character in the file reaches no terminal raw (\r and an erase hid the error).
  const fs::path escape = damaged(train::kEpochKey, "\x1b[2K\r1");
  expect_throw_with<Error>([&] { train::load_training_state(escape, *net, sgd, &scaler); },
                           {"'epoch' metadata is '\\x1b[2K\\x0d1'"});
  const fs::path no_epoch = damaged(train::kEpochKey, "");
  expect_throw_with<Error>([&] { train::load_training_state(no_epoch, *net, sgd, &scaler); },
                           {"has no 'epoch' metadata"});
  const fs::path newer = damaged(train::kTrainingStateKey, "2");
  expect_throw_with<Error>([&] { train::load_training_state(newer, *net, sgd, &scaler); },
                           {"is a training state of format '2'", "reads format 1 only"});
  EXPECT_EQ(net->tensor("0.weight").to_vector<double>(), weight_before);
  EXPECT_EQ(train::load_training_state(state, *net, sgd, &scaler).at(train::kEpochKey), "1");
}

TESSERA_INSTANTIATE_DEVICE_SUITE(TrainingState);

}  // namespace
}  // namespace tessera
