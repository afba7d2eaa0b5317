// Fashion-MNIST from its IDX files.
#include "tessera/data/fashion_mnist.h"

#include <cstdlib>

#include "core/check.h"
#include "core/tensor_impl.h"
#include "data/idx_reader.h"
#include "io/files.h"
#include "io/printable.h"
#include "tessera/ops.h"

namespace tessera::data {
namespace {

// The IDX file `stem`, gzipped (as Debian ships it) or not. Looked up with stat, so an
// unreadable, looping or too-long path is an IOError with the system's reason.
std::filesystem::path find_file(const std::filesystem::path& dir, const std::string& stem) {
  // The directory first: a missing one was reported as lacking a file. A loop or a name too
  // long is an IOError with the system's reason (io::exists).
  const bool there = io::exists(dir, "load_fashion_mnist");
  TESSERA_CHECK(there && std::filesystem::is_directory(dir), IOError,
                "[load_fashion_mnist] the data directory '{}' {}; point --data-dir / "
                "TESSERA_DATA_DIR at the directory of the IDX files, or install Debian's "
                "dataset-fashion-mnist (scripts/setup does)",
                io::printable(dir.string()), there ? "is not a directory" : "does not exist");
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
  // Both headers are checked against each other before any data is read (Note [Bounded IDX
  // reads]): a file declaring millions of images costs nothing when the labels disagree.
  IdxReader image_file(find_file(dir, prefix + "-images-idx3-ubyte"));
  IdxReader label_file(find_file(dir, prefix + "-labels-idx1-ubyte"));
  const std::string image_path = io::printable(image_file.path().string());
  const std::string label_path = io::printable(label_file.path().string());
  const Shape& s = image_file.shape();
  TESSERA_CHECK(s.size() == 3 && s[1] == 28 && s[2] == 28, IOError,
                "[load_fashion_mnist] '{}' holds shape {}, not [N, 28, 28] images", image_path,
                s.str());
  TESSERA_CHECK(s[0] > 0, IOError,
                "[load_fashion_mnist] '{}' holds no images (shape {}): the data set is empty, "
                "and there is nothing to train or test on. Check the file",
                image_path, s.str());
  const Shape& ls = label_file.shape();
  TESSERA_CHECK(ls.size() == 1, IOError, "[load_fashion_mnist] '{}' holds shape {}, not [N] labels",
                label_path, ls.str());
  TESSERA_CHECK(ls[0] == s[0], IOError,
                "[load_fashion_mnist] '{}' holds {} labels for the {} images of '{}'", label_path,
                ls[0], s[0], image_path);
  images = image_file.read();
  const Tensor raw_labels = label_file.read();
  const std::uint8_t* l = reinterpret_cast<const std::uint8_t*>(detail::impl_of(raw_labels).data());
  for (std::int64_t i = 0; i < raw_labels.numel(); ++i) {
    TESSERA_CHECK(l[i] < 10, IOError,
                  "[load_fashion_mnist] '{}': label {} of example {} is not a class 0-9",
                  label_path, int{l[i]}, i);
  }
  labels = raw_labels.to(kInt64);
}

}  // namespace

std::filesystem::path default_fashion_mnist_dir() {
  const char* env = std::getenv("TESSERA_DATA_DIR");
  return env != nullptr && *env != '\0'
             ? std::filesystem::path(env)
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
      "t-shirt", "trouser", "pullover", "dress", "coat",
      "sandal",  "shirt",   "sneaker",  "bag",   "ankle boot"};
  return names;
}

}  // namespace tessera::data
