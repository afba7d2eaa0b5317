// Fashion-MNIST from its IDX files.
#include "tessera/data/fashion_mnist.h"

#include <cstdlib>

#include "core/check.h"
#include "core/tensor_impl.h"
#include "io/files.h"
#include "tessera/data/idx.h"
#include "tessera/ops.h"

namespace tessera::data {
namespace {

// The IDX file `stem`, gzipped (as Debian ships it) or not. Looked up with stat, so an
// unreadable, looping or too-long path is an IOError with the system's reason.
std::filesystem::path find_file(const std::filesystem::path& dir, const std::string& stem) {
  for (const std::string& name : {stem + ".gz", stem}) {
    if (io::exists(dir / name, "load_fashion_mnist")) return dir / name;
  }
  throw IOError(fmt::format(
      "[load_fashion_mnist] '{}' has no {}.gz (or {}); install Debian's dataset-fashion-mnist "
      "(scripts/setup does) or point --data-dir / TESSERA_DATA_DIR at the IDX files",
      dir.string(), stem, stem));
}

void split(const std::filesystem::path& dir, const std::string& prefix, Tensor& images,
           Tensor& labels) {
  const auto image_path = find_file(dir, prefix + "-images-idx3-ubyte");
  const auto label_path = find_file(dir, prefix + "-labels-idx1-ubyte");
  images = read_idx(image_path);
  const Tensor raw_labels = read_idx(label_path);
  TESSERA_CHECK(images.dim() == 3 && images.size(1) == 28 && images.size(2) == 28, IOError,
                "[load_fashion_mnist] '{}' holds shape {}, not [N, 28, 28] images",
                image_path.string(), images.shape().str());
  TESSERA_CHECK(raw_labels.dim() == 1 && raw_labels.size(0) == images.size(0), IOError,
                "[load_fashion_mnist] '{}' holds {} labels for the {} images of '{}'",
                label_path.string(), raw_labels.numel(), images.size(0), image_path.string());
  const std::uint8_t* l = reinterpret_cast<const std::uint8_t*>(detail::impl_of(raw_labels).data());
  for (std::int64_t i = 0; i < raw_labels.numel(); ++i) {
    TESSERA_CHECK(l[i] < 10, IOError, "[load_fashion_mnist] '{}': label {} of example {} is not a class 0-9",
                  label_path.string(), int{l[i]}, i);
  }
  labels = raw_labels.to(kInt64);
}

}  // namespace

std::filesystem::path default_fashion_mnist_dir() {
  const char* env = std::getenv("TESSERA_DATA_DIR");
  return env != nullptr && *env != '\0' ? std::filesystem::path(env)
                                        : std::filesystem::path("/usr/share/datasets/fashion-mnist");
}

FashionMnist load_fashion_mnist(const std::filesystem::path& dir) {
  FashionMnist d;
  split(dir, "train", d.train_images, d.train_labels);
  split(dir, "t10k", d.test_images, d.test_labels);
  return d;
}

const std::array<std::string_view, 10>& fashion_mnist_classes() {
  static const std::array<std::string_view, 10> names = {
      "t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag",
      "ankle boot"};
  return names;
}

}  // namespace tessera::data
