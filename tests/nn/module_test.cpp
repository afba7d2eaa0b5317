// nn::Module and the basic layers: registration, indexing, moving in place, the device audit,
// state dicts, lazy layers, and the errors users meet.
#include <cmath>
#include <functional>
#include <sstream>

#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_close;
using testing::expect_throw_with;

// The other device of a two-device run (cpu:1 when the suite runs on cpu:0, and so on).
Device other_device(Device d) {
  for (Device candidate : available_devices()) {
    if (candidate != d) return candidate;
  }
  return d;
}

// A user-defined model with named children, like a d2l.Module subclass.
class Mlp : public nn::Module {
 public:
  Mlp(int in, int hidden, int out, TensorOptions options = {})
      : Module("Mlp"),
        hidden_(register_module("hidden", std::make_shared<nn::Linear>(in, hidden, true, options))),
        out_(register_module("out", std::make_shared<nn::Linear>(hidden, out, true, options))) {
    scale = register_buffer("scale", ones({out}, options));
  }
  Tensor forward(const Tensor& x) override { return out_(relu(hidden_(x))) * scale; }
  Tensor scale;

 private:
  Module& hidden_;
  Module& out_;
};

class Modules : public DeviceTest {};

TEST_P(Modules, LinearMatchesReferenceOnItsDevice) {
  const Device d = device();
  manual_seed(3);
  nn::Linear layer(3, 2, true, {kFloat64, d});
  EXPECT_EQ(layer.weight.device(), d);
  EXPECT_EQ(layer.weight.shape(), Shape({2, 3}));
  EXPECT_TRUE(layer.weight.requires_grad());
  const auto w = layer.weight.to_vector<double>(), b = layer.bias.to_vector<double>();
  for (double v : w) EXPECT_LE(std::abs(v), 1 / std::sqrt(3.0));
  const std::vector<double> xs = testing::random_values(4 * 3, 7);
  const Tensor y = layer(from_vector(xs, {4, 3}, {kFloat64, d}));
  EXPECT_EQ(y.device(), d);
  std::vector<double> expected(8);
  for (int i = 0; i < 4; ++i) {
    for (int o = 0; o < 2; ++o) {
      double acc = b[o];
      for (int k = 0; k < 3; ++k) acc += xs[i * 3 + k] * w[o * 3 + k];
      expected[i * 2 + o] = acc;
    }
  }
  expect_close(y, expected, 1e-12, 1e-12);
}

TEST_P(Modules, SequentialIsIndexableAndNamesItsParameters) {
  nn::Sequential net(nn::Linear(2, 8, true, device()), nn::ReLU(),
                     nn::Linear(8, 1, true, device()));
  ASSERT_EQ(net.size(), 3u);
  EXPECT_EQ(net[1].type_name(), "ReLU");
  // The seed's net[0].weight.data.device, in two spellings.
  EXPECT_EQ(net.at<nn::Linear>(0).weight.device(), device());
  EXPECT_TRUE(net[0].tensor("weight").is_same(net.at<nn::Linear>(0).weight));
  EXPECT_TRUE(net.tensor("2.bias").is_same(net.at<nn::Linear>(2).bias));
  std::vector<std::string> names;
  for (auto& [name, t] : net.named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  EXPECT_EQ(net.parameters().size(), 4u);
  EXPECT_EQ(net[2].path(), "Sequential[2]");
  EXPECT_NE(net.str().find("(0): Linear(in_features=2, out_features=8, bias=true)"),
            std::string::npos)
      << net.str();
  std::ostringstream printed;  // as print(net)
  printed << net;
  EXPECT_EQ(printed.str(), net.str());
  expect_throw_with<Error>([&] { net.at<nn::Linear>(1); }, {"Sequential[1] is a ReLU"});
  expect_throw_with<Error>([&] { net[3]; }, {"has 3 modules", "[3]"});
  expect_throw_with<Error>(
      [&] { net[static_cast<std::size_t>(-1)]; },
      {"[-1]", "cannot be negative", "the last module is [size() - 1], here [2]"});
  // An empty one has no last module (it printed [18446744073709551615]).
  expect_throw_with<Error>([&] { nn::Sequential()[static_cast<std::size_t>(-1)]; },
                           {"cannot be negative; this Sequential is empty"});
  expect_throw_with<Error>([&] { net.tensor("0.scale"); },
                           {"[Module::tensor] Sequential[0] (Linear) has no parameter or "
                            "buffer 'scale'",
                            "weight"});
  const Tensor y = net(rand({5, 2}, device()));
  EXPECT_EQ(y.shape(), Shape({5, 1}));
}

TEST_P(Modules, UserModulesRegisterChildrenAndBuffers) {
  Mlp net(4, 6, 3, device());
  std::vector<std::string> names;
  for (auto& [name, t] : net.state_dict()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"hidden.bias", "hidden.weight", "out.bias",
                                             "out.weight", "scale"}));
  EXPECT_EQ(net.buffers().size(), 1u);
  EXPECT_FALSE(net.scale.requires_grad());
  EXPECT_EQ(net.named_modules().size(), 3u);
  EXPECT_EQ(net.named_modules()[1].second->path(), "Mlp.hidden");
  // Dotted paths, as parameters are named: a name joins with ".weight" to name one.
  std::vector<std::string> modules;
  for (auto& [name, m] : net.named_modules()) modules.push_back(name);
  EXPECT_EQ(modules, (std::vector<std::string>{"", "hidden", "out"}));
  EXPECT_TRUE(net.tensor(modules[1] + ".weight").is_same(net.tensor("hidden.weight")));
  nn::Sequential nested(nn::Sequential(nn::Linear(2, 2, true, device())), nn::ReLU());
  std::vector<std::string> deep;
  for (auto& [name, m] : nested.named_modules()) deep.push_back(name);
  EXPECT_EQ(deep, (std::vector<std::string>{"", "0", "0.0", "1"}));
  EXPECT_EQ(net(rand({2, 4}, device())).shape(), Shape({2, 3}));
  net.eval();
  EXPECT_FALSE(net.named_modules()[2].second->is_training());
}

TEST_P(Modules, ToMovesParametersBuffersAndGradsInPlace) {
  TESSERA_REQUIRE_TWO_DEVICES();
  const Device d = device(), other = other_device(d);
  Mlp net(4, 6, 3, d);
  const Tensor weight = net.tensor("hidden.weight");  // a handle taken before the move
  const auto before = weight.to_vector<double>();
  sum(net(rand({2, 4}, d))).backward();
  net.to(other);
  EXPECT_EQ(net.device(), other);
  EXPECT_EQ(weight.device(), other) << "handles taken before to() must follow the move";
  EXPECT_EQ(net.scale.device(), other);
  ASSERT_TRUE(weight.grad().defined());
  EXPECT_EQ(weight.grad().device(), other);
  EXPECT_EQ(weight.to_vector<double>(), before);
  EXPECT_EQ(net(rand({2, 4}, other)).device(), other);
}

TEST_P(Modules, ToConvertsDtypeInPlace) {
  nn::Sequential net(nn::Linear(3, 2, true, device()));
  const Tensor w = net.tensor("0.weight");
  const auto before = w.to_vector<double>();
  net.to(kFloat64);
  EXPECT_EQ(w.dtype(), kFloat64);
  EXPECT_TRUE(w.requires_grad());
  expect_close(w.to_vector<double>(), before, 0, 0);
  expect_throw_with<DtypeError>([&] { net.to(kInt32); }, {"floating dtypes only"});
  expect_throw_with<DtypeError>(
      [&] {
        net(rand({1, 3}, device()));
      },
      {"float64 parameters but the input is float32", "or the model with .to(kFloat32)"});
  // An integer input must move: a model converts to floating dtypes only.
  try {
    net(tensor({{1, 2, 3}}, device()));
    ADD_FAILURE() << "an int64 input was accepted";
  } catch (const DtypeError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("convert the input with .to(kFloat64)"), std::string::npos) << what;
    EXPECT_EQ(what.find("the model"), std::string::npos) << what;
  }
}

TEST_P(Modules, DeviceAuditListsTensorsThatDiffer) {
  TESSERA_REQUIRE_TWO_DEVICES();
  const Device d = device(), other = other_device(d);
  nn::Sequential net(nn::Linear(2, 2, true, d), nn::Linear(2, 2, true, other));
  expect_throw_with<DeviceMismatchError>(
      [&] { net.device(); },
      {"2 devices", "Sequential[0].weight on " + d.str(), "Sequential[1].bias on " + other.str()});
  nn::Sequential lazy(nn::LazyLinear(1));
  expect_throw_with<Error>([&] { lazy.device(); }, {"no parameters or buffers yet"});
  nn::Sequential empty{nn::ReLU()};  // nothing to build: calling it gives it no device
  expect_throw_with<Error>([&] { empty.device(); },
                           {"holds no parameters or buffers, so it has no device of its own"});
}

TEST_P(Modules, CallingOnAnotherDeviceNamesTheParameter) {
  TESSERA_REQUIRE_TWO_DEVICES();
  const Device d = device(), other = other_device(d);
  nn::Sequential net(nn::Linear(2, 2, true, d));
  net.set_name("net");
  expect_throw_with<DeviceMismatchError>(
      [&] {
        net(rand({1, 2}, other));
      },
      {"net[0].weight is on " + d.str(), "input is on " + other.str(), "x.to("});
}

TEST_P(Modules, LazyLinearBuildsOnTheInputsDeviceOrWhereItWasMoved) {
  const Device d = device();
  nn::Sequential net(nn::LazyLinear(1));
  EXPECT_FALSE(net.at<nn::LazyLinear>(0).built());
  EXPECT_TRUE(net.parameters().empty());
  const Tensor y = net(rand({2, 20}, d));
  EXPECT_EQ(y.shape(), Shape({2, 1}));
  EXPECT_EQ(net.at<nn::LazyLinear>(0).weight.shape(), Shape({1, 20}));
  EXPECT_EQ(net.device(), d);
  EXPECT_EQ(net.parameters().size(), 2u);
  // Loading into one not built yet says what helps (strict=false would load nothing).
  nn::Sequential unbuilt(nn::LazyLinear(1));
  expect_throw_with<Error>([&] { unbuilt.load_state_dict(net.state_dict()); },
                           {"unexpected 0.bias, 0.weight", "Sequential[0] has no parameters yet",
                            "run the model once on an input before loading"});

  // Moved before its first call: the parameters are made there, and the input is checked.
  for (Device target : available_devices()) {
    nn::Sequential placed(nn::LazyLinear(3));
    placed.to(target);
    EXPECT_EQ(placed.device(), target);
    if (target != d) {
      expect_throw_with<DeviceMismatchError>(
          [&] {
            placed(rand({2, 5}, d));
          },
          {"was moved to " + target.str()});
      EXPECT_FALSE(placed.at<nn::LazyLinear>(0).built()) << "a failed call must build nothing";
    }
    EXPECT_EQ(placed(rand({2, 5}, target)).device(), target);
    EXPECT_EQ(placed.at<nn::LazyLinear>(0).weight.device(), target);
  }
  // An input of a dtype its parameters cannot take builds nothing either (it was built
  // with in_features=3 and then refused every other input).
  nn::LazyLinear lazy(4);
  expect_throw_with<DtypeError>(
      [&] {
        lazy(ones({2, 3}, {kInt64, d}));
      },
      {"[LazyLinear]", "float32 parameters but the input is int64"});
  EXPECT_FALSE(lazy.built());
  nn::LazyLinear wide(4);
  wide.to(kFloat64);
  expect_throw_with<DtypeError>([&] { wide(ones({2, 3}, d)); }, {"float64 parameters"});
  EXPECT_FALSE(wide.built());
  EXPECT_EQ(lazy(ones({2, 5}, d)).shape(), Shape({2, 4}));
  expect_throw_with<ShapeError>([&] { nn::LazyLinear(0); },
                                {"[LazyLinear] out_features must be positive, got 0"});
}

TEST_P(Modules, StateDictRoundTripsAndBadStateLeavesTheModelUntouched) {
  const Device d = device();
  manual_seed(1);
  Mlp a(4, 6, 3, d);
  manual_seed(2);
  Mlp b(4, 6, 3, {kFloat64, d});
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.tensor("out.weight").dtype(), kFloat64) << "loading converts into the module's dtype";
  expect_close(b.tensor("out.weight").to_vector<double>(),
               a.tensor("out.weight").to_vector<double>(), 0, 0);

  const auto kept = b.tensor("hidden.weight").to_vector<double>();
  nn::StateDict bad = a.state_dict();
  bad["hidden.weight"] = zeros({6, 4}, d);
  bad["out.weight"] = zeros({3, 5}, d);  // wrong shape, checked before anything is written
  expect_throw_with<ShapeError>([&] { b.load_state_dict(bad); },
                                {"out.weight has shape [3, 6] in the module but [3, 5]"});
  EXPECT_EQ(b.tensor("hidden.weight").to_vector<double>(), kept);

  nn::StateDict partial = a.state_dict();
  partial.erase("scale");
  partial["extra"] = zeros({1}, d);
  expect_throw_with<Error>([&] { b.load_state_dict(partial); },
                           {"missing scale", "unexpected extra", "strict=false"});
  EXPECT_NO_THROW(b.load_state_dict(partial, false));
}

TEST_P(Modules, ZeroGradAndApply) {
  nn::Sequential net(nn::Linear(3, 4, true, device()), nn::Tanh(),
                     nn::Linear(4, 1, true, device()));
  sum(net(rand({2, 3}, device()))).backward();
  for (const Tensor& p : net.parameters()) EXPECT_TRUE(p.grad().defined());
  net.zero_grad();
  for (const Tensor& p : net.parameters()) EXPECT_FALSE(p.grad().defined());
  int linears = 0;
  net.apply([&](nn::Module& m) {
    if (auto* l = dynamic_cast<nn::Linear*>(&m)) {
      nn::init::constant_(l->weight, 0.5);
      ++linears;
    }
  });
  EXPECT_EQ(linears, 2);
  for (double v : net.at<nn::Linear>(2).weight.to_vector<double>()) EXPECT_EQ(v, 0.5);
}

TEST_P(Modules, DropoutScalesInTrainingAndPassesInEval) {
  manual_seed(5);
  nn::Dropout drop(0.25);
  const Tensor x = ones({100000}, device());
  const auto y = drop(x).to_vector<double>();
  double kept = 0, total = 0;
  for (double v : y) {
    EXPECT_TRUE(v == 0 || std::abs(v - 1 / 0.75) < 1e-6) << v;
    kept += v != 0;
    total += v;
  }
  EXPECT_NEAR(kept / y.size(), 0.75, 0.01);
  EXPECT_NEAR(total / y.size(), 1.0, 0.02);
  drop.eval();
  EXPECT_TRUE(drop(x).is_same(x));
  EXPECT_THROW(nn::Dropout(1.5), Error);
  nn::Dropout all(1.0);
  EXPECT_EQ(sum(all(x)).item<double>(), 0);
  // p is public: a value set later is checked where it is used, in training and in eval.
  for (const double bad : {-0.5, 2.0}) {
    all.p = bad;
    for (const bool training : {true, false}) {
      all.train(training);
      expect_throw_with<Error>([&] { all(x); },
                               {"[Dropout] Dropout's p is a probability in [0, 1], got"});
    }
  }
}

// A layer its own shared_ptr keeps alive outlives its model: it is nobody's child then (its
// path followed a pointer to the freed model), and another model may take it.
TEST_P(Modules, ALayerThatOutlivesItsModelBelongsToNoModel) {
  auto layer = std::make_shared<nn::Linear>(2, 3, true, device());
  {
    nn::Sequential first;
    first.push_back(layer);
    EXPECT_EQ(layer->path(), "Sequential[0]");
  }
  EXPECT_EQ(layer->path(), "Linear");
  nn::Sequential second{nn::ReLU()};
  second.push_back(layer);
  EXPECT_EQ(layer->path(), "Sequential[1]");
  expect_throw_with<ShapeError>([&] { second(ones({1, 5}, device())); }, {"Sequential[1]"});
  // A moved-to model is no model's child: its parent still holds the moved-from one.
  nn::Sequential outer;
  auto inner = std::make_shared<nn::Sequential>(nn::Linear(2, 2, true, device()));
  outer.push_back(inner);
  nn::Sequential moved(std::move(*inner));
  EXPECT_EQ(moved.path(), "Sequential");
  EXPECT_EQ(moved[0].path(), "Sequential[0]");
}

// Bad arguments are refused where they are given, naming the layer and the fix.
TEST_P(Modules, LayerArgumentsAreCheckedAtConstruction) {
  nn::Sequential net{nn::Linear(2, 3, true, device()), nn::ReLU()};
  expect_throw_with<Error>([&] { net[static_cast<std::size_t>(-1)]; },
                           {"[Sequential] Sequential[-1]: indices count from 0 and cannot be "
                            "negative; the last module is [size() - 1], here [1]"});
  expect_throw_with<DtypeError>(
      [&] {
        nn::Linear(2, 3, true, {kInt64, device()});
      },
      {"[Linear] parameters are floating-point, got dtype int64"});
  expect_throw_with<DtypeError>(
      [&] {
        nn::Conv2d(1, 2, {3, 3}, {}, true, {kBool, device()});
      },
      {"[Conv2d] parameters are floating-point, got dtype bool"});
  expect_throw_with<ShapeError>(
      [&] {
        nn::Conv2d(1, 2, {3, 3}, {.stride = {0, 1}});
      },
      {"[Conv2d] stride must be positive and padding non-negative, got stride=(0, 1) and "
       "padding=(0, 0)"});
  expect_throw_with<ShapeError>(
      [&] {
        nn::Conv2d(1, 2, {3, 3}, {.padding = {1, -1}});
      },
      {"padding=(1, -1)"});
  // Out of memory, a layer's message names the layer and the parameter (it named uniform).
  synchronize(device());
  set_memory_limit(device(), memory_stats(device()).in_use + 1000);
  expect_throw_with<OutOfMemoryError>(
      [&] { nn::Linear(100, 100, true, device()); },
      {"[Linear] a parameter of shape [100, 100]: ", "out of memory on " + device().str()});
  expect_throw_with<OutOfMemoryError>([&] { nn::Conv2d(8, 8, 3, {}, true, device()); },
                                      {"[Conv2d] weight [8, 8, 3, 3]: ", "out of memory"});
  set_memory_limit(device(), SIZE_MAX);
  // Pools too, at construction: MaxPool2d(0) was accepted until its first forward.
  expect_throw_with<ShapeError>(
      [] { nn::MaxPool2d(0); },
      {"[MaxPool2d] kernel sizes must be positive", "kernel_size=(0, 0)"});
  expect_throw_with<ShapeError>([] { nn::AvgPool2d(2, -1); }, {"[AvgPool2d]", "stride=(-1, -1)"});
  expect_throw_with<ShapeError>(
      [] { nn::AvgPool2d(2, 0, 2); },
      {"[AvgPool2d] padding (2, 2) must be at most half the kernel (2x2)"});
  EXPECT_EQ(nn::MaxPool2d(3, 0, 1).extra_repr(),
            "kernel_size=(3, 3), stride=(3, 3), padding=(1, 1)");
}

// A move that runs out of memory leaves the whole model where it was, lazy layers included:
// they had recorded the new device (and dtype), and every input was refused on both.
TEST_P(Modules, AMoveOutOfMemoryLeavesTheModelWhereItWas) {
  if (device().is_cuda()) GTEST_SKIP() << "the CPU's limit is exact enough to place";
  const std::vector<Device> devices = same_kind_devices();
  const Device to = devices.size() > 1 ? devices[1] : device();
  nn::Sequential net(nn::Linear(100, 100, true, device()), nn::ReLU(),
                     nn::Linear(100, 100, true, device()), nn::LazyLinear(10));
  // Room for one weight of the new placement, not two.
  const auto short_of_memory = [&](Device on, std::size_t room, const std::function<void()>& move) {
    synchronize(on);
    set_memory_limit(on, memory_stats(on).in_use + room);
    EXPECT_THROW(move(), OutOfMemoryError);
    set_memory_limit(on, SIZE_MAX);
  };
  if (to != device()) {
    short_of_memory(to, 60000, [&] { net.to(to); });
    EXPECT_EQ(net.device(), device());
  }
  short_of_memory(device(), 100000, [&] { net.to(kFloat64); });
  const Tensor y = net(ones({2, 100}, device()));
  EXPECT_EQ(y.device(), device());
  EXPECT_EQ(y.dtype(), kFloat32);
}

// A lazy layer whose first call runs out of memory stays unbuilt: its weight was registered
// before the bias failed, with in_features 0, and every later call was refused.
TEST_P(Modules, ALazyLayerOutOfMemoryAtItsFirstCallStaysUnbuilt) {
  if (device().is_cuda()) GTEST_SKIP() << "the CPU's limit is exact enough to place";
  nn::LazyLinear layer(1000);
  const Tensor x = ones({2, 1000}, device());
  synchronize(device());
  set_memory_limit(device(), memory_stats(device()).in_use + 1000 * 1000 * 4 + 100);
  EXPECT_THROW(layer(x), OutOfMemoryError);
  set_memory_limit(device(), SIZE_MAX);
  EXPECT_FALSE(layer.built());
  EXPECT_TRUE(layer.named_parameters().empty());
  EXPECT_EQ(layer(x).shape(), Shape({2, 1000}));
}

// A tensor registered under two names (tied weights) is one parameter: listed once, stepped
// once, its gradient counted once by clipping; the state dict keeps both names.
TEST_P(Modules, TiedWeightsAreOneParameterWithTwoNames) {
  struct Tied : nn::Module {
    std::shared_ptr<nn::Linear> enc, dec;
    explicit Tied(Device d) : nn::Module("Tied") {
      enc = std::make_shared<nn::Linear>(4, 4, false, d);
      register_module("enc", enc);
      dec = std::make_shared<nn::Linear>(4, 4, false, d);
      register_module("dec", dec);
      register_parameter("w", enc->weight);
    }
    Tensor forward(const Tensor& x) override { return (*enc)(x); }
  };
  Tied m(device());
  const auto named = m.named_parameters();
  ASSERT_EQ(named.size(), 2U);
  EXPECT_EQ(named[0].first, "w");
  EXPECT_EQ(named[1].first, "dec.weight");
  EXPECT_EQ(m.parameters().size(), 2U);
  EXPECT_EQ(m.named_parameters(true, false).size(), 3U);
  const nn::StateDict state = m.state_dict();
  EXPECT_EQ(state.size(), 3U);
  EXPECT_TRUE(state.count("enc.weight") == 1 && state.count("w") == 1);
  m(ones({1, 4}, device())).sum().backward();
  // Each of the 16 weights has gradient 1: the norm is 4 (counted twice it was 4 * sqrt(2)).
  EXPECT_NEAR(optim::clip_grad_norm_(m.parameters(), 1e9).item<double>(), 4.0, 1e-6);
  optim::Adam adam(m.parameters());  // refused the list before: "the same tensor as 0"
  adam.step();
  m.load_state_dict(state);
}

// A tensor under several names is converted once by to(): each name made its own copy, so a
// move with room for the model ran out of memory (3 names, 3 copies at the peak).
TEST_P(Modules, TiedWeightsMoveOnce) {
  if (device().is_cuda()) GTEST_SKIP() << "the CPU's limit is exact enough to place";
  struct Tied : nn::Module {
    std::shared_ptr<nn::Linear> enc;
    explicit Tied(Device d) : nn::Module("Tied") {
      enc = std::make_shared<nn::Linear>(500, 500, false, d);
      register_module("enc", enc);
      register_parameter("w", enc->weight);
      register_parameter("w2", enc->weight);
    }
    Tensor forward(const Tensor& x) override { return (*enc)(x); }
  };
  const std::vector<Device> devices = same_kind_devices();
  const Device to = devices.size() > 1 ? devices[1] : device();
  Tied m(device());
  const std::size_t weight = 500 * 500 * 4;
  // Room for one copy of the weight, not two (float64: twice the bytes).
  const auto with_room_for_one = [&](Device on, std::size_t copy,
                                     const std::function<void()>& move) {
    synchronize(on);
    set_memory_limit(on, memory_stats(on).in_use + copy * 3 / 2);
    EXPECT_NO_THROW(move());
    set_memory_limit(on, SIZE_MAX);
  };
  if (to != device()) {
    with_room_for_one(to, weight, [&] { m.to(to); });
    EXPECT_EQ(m.enc->weight.device(), to);
  }
  with_room_for_one(to, 2 * weight, [&] { m.to(kFloat64); });
  EXPECT_EQ(m.enc->weight.dtype(), kFloat64);
  EXPECT_TRUE(m.tensor("w").is_same(m.enc->weight));
  EXPECT_TRUE(m.tensor("w2").is_same(m.enc->weight));
}

TEST_P(Modules, FlattenAndActivations) {
  const Tensor x = from_vector(std::vector<double>{-1, 0, 2, -3, 4, 5}, {1, 2, 3}, device());
  EXPECT_EQ(nn::Flatten()(x).shape(), Shape({1, 6}));
  EXPECT_EQ(nn::Flatten(0)(x).shape(), Shape({6}));
  expect_close(nn::ReLU()(x), {0, 0, 2, 0, 4, 5}, 0, 0);
  expect_close(nn::Sigmoid()(x).flatten(),
               {1 / (1 + std::exp(1.0)), 0.5, 1 / (1 + std::exp(-2.0)), 1 / (1 + std::exp(3.0)),
                1 / (1 + std::exp(-4.0)), 1 / (1 + std::exp(-5.0))},
               1e-6, 1e-7);
  expect_close(
      nn::Tanh()(x).flatten(),
      {std::tanh(-1.0), 0, std::tanh(2.0), std::tanh(-3.0), std::tanh(4.0), std::tanh(5.0)}, 1e-6,
      1e-7);
}

// GELU and SiLU print as PyTorch's and compute their functions (tested in activation_test).
TEST_P(Modules, GeluAndSiluModules) {
  const Tensor x =
      from_vector(std::vector<double>{-1, 0, 2, -3, 4, 5}, {2, 3}, {kFloat32, device()});
  auto phi = [](double v) { return 0.5 * std::erfc(-v / std::sqrt(2.0)); };
  auto gelu_tanh_ref = [](double v) {
    return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  };
  std::vector<double> exact, by_tanh, swish;
  for (double v : {-1.0, 0.0, 2.0, -3.0, 4.0, 5.0}) {
    exact.push_back(v * phi(v));
    by_tanh.push_back(gelu_tanh_ref(v));
    swish.push_back(v / (1 + std::exp(-v)));
  }
  expect_close(nn::GELU()(x), exact, 1e-6, 1e-7, "GELU");
  expect_close(nn::GELU(GeluApproximation::kTanh)(x), by_tanh, 1e-6, 1e-7, "GELU tanh");
  expect_close(nn::SiLU()(x), swish, 1e-6, 1e-7, "SiLU");
  EXPECT_EQ(nn::GELU().str(), "GELU(approximate='none')\n");
  EXPECT_EQ(nn::GELU(GeluApproximation::kTanh).str(), "GELU(approximate='tanh')\n");
  EXPECT_EQ(nn::SiLU().str(), "SiLU()\n");
  nn::Sequential net(nn::Linear(3, 4, true, device()), nn::GELU(), nn::Linear(4, 2, true, device()),
                     nn::SiLU());
  EXPECT_NE(net.str().find("(1): GELU(approximate='none')"), std::string::npos) << net.str();
  EXPECT_NE(net.str().find("(3): SiLU()"), std::string::npos) << net.str();
  EXPECT_EQ(net(x).shape(), Shape({2, 2}));
}

TEST_P(Modules, ShapeErrorsNameTheLayer) {
  nn::Sequential net(nn::Linear(4, 2, true, device()));
  expect_throw_with<ShapeError>(
      [&] {
        net(rand({3, 5}, device()));
      },
      {"Sequential[0] expects inputs whose last dim is in_features=4", "[3, 5]"});
  EXPECT_THROW(nn::Linear(0, 3), ShapeError);
}

// Note [Errors name the layer]: an op's error inside a model says which layer it came from,
// once, as the same error type; Linear's own message (which names its path) is not repeated,
// and a layer called on its own is no model's layer.
TEST_P(Modules, ErrorsInsideAModelNameTheLayer) {
  auto block = std::make_shared<nn::Sequential>(nn::Conv2d(1, 1, 5, {}, true, device()));
  nn::Sequential net(nn::ReLU(), block, nn::MaxPool2d(5), nn::Flatten(4));
  expect_throw_with<ShapeError>(
      [&] {
        net(ones({1, 1, 3, 3}, device()));
      },
      {"[conv2d] the kernel (5 along H)", "(in Sequential[1][0], a Conv2d)"});
  try {
    net(ones({1, 1, 3, 3}, device()));
  } catch (const ShapeError& e) {
    EXPECT_EQ(std::string(e.what()).find("(in Sequential[1],"), std::string::npos) << e.what();
  }
  nn::Sequential pool(nn::ReLU(), nn::MaxPool2d(5));
  expect_throw_with<ShapeError>(
      [&] {
        pool(ones({1, 1, 3, 3}, device()));
      },
      {"[max_pool2d]", "(in Sequential[1], a MaxPool2d)"});
  nn::Sequential flat(nn::Flatten(4));
  expect_throw_with<Error>(
      [&] {
        flat(ones({2, 3}, device()));
      },
      {"[flatten]", "(in Sequential[0], a Flatten)"});
  nn::Sequential lin(nn::Linear(4, 2, true, device()));
  try {
    lin(ones({3, 5}, device()));
    ADD_FAILURE() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_EQ(std::string(e.what()).find("(in Sequential[0]"), std::string::npos) << e.what();
  }
  try {
    nn::MaxPool2d(5)(ones({1, 1, 3, 3}, device()));
    ADD_FAILURE() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_EQ(std::string(e.what()).find("(in "), std::string::npos) << e.what();
  }
}

TEST_P(Modules, InitializersHaveTheirStatisticsAndStayOnTheDevice) {
  const Device d = device();
  manual_seed(11);
  Tensor w = empty({256, 512}, d);
  reset_transfer_stats();
  nn::init::xavier_uniform_(w);
  nn::init::kaiming_normal_(w);
  nn::Linear made_there(512, 256, true, d);
  const TransferStats stats = transfer_stats();
  EXPECT_EQ(stats.copies(), 0u) << "initialization must not go through the host";
  const auto v = w.to_vector<double>();
  double m = 0, sq = 0;
  for (double x : v) m += x, sq += x * x;
  m /= v.size();
  EXPECT_NEAR(m, 0, 0.01);
  EXPECT_NEAR(std::sqrt(sq / v.size() - m * m), std::sqrt(2.0 / 512), 0.002);
  nn::init::xavier_uniform_(w);
  const double bound = std::sqrt(6.0 / (256 + 512));
  for (double x : w.to_vector<double>()) ASSERT_LE(std::abs(x), bound);
  Tensor bias = empty({4}, d);
  expect_throw_with<ShapeError>([&] { nn::init::xavier_normal_(bias); }, {"at least 2 dims"});
  // A tensor with no elements is left as it is by every initializer (kaiming threw "fan is
  // 0", and xavier's bound became inf), as PyTorch.
  for (const Shape& shape : {Shape{5, 0}, Shape{0, 0}, Shape{3, 4, 0, 2}}) {
    Tensor empty_w = empty(shape, d);
    EXPECT_NO_THROW(nn::init::kaiming_uniform_(empty_w)) << shape.str();
    EXPECT_NO_THROW(nn::init::kaiming_normal_(empty_w)) << shape.str();
    EXPECT_NO_THROW(nn::init::xavier_uniform_(empty_w)) << shape.str();
    EXPECT_NO_THROW(nn::init::xavier_normal_(empty_w)) << shape.str();
  }
  manual_seed(11);
  Tensor a = empty({3, 3}, d), b = empty({3, 3}, d);
  nn::init::normal_(a);
  manual_seed(11);
  nn::init::normal_(b);
  EXPECT_EQ(a.to_vector<double>(), b.to_vector<double>()) << "seeded initialization repeats";
}

// The initializers' own arguments are named when wrong (they were refused as "[uniform]
// needs low < high; got low=1, high=-1", numbers the user never passed), and a gain of 0 or
// uniform_(t, a, a) fill a constant, as PyTorch.
TEST_P(Modules, InitializersNameTheirArguments) {
  Tensor w = ones({3, 3}, device());
  nn::init::xavier_uniform_(w, 0);
  EXPECT_EQ(w.to_vector<double>(), std::vector<double>(9, 0.0));
  nn::init::uniform_(w, 0.5, 0.5);
  EXPECT_EQ(w.to_vector<double>(), std::vector<double>(9, 0.5));
  expect_throw_with<Error>([&] { nn::init::xavier_uniform_(w, -1); },
                           {"[xavier_uniform_] gain must be a finite number >= 0", "got -1"});
  expect_throw_with<Error>([&] { nn::init::xavier_normal_(w, NAN); },
                           {"[xavier_normal_] gain must be a finite number"});
  expect_throw_with<Error>([&] { nn::init::kaiming_uniform_(w, INFINITY); },
                           {"[kaiming_uniform_] a (the negative slope) must be a finite number"});
  expect_throw_with<DtypeError>(
      [&] {
        (void)uniform({3}, 0, 1e39, {kInt32, device()});
      },
      {"[uniform] draws floating-point values; got dtype int32"});
}

// A module that registers what its test asks for.
class Registering : public nn::Module {
 public:
  Registering() : Module("Registering") {}
  Tensor forward(const Tensor& x) override { return x; }
  using Module::register_buffer;
  using Module::register_module;
  using Module::register_parameter;
};

TEST_P(Modules, RegistrationAndLoadingErrorsSayWhatIsWrong) {
  Registering m;
  m.register_parameter("w", zeros({2}, device()));
  expect_throw_with<Error>([&] { m.register_buffer("w", zeros({2}, device())); },
                           {"[Registering]", "named 'w' exists already"});
  expect_throw_with<Error>([&] { m.register_parameter("a.b", zeros({1}, device())); },
                           {"'a.b' must be non-empty and contain no '.'"});
  expect_throw_with<DtypeError>(
      [&] {
        m.register_parameter("i", zeros({1}, {kInt64, device()}));
      },
      {"parameter 'i' must be floating", "int64"});
  auto child = std::make_shared<nn::ReLU>();
  m.register_module("act", child);
  Registering other;
  expect_throw_with<Error>(
      [&] { other.register_module("act", child); },
      {"has its place in a model already, at Registering.act", "call it twice"});
  nn::StateDict wrong_kind{{"w", zeros({2}, {kInt64, device()})}};
  expect_throw_with<DtypeError>([&] { m.load_state_dict(wrong_kind); },
                                {"[load_state_dict] w is float32 in the module but int64"});
  expect_throw_with<Error>([] { nn::Dropout(1.5); },
                           {"[Dropout] p is a probability in [0, 1], got 1.5"});
  expect_throw_with<ShapeError>(
      [] { nn::Linear(0, 3); },
      {"[Linear] in_features and out_features must be positive, got 0 and 3"});
  expect_throw_with<ShapeError>([] { nn::Conv2d(1, 0, 3); }, {"[Conv2d]", "out_channels=0"});
  expect_throw_with<DtypeError>(
      [&] {
        nn::Dropout(0.5)(zeros({2}, {kInt32, device()}));
      },
      {"[Dropout]", "floating input", "int32"});
}

TEST_P(Modules, ASequentialNestsWhenGivenAsAPointer) {
  // Sequential(Sequential(...)) is the inner one itself (copy elision): a pointer nests it.
  nn::Sequential flat(nn::Sequential(nn::Linear(2, 2, true, device()), nn::ReLU()));
  EXPECT_EQ(flat.named_parameters().front().first, "0.weight");
  nn::Sequential nested(std::make_shared<nn::Sequential>(nn::Linear(2, 2, true, device())));
  EXPECT_EQ(nested.named_parameters().front().first, "0.0.weight");
  auto shared = std::make_shared<nn::Linear>(3, 3, true, device());
  expect_throw_with<Error>([&] { nn::Sequential twice(shared, nn::ReLU(), shared); },
                           {"child module '2' (Linear) has its place in a model already, at "
                            "Sequential[0]"});
  // A model's root has no place yet, so it once went inside itself, and the next walk of the
  // model recursed until it crashed.
  auto outer = std::make_shared<nn::Sequential>();
  auto inner = std::make_shared<nn::Sequential>(nn::Linear(2, 2, true, device()));
  outer->push_back(inner);
  expect_throw_with<Error>([&] { inner->push_back(outer); },
                           {"child module '1' (Sequential) is a module that holds this one",
                            "inside itself would make the model endless"});
  expect_throw_with<Error>([&] { outer->push_back(outer); }, {"is this module itself"});
  EXPECT_EQ(outer->parameters().size(), 2u);  // the model as it was
  EXPECT_EQ(inner->size(), 1u);
}

TEST_P(Modules, LinearRefusesOperandsOfDifferentDtypes) {
  // A bias of another dtype was added or converted silently (PyTorch refuses it too).
  const Tensor x = ones({2, 2}, {kBFloat16, device()}), w = ones({2, 2}, {kBFloat16, device()});
  expect_throw_with<DtypeError>(
      [&] {
        nn::linear(x, w, ones({2}, {kFloat64, device()}));
      },
      {"[linear] input, weight and bias must share one dtype",
       "input bfloat16, weight bfloat16, bias float64", "convert the bias with .to(kBFloat16)"});
  // The odd one out is named, and converted to the others' dtype (the advice was always the
  // weight's dtype, which left an odd weight as it was).
  expect_throw_with<DtypeError>(
      [&] {
        nn::linear(ones({2, 2}, {kFloat64, device()}), w, ones({2}, {kFloat64, device()}));
      },
      {"weight bfloat16, bias float64; convert the weight with .to(kFloat64)"});
  expect_throw_with<DtypeError>(
      [&] {
        nn::linear(x, w, ones({2}, {kInt64, device()}));
      },
      {"bias int64"});
  expect_throw_with<DtypeError>(
      [&] {
        nn::linear(ones({2, 2}, device()), w);
      },  // named linear, not matmul
      {"[linear] input, weight and bias must share one dtype, got input float32, weight "
       "bfloat16; convert the input with .to(kBFloat16), or the layer's parameters with "
       ".to(kFloat32)"});
  EXPECT_EQ(nn::linear(x, w, ones({2}, {kBFloat16, device()})).dtype(), kBFloat16);
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Modules);

}  // namespace
}  // namespace tessera
