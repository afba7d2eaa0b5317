// Must not compile: a named module handed to nn::Sequential (it would be copied). The error is
// one static_assert that names the fix (tests/CMakeLists.txt: compile.sequential_lvalue).
#include "tessera/nn.h"

int main() {
  tessera::nn::Linear fc(3, 4);
  tessera::nn::Sequential net(fc, tessera::nn::ReLU());
}
