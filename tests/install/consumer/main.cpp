// Uses an installed tessera through its public headers only.
#include <iostream>
#include <vector>

#include <tessera/tessera.h>

int main() {
  using namespace tessera;
  Tensor x = tensor({1, 2, 3});
  Tensor X = ones({2, 3}, try_gpu());
  Tensor Y = full({2, 3}, 2.0, try_gpu());
  Tensor Z = X + Y;
  std::cout << "tessera " << kVersion << "\n";
  std::cout << "x = " << x << " on " << x.device() << "\n";
  std::cout << "X + Y = " << Z << "\n";
  for (float v : Z.to_vector<float>()) {
    if (v != 3.0f) {
      std::cout << "wrong value " << v << "\n";
      return 1;
    }
  }
  // The rest of the public API a program meets first: a loader's batches, a layer, its
  // parameters and an optimizer, all through the library's exported symbols.
  data::DataLoader loader(std::vector<Tensor>{arange(6).reshape({6, 1}), ones({6})},
                          {.batch_size = 4, .shuffle = false});
  std::int64_t examples = 0;
  for (const data::Batch& b : loader) examples += b.examples();
  nn::Linear linear(1, 1);
  optim::SGD opt(linear.parameters(), {.lr = 0.1});
  linear.weight = full({1, 1}, 2.0);
  if (examples != 6 || linear.parameters()[0].item<float>() != 2.0f) {
    std::cout << "wrong batches (" << examples << " examples) or parameter\n";
    return 1;
  }
  std::cout << "consumer ok\n";
  return 0;
}
