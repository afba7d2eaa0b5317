// The shared half of the index kernels: geometry and the out-of-range error.
#include "backend/indexing.h"

#include <fmt/format.h>

#include "tessera/error.h"

namespace tessera::detail {

IndexGeometry index_geometry(const Tensor& t, int dim) {
  IndexGeometry g;
  g.n = t.size(dim);
  for (int d = 0; d < dim; ++d) g.outer *= t.size(d);
  for (int d = dim + 1; d < t.dim(); ++d) g.inner *= t.size(d);
  return g;
}

void throw_index_out_of_range(IndexOp op, std::int64_t value, std::int64_t position, int dim,
                              std::int64_t size) {
  const char* name = op == IndexOp::kIndexSelect ? "index_select" : "index_add";
  throw IndexError(fmt::format(
      "[{}] index[{}] is {}, out of range for dim {} of size {}: indices must be in [0, {}) "
      "(negative ones are refused, as in PyTorch). Found by the kernel: reported by the op on "
      "the plain CPU, elsewhere at the first wait for the device after it; the op's result is "
      "not valid",
      name, position, value, dim, size, size));
}

}  // namespace tessera::detail
