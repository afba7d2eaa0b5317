// Printing tensors the way PyTorch does, with the device shown unless it is the host.
#include <cmath>
#include <ostream>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "core/copy.h"
#include "core/device_registry.h"
#include "core/device_rules.h"
#include "core/tensor_impl.h"
#include "tessera/autograd.h"
#include "tessera/factories.h"

namespace tessera {
namespace {

constexpr std::int64_t kSummarizeAbove = 1000;
constexpr std::int64_t kEdgeItems = 3;

// Integers and bools are read as int64 and printed exactly; floating values as double.
struct Formatter {
  Dtype dtype;
  bool integral_floats = true;  // every finite value is a whole number: print "1."
  bool scientific = false;
  int width = 1;

  Formatter(Dtype d, const std::vector<std::int64_t>& values) : dtype(d) {
    for (std::int64_t v : values) width = std::max(width, static_cast<int>(raw(v).size()));
  }
  Formatter(Dtype d, const std::vector<double>& values) : dtype(d) {
    double max_abs = 0, min_abs = INFINITY;  // of the nonzero finite values
    for (double v : values) {
      if (!std::isfinite(v)) continue;
      if (v != std::floor(v)) integral_floats = false;
      if (v == 0) continue;
      max_abs = std::max(max_abs, std::abs(v));
      min_abs = std::min(min_abs, std::abs(v));
    }
    // PyTorch's rule: values spanning more than 1000x, or past 1e8, or (not whole numbers)
    // below 1e-4 print in scientific notation; fixed notation showed 0.00012 and 0.00014
    // next to 1000.5 both as 0.0001.
    const bool some = max_abs > 0;
    scientific =
        some && (max_abs / min_abs > 1000 || max_abs > 1e8 || (!integral_floats && min_abs < 1e-4));
    for (double v : values) width = std::max(width, static_cast<int>(raw(v).size()));
  }

  std::string raw(std::int64_t v) const {
    if (dtype == kBool) return v != 0 ? "True" : "False";
    return fmt::format("{}", v);
  }
  std::string raw(double v) const {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    if (scientific) return fmt::format("{:.4e}", v);
    if (integral_floats) return fmt::format("{:.0f}.", v);
    return fmt::format("{:.4f}", v);
  }
  template <typename T>
  std::string operator()(T v) const {
    return fmt::format("{:>{}}", raw(v), width);
  }
};

// Index lists to print per dim: all, or the first and last kEdgeItems with a gap.
std::vector<std::int64_t> shown(std::int64_t n, bool summarize) {
  std::vector<std::int64_t> idx;
  if (!summarize || n <= 2 * kEdgeItems) {
    for (std::int64_t i = 0; i < n; ++i) idx.push_back(i);
  } else {
    for (std::int64_t i = 0; i < kEdgeItems; ++i) idx.push_back(i);
    idx.push_back(-1);  // "..."
    for (std::int64_t i = n - kEdgeItems; i < n; ++i) idx.push_back(i);
  }
  return idx;
}

// Whether dim `n` long is cut to its edges when printing summarized.
bool cut(std::int64_t n, bool summarize) { return summarize && n > 2 * kEdgeItems; }

// `v` holds only the printed part (`kept`: each cut dim reduced to its 2 * kEdgeItems edges);
// `shape` is the tensor's own, for the indices and the "...".
template <typename T>
void print_rec(std::ostream& os, const std::vector<T>& v, const Shape& shape, const Shape& kept,
               int d, std::int64_t offset, int indent, bool summarize, const Formatter& f) {
  const std::int64_t n = shape[d];
  std::int64_t inner = 1;
  for (int k = d + 1; k < kept.size(); ++k) inner *= kept[k];
  os << '[';
  bool first = true;
  for (std::int64_t i : shown(n, summarize)) {
    if (!first) {
      if (d == shape.size() - 1) {
        os << ", ";
      } else {
        os << ',' << std::string(static_cast<std::size_t>(shape.size() - 1 - d), '\n')
           << std::string(static_cast<std::size_t>(indent + d + 1), ' ');
      }
    }
    first = false;
    if (i < 0) {
      os << "...";
      continue;
    }
    const std::int64_t at = cut(n, summarize) && i >= kEdgeItems ? i - (n - 2 * kEdgeItems) : i;
    if (d == shape.size() - 1) {
      os << f(v[static_cast<std::size_t>(offset + at)]);
    } else {
      print_rec(os, v, shape, kept, d + 1, offset + at * inner, indent, summarize, f);
    }
  }
  os << ']';
}

// Printing is a host read like any other (counted, checked by SyncGuard) at `where`.
std::ostream& print(std::ostream& os, const Tensor& t, const std::source_location& where) {
  if (!t.defined()) return os << "tensor(undefined)";
  // Read first: a read that throws (a capture, a SyncGuard) leaves the stream untouched.
  std::ostringstream text;
  const bool summarize = t.numel() > kSummarizeAbove;
  const auto body = [&](auto tag) {
    using T = decltype(tag);
    // Only what is shown is read (and formatted, as PyTorch): a summarized 256 MB tensor
    // was copied whole to the host, as doubles, to print 6 values per row.
    Shape kept = t.shape();
    for (int d = 0; d < kept.size(); ++d) {
      if (cut(kept[d], summarize)) kept[d] = 2 * kEdgeItems;
    }
    Tensor part = t;
    if (kept != t.shape()) {
      // Before copying: the copies would join a recording that the read then refuses.
      detail::check_not_capturing(t.device(), "print", "a host read");
      NoGradGuard internal;
      part = empty(kept, {t.dtype(), t.device()});
      std::vector<int> cut_dims;
      for (int d = 0; d < kept.size(); ++d) {
        if (kept[d] != t.size(d)) cut_dims.push_back(d);
      }
      // One copy per corner block: each cut dim's first or last kEdgeItems.
      for (unsigned corner = 0; corner < (1u << cut_dims.size()); ++corner) {
        Tensor from = t, to = part;
        for (std::size_t j = 0; j < cut_dims.size(); ++j) {
          const int d = cut_dims[j];
          const bool last = (corner >> j) & 1u;
          from = from.narrow(d, last ? t.size(d) - kEdgeItems : 0, kEdgeItems);
          to = to.narrow(d, last ? kEdgeItems : 0, kEdgeItems);
        }
        to.copy_(from);
      }
    }
    std::vector<T> values(static_cast<std::size_t>(part.numel()));
    if (!values.empty()) {  // nothing to show, nothing to read (or wait for)
      detail::read_to_host(part, values.data(), std::is_same_v<T, double> ? kFloat64 : kInt64,
                           "print", where);
    }
    const Formatter f(t.dtype(), values);
    if (t.dim() == 0) {
      text << f.raw(values[0]);
    } else if (t.numel() == 0) {
      text << "[]";
    } else {
      print_rec(text, values, t.shape(), kept, 0, 0, 7, summarize, f);
    }
  };
  if (is_floating(t.dtype())) {
    body(double{});
  } else {
    body(std::int64_t{});
  }
  os << "tensor(" << text.str();
  if (t.numel() == 0 && t.dim() > 1) os << ", size=" << t.shape().str();
  if (!detail::is_host(t.device())) os << ", device=" << t.device().str();
  // An empty tensor shows no value that tells its dtype (PyTorch names int64 there too).
  if ((t.dtype() != kFloat32 && t.dtype() != kInt64 && t.dtype() != kBool) ||
      (t.numel() == 0 && t.dtype() != kFloat32)) {
    os << ", dtype=" << dtype_name(t.dtype());
  }
  return os << ')';
}

}  // namespace

// An operator has no caller location: SyncGuard's message says how to get one (str()).
std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  return print(os, t, std::source_location());
}

std::string Tensor::str(std::source_location where) const {
  std::ostringstream os;
  print(os, *this, where);
  return os.str();
}

}  // namespace tessera
