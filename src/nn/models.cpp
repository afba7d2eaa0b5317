// The book's Fashion-MNIST models.
#include "tessera/nn/models.h"

#include "tessera/nn/activation.h"
#include "tessera/nn/conv.h"
#include "tessera/nn/flatten.h"
#include "tessera/nn/linear.h"
#include "tessera/nn/normalization.h"

namespace tessera::nn::models {

Sequential softmax_regression(Device device) {
  return Sequential(Flatten(), Linear(784, 10, true, device));
}

Sequential mlp(std::int64_t hidden, Device device) {
  return Sequential(Flatten(), Linear(784, hidden, true, device), ReLU(),
                    Linear(hidden, 10, true, device));
}

Sequential lenet(bool book, Device device) {
  Sequential net;
  auto activation = [&]() -> std::shared_ptr<Module> {
    if (book) return std::make_shared<Sigmoid>();
    return std::make_shared<ReLU>();
  };
  auto pool = [&]() -> std::shared_ptr<Module> {
    if (book) return std::make_shared<AvgPool2d>(2);
    return std::make_shared<MaxPool2d>(2);
  };
  net.push_back(Conv2d(1, 6, 5, {.padding = {2, 2}}, true, device));
  net.push_back(activation());
  net.push_back(pool());
  net.push_back(Conv2d(6, 16, 5, {}, true, device));
  net.push_back(activation());
  net.push_back(pool());
  net.push_back(Flatten());
  net.push_back(Linear(16 * 5 * 5, 120, true, device));
  net.push_back(activation());
  net.push_back(Linear(120, 84, true, device));
  net.push_back(activation());
  net.push_back(Linear(84, 10, true, device));
  return net;
}

Sequential lenet_batch_norm(Device device) {
  // 28x28 -> conv 5 -> 24 -> pool -> 12 -> conv 5 -> 8 -> pool -> 4: 16 x 4 x 4 features.
  return Sequential(Conv2d(1, 6, 5, {}, true, device), BatchNorm2d(6, {}, device), Sigmoid(),
                    AvgPool2d(2), Conv2d(6, 16, 5, {}, true, device), BatchNorm2d(16, {}, device),
                    Sigmoid(), AvgPool2d(2), Flatten(), Linear(16 * 4 * 4, 120, true, device),
                    BatchNorm1d(120, {}, device), Sigmoid(), Linear(120, 84, true, device),
                    BatchNorm1d(84, {}, device), Sigmoid(), Linear(84, 10, true, device));
}

}  // namespace tessera::nn::models
