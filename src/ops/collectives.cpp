// Front end of the collectives: the group rules (one kind, distinct devices, one dtype and
// shape, contiguous), in-place checks, the ledger, then the backend's collective.
#include "tessera/collectives.h"

#include <fmt/format.h>

#include "autograd/record.h"
#include "backend/backend.h"
#include "core/check.h"
#include "core/code_names.h"
#include "core/device_registry.h"
#include "core/device_rules.h"
#include "core/tensor_impl.h"

namespace tessera {
namespace {

using detail::CollectiveCall;
using detail::CollectiveKind;

// Checks the group and returns its size.
int check_group(const char* op, const std::vector<Tensor>& tensors) {
  TESSERA_CHECK(!tensors.empty(), Error,
                "[{}] got no tensors; pass one tensor per device of the group", op);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::string name = fmt::format("tensors[{}]", i);
    detail::check_defined(tensors[i], op, name.c_str());
  }
  const Tensor& first = tensors.front();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const Device d = t.device();
    TESSERA_CHECK(d.kind() == first.device().kind(), DeviceError,
                  "[{}] tensors[{}] is on {} but tensors[0] is on {}; a collective groups "
                  "devices of one kind (all GPUs, or all logical CPU devices). Move it with "
                  ".to() first",
                  op, i, d.str(), first.device().str());
    for (std::size_t j = 0; j < i; ++j) {
      TESSERA_CHECK(tensors[j].device() != d, DeviceError,
                    "[{}] tensors[{}] and tensors[{}] are both on {}; a collective takes one "
                    "tensor per device (add them first if you meant to)",
                    op, j, i, d.str());
    }
    TESSERA_CHECK(t.dtype() == first.dtype(), DtypeError,
                  "[{}] tensors[{}] is {} but tensors[0] is {}; convert it with .to({}) first", op,
                  i, dtype_name(t.dtype()), dtype_name(first.dtype()),
                  detail::dtype_code(first.dtype()));
    TESSERA_CHECK(t.shape() == first.shape(), ShapeError,
                  "[{}] tensors[{}] has shape {} but tensors[0] has shape {}; every device "
                  "must hold the same shape",
                  op, i, t.shape().str(), first.shape().str());
    TESSERA_CHECK(t.is_contiguous(), Error,
                  "[{}] tensors[{}] is not contiguous (a transposed or sliced view); pass "
                  ".contiguous() and use the result",
                  op, i);
  }
  std::vector<Device> devices;
  for (const Tensor& t : tensors) devices.push_back(t.device());
  detail::check_capturing_together(devices, op, "a collective");
  return static_cast<int>(tensors.size());
}

void check_reducible(const char* op, Dtype dtype, ReduceKind kind) {
  TESSERA_CHECK(dtype != kBool, DtypeError,
                "[{}] bool tensors cannot be summed; convert them with .to(kInt64) first", op);
  // In the element type the sum before the division overflows (200 and 200 in uint8 gave a
  // mean of 72), and the mean of integers is rarely one.
  TESSERA_CHECK(kind != ReduceKind::kMean || is_floating(dtype), DtypeError,
                "[{}] the mean of {} tensors would be rounded and its sum can overflow; reduce "
                "the sum (ReduceKind::kSum) and divide it, or convert with .to(kFloat64) first",
                op, dtype_name(dtype));
}

void check_rows(const char* op, const Tensor& t) {
  TESSERA_CHECK(t.dim() >= 1, ShapeError,
                "[{}] needs tensors with at least one dim (it works on rows), got a 0-dim "
                "tensor; reshape it with .reshape({{1}})",
                op);
}

// A fresh tensor like `t` with `rows` rows, on t's device.
Tensor with_rows(const Tensor& t, std::int64_t rows, const char* op) {
  Shape shape = t.shape();
  shape[0] = rows;
  return detail::make_output(shape, t.dtype(), t.device(), op);
}

void run(CollectiveCall call) { detail::backend_of(call.inputs.front().device()).collective(call); }

}  // namespace

void all_reduce(const std::vector<Tensor>& tensors, ReduceKind op) {
  const int k = check_group("all_reduce", tensors);
  check_reducible("all_reduce", tensors.front().dtype(), op);
  for (const Tensor& t : tensors) detail::check_inplace("all_reduce", {&t});
  // Each device receives, in ring terms, the other chunks of its own chunk (reduce-scatter)
  // and the other devices' reduced chunks (all-gather): (k - 1) * c_i + (n - c_i) elements.
  const std::int64_t n = tensors.front().numel();
  const std::size_t item = itemsize(tensors.front().dtype());
  for (int i = 0; i < k; ++i) {
    const std::int64_t c = n / k + (i < n % k ? 1 : 0);
    detail::count_collective(tensors[i].device(),
                             static_cast<std::size_t>((k - 1) * c + (n - c)) * item);
  }
  run({CollectiveKind::kAllReduce, tensors, tensors, op == ReduceKind::kMean, 0});
  for (const Tensor& t : tensors) detail::mark_written(t);  // once nothing refused (record.h)
}

void broadcast(const std::vector<Tensor>& tensors, std::size_t root) {
  check_group("broadcast", tensors);
  TESSERA_CHECK(root < tensors.size(), Error,
                "[broadcast] root {} is not an index into the {} tensors given", root,
                tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (i != root) detail::check_inplace("broadcast", {&tensors[i]});
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (i != root) detail::count_collective(tensors[i].device(), tensors[i].nbytes());
  }
  run({CollectiveKind::kBroadcast, tensors, tensors, false, static_cast<int>(root)});
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (i != root) detail::mark_written(tensors[i]);  // once nothing refused (record.h)
  }
}

std::vector<Tensor> all_gather(const std::vector<Tensor>& tensors) {
  const int k = check_group("all_gather", tensors);
  check_rows("all_gather", tensors.front());
  std::vector<Tensor> out;
  for (const Tensor& t : tensors) {
    out.push_back(with_rows(t, t.size(0) * k, "all_gather"));
    detail::count_collective(t.device(), t.nbytes() * static_cast<std::size_t>(k - 1));
  }
  run({CollectiveKind::kAllGather, tensors, out, false, 0});
  return out;
}

std::vector<Tensor> reduce_scatter(const std::vector<Tensor>& tensors, ReduceKind op) {
  const int k = check_group("reduce_scatter", tensors);
  check_reducible("reduce_scatter", tensors.front().dtype(), op);
  check_rows("reduce_scatter", tensors.front());
  const std::int64_t rows = tensors.front().size(0);
  TESSERA_CHECK(rows % k == 0, ShapeError,
                "[reduce_scatter] the tensors have {} rows, which do not split evenly over {} "
                "devices; pad them to a multiple of {}",
                rows, k, k);
  std::vector<Tensor> out;
  for (const Tensor& t : tensors) {
    out.push_back(with_rows(t, rows / k, "reduce_scatter"));
    detail::count_collective(t.device(), out.back().nbytes() * static_cast<std::size_t>(k - 1));
  }
  run({CollectiveKind::kReduceScatter, tensors, out, op == ReduceKind::kMean, 0});
  return out;
}

}  // namespace tessera
