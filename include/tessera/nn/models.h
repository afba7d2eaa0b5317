#pragma once
/// The book's Fashion-MNIST models, built on a device. Inputs are [N, 1, 28, 28] images.
#include "tessera/export.h"
#include "tessera/nn/sequential.h"

namespace tessera::nn::models {

/// Softmax regression: Flatten, Linear(784, 10).
TESSERA_API Sequential softmax_regression(Device device = cpu());
/// MLP: Flatten, Linear(784, hidden), ReLU, Linear(hidden, 10).
TESSERA_API Sequential mlp(std::int64_t hidden = 256, Device device = cpu());
/// LeNet-5. `book`: d2l's version (sigmoid activations, average pooling); otherwise the
/// modern variant the book's exercises suggest (ReLU, max pooling), which trains faster.
TESSERA_API Sequential lenet(bool book = true, Device device = cpu());
/// The book's LeNet with batch normalization (BNLeNet): a BatchNorm2d after each
/// convolution and a BatchNorm1d after each hidden linear layer, before the sigmoid; no
/// padding, average pooling. Its running statistics are buffers: use eval() for inference.
TESSERA_API Sequential lenet_batch_norm(Device device = cpu());

}  // namespace tessera::nn::models
