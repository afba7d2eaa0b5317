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
  std::cout << "consumer ok\n";
  return 0;
}
