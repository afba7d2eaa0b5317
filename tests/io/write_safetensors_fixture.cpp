// Writes interop.py's fixture with tessera (from the last available device, a GPU when there
// is one), for the Python safetensors package to check: CTest's interop.safetensors_python.
#include <iostream>

#include "io/interop_tensors.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: write_safetensors_fixture PATH\n";
    return 2;
  }
  try {
    const tessera::Device d = tessera::available_devices().back();
    tessera::save_safetensors(argv[1], tessera::testing::interop_tensors(d),
                              tessera::testing::interop_metadata());
    std::cout << "wrote " << argv[1] << " from " << d << "\n";
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
