#pragma once
/// Fashion-MNIST, the data set the book trains on: 60,000 training and 10,000 test images of
/// 28x28 grey pixels in 10 classes. Debian's dataset-fashion-mnist package (installed by
/// scripts/setup) puts the IDX files in /usr/share/datasets/fashion-mnist.
#include <array>
#include <filesystem>
#include <string_view>

#include "tessera/export.h"
#include "tessera/tensor.h"

namespace tessera::data {

struct TESSERA_API FashionMnist {
  Tensor train_images;  ///< uint8 [60000, 28, 28], on the CPU
  Tensor train_labels;  ///< int64 [60000], classes 0-9
  Tensor test_images;   ///< uint8 [10000, 28, 28]
  Tensor test_labels;   ///< int64 [10000]
};

/// $TESSERA_DATA_DIR when set, else /usr/share/datasets/fashion-mnist.
TESSERA_API std::filesystem::path default_fashion_mnist_dir();

/// Reads the four IDX files (gzipped or not) from `dir`. IOError naming the file when one is
/// missing or corrupt, or when images and labels disagree (counts, 28x28, classes 0-9).
TESSERA_API FashionMnist
load_fashion_mnist(const std::filesystem::path& dir = default_fashion_mnist_dir());

/// The class names, by label.
TESSERA_API const std::array<std::string_view, 10>& fashion_mnist_classes();

}  // namespace tessera::data
