// Uses an installed tessera's training chart (tessera::plot), as a program that draws does.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <tessera/tessera.h>
#include <tessera/train/plot.h>

int main(int argc, char** argv) {
  using namespace tessera;
  if (argc != 2) {
    std::cerr << "usage: plot_consumer OUT.svg\n";
    return 2;
  }
  std::vector<train::EpochMetrics> history;
  for (int e = 1; e <= 3; ++e) {
    history.push_back({.epoch = e, .train_loss = 1.0 / e, .val_loss = 1.1 / e, .val_acc = 0.5});
  }
  train::plot_history(history, argv[1], tensor({1.5, 1.0, 0.7}), "consumer");
  std::ifstream in(argv[1]);
  const std::string svg{std::istreambuf_iterator<char>(in), {}};
  if (svg.find("<svg") == std::string::npos) {
    std::cout << "no chart in " << argv[1] << "\n";
    return 1;
  }
  std::cout << "plot consumer ok\n";
  return 0;
}
