// Must not compile under -Werror=unused-result: Tensor::to returns the moved tensor and
// leaves this one where it is, so a discarded result is a move that never happened
// (tests/CMakeLists.txt: compile.discarded_to).
#include "tessera/tensor.h"

void move_it(const tessera::Tensor& x, tessera::Device d) { x.to(d); }
