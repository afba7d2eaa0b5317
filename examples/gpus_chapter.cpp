// Sections 6.7.1 (Computing Devices), 6.7.2 (Tensors and GPUs) and 6.7.3 (Neural Networks
// and GPUs) of Dive into Deep Learning in tessera, printing each step like the book. On a machine
// without GPUs every try_gpu(i) falls back to the CPU; run it with TESSERA_CPU_DEVICES=2 to see the
// rules about a second device (mismatch errors, explicit copies, the transfer ledger) in action.
#include <iostream>
#include <vector>

#include "tessera/tessera.h"

using namespace tessera;

namespace {

std::ostream& operator<<(std::ostream& os, const std::vector<Device>& devices) {
  os << "[";
  for (std::size_t i = 0; i < devices.size(); ++i) os << (i ? ", " : "") << devices[i];
  return os << "]";
}

void show(const char* code, const auto& value) {
  std::cout << ">>> " << code << "\n" << value << "\n\n";
}

}  // namespace

int main() {
  manual_seed(0);
  std::cout << std::boolalpha;

  // ---- 6.7.1 Computing Devices: handles, and how many GPUs there are ----
  std::cout << "== 6.7.1 Computing Devices ==\n\n";
  std::cout << ">>> cpu(), gpu(), gpu(1)\n" << cpu() << ", " << gpu() << ", " << gpu(1) << "\n\n";
  show("num_gpus()", num_gpus());
  if (num_gpus() == 0) std::cout << "(no GPU: " << gpu_unavailable_reason() << ")\n\n";
  std::cout << ">>> try_gpu(), try_gpu(10), try_all_gpus()\n"
            << try_gpu() << ", " << try_gpu(10) << ", " << try_all_gpus() << "\n\n";

  // ---- 6.7.2 Tensors and GPUs: every tensor lives on a device ----
  std::cout << "== 6.7.2 Tensors and GPUs ==\n\n";
  Tensor x = tensor({1, 2, 3});
  show("x = tensor({1, 2, 3}); x.device()", x.device());

  // 6.7.2.1 Storage on the GPU: name the device when creating the tensor.
  Tensor X = ones({2, 3}, try_gpu());
  show("X = ones({2, 3}, try_gpu())", X);
  Tensor Y = rand({2, 3}, try_gpu(1));
  show("Y = rand({2, 3}, try_gpu(1))", Y);

  // 6.7.2.2 Copying: move X to Y's device before adding. to() copies only when the
  // device differs, so here (try_gpu(1) == X's device without a second GPU) Z is X itself.
  Tensor Z = X.to(try_gpu(1));
  show("Z = X.to(try_gpu(1)); X", X);
  show("Z", Z);
  show("Y + Z", Y + Z);
  show("Z.to(try_gpu(1)).is_same(Z)", Z.to(try_gpu(1)).is_same(Z));
  show("Z.copy_to(try_gpu(1)).is_same(Z)  // copy_to always allocates",
       Z.copy_to(try_gpu(1)).is_same(Z));

  // ---- 6.7.3 Neural Networks and GPUs: a model's parameters live on a device ----
  std::cout << "== 6.7.3 Neural Networks and GPUs ==\n\n";
  nn::Sequential net(nn::LazyLinear(1));
  net.set_name("net");
  // Moved before its first call, the lazy layer builds its parameters right there, never on
  // the host first (like MXNet's net.initialize(ctx=try_gpu())).
  net.to(try_gpu());
  show("net = Sequential(LazyLinear(1)); net.to(try_gpu()); net(X)", net(X));
  show("net.at<nn::LazyLinear>(0).weight.device()  // net[0].weight.data.device",
       net.at<nn::LazyLinear>(0).weight.device());
  show("net.device()  // every parameter and buffer on one device, or an error", net.device());
  show("net.str()", net.str());

  // ---- Two devices: tessera never copies silently ----
  const std::vector<Device> devices = available_devices();
  std::cout << "== Two devices ==\n\n";
  show("available_devices()", devices);
  if (devices.size() < 2) {
    std::cout << "Only one device: run with TESSERA_CPU_DEVICES=2 (or on two GPUs) to see "
                 "cross-device errors and copies.\n";
    return 0;
  }
  const Device first = devices[0];
  const Device second = devices[1];
  reset_transfer_stats();
  Tensor A = ones({2, 3}, first);
  Tensor B = rand({2, 3}, second);
  std::cout << ">>> A = ones({2, 3}, " << first << "); B = rand({2, 3}, " << second << "); A + B\n";
  try {
    Tensor C = A + B;
    std::cout << "unexpected: no error\n";
    return 1;
  } catch (const DeviceMismatchError& e) {
    std::cout << "DeviceMismatchError: " << e.what() << "\n\n";
  }
  // Feed net an input from a device its parameters are not on (net lives on try_gpu()).
  const Device elsewhere = net.device() == first ? second : first;
  Tensor input = rand({2, 3}, elsewhere);
  std::cout << ">>> net(rand({2, 3}, " << elsewhere << "))  // net's parameters are on "
            << net.device() << "\n";
  try {
    net(input);
    std::cout << "unexpected: no error\n";
    return 1;
  } catch (const DeviceMismatchError& e) {
    std::cout << "DeviceMismatchError: " << e.what() << "\n\n";
  }
  Tensor A2 = A.to(second);  // the explicit copy the error asked for
  show("A2 = A.to(second); A2 + B", A2 + B);
  // Printing read the sum back to the host: the ledger counts that copy too.
  std::cout << ">>> transfer_stats(" << first << "), transfer_stats(" << second << ")\n"
            << transfer_stats(first) << "\n"
            << transfer_stats(second) << "\n\n";
  show("transfer_stats()", transfer_stats());
  return 0;
}
