// Backward formulas of reductions, matmul and softmax.
#include "autograd/formulas.h"
#include "autograd/record.h"
#include "tessera/factories.h"
#include "tessera/operators.h"

namespace tessera::detail {
namespace {

// The gradient of a reduction's output, reshaped to the input's rank (reduced dims size 1)
// so that it broadcasts over the input.
Tensor with_kept_dims(const Tensor& g, const Shape& in, const std::vector<int>& dims) {
  Shape kept = in;
  for (int d : dims) kept[d] = 1;
  return g.reshape(kept);
}

}  // namespace

void record_reduce(ReduceOp op, const char* name, const Tensor& a, const std::vector<int>& dims,
                   bool keepdim, const Tensor& out_in) {
  const Shape in = a.shape();
  const Tensor out = out_in.detach();
  BackwardFn fn;
  switch (op) {
    case ReduceOp::kSum:
      fn = [in, dims](const Tensor& g) {
        return std::vector<Tensor>{with_kept_dims(g, in, dims).expand(in)};
      };
      break;
    case ReduceOp::kMean: {
      std::int64_t count = 1;
      for (int d : dims) count *= in[d];
      fn = [in, dims, count](const Tensor& g) {
        return std::vector<Tensor>{(with_kept_dims(g, in, dims) / double(count)).expand(in)};
      };
      break;
    }
    case ReduceOp::kMax:
    case ReduceOp::kMin:
      // Ties share the gradient evenly, so the formula is a true subgradient. A NaN result
      // came from the NaNs of its row: they share it, as in PyTorch's max() (a == NaN
      // matches nothing, and 0 / 0 put NaN in every element of the row).
      fn = [in, dims, a, out](const Tensor& g) {
        const Tensor kept = with_kept_dims(out, in, dims);
        const Tensor hit = where(ne(kept, kept), ne(a, a), eq(a, kept)).to(a.dtype());
        const Tensor share = hit / sum(hit, dims, /*keepdim=*/true);
        return std::vector<Tensor>{with_kept_dims(g, in, dims) * share};
      };
      break;
    case ReduceOp::kSumSquares:  // sum(a^2)
      fn = [in, dims, a](const Tensor& g) {
        return std::vector<Tensor>{with_kept_dims(g, in, dims) * a * 2.0};
      };
      break;
    case ReduceOp::kNorm:  // d||a|| / da = a / ||a||, and 0 where ||a|| = 0, as in PyTorch
      // (a zero-initialized weight under a norm penalty must not get NaN on its first step).
      fn = [in, dims, a, out](const Tensor& g) {
        const Tensor share = where(eq(out, 0.0), 0.0, g / out);
        return std::vector<Tensor>{with_kept_dims(share, in, dims) * a};
      };
      break;
    default:
      return;  // argmax/argmin have no gradient
  }
  (void)keepdim;
  const bool reads = op != ReduceOp::kSum && op != ReduceOp::kMean;
  const bool reads_out = op == ReduceOp::kMax || op == ReduceOp::kMin || op == ReduceOp::kNorm;
  record(name, out_in, {&a}, std::move(fn),
         {{"input", reads ? &a : nullptr}, {"output", reads_out ? &out : nullptr}});
}

void record_matmul(const Tensor& a, const Tensor& b, const Tensor& out) {
  // Only the gradients some input needs: a layer's input rarely needs one, and computing it
  // would cost as much as the weight's.
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  const Saved saved_a{"self", need_b ? &a : nullptr}, saved_b{"other", need_a ? &b : nullptr};
  record("matmul", out, {&a, &b},
         [a = a.detach(), b = b.detach(), need_a, need_b](const Tensor& g) {
           // As 2-D-or-more operands: a 1-D self is a row, a 1-D other is a column.
           const Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
           const Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
           Shape g_shape(g.shape());
           if (a.dim() == 1) g_shape.insert(g_shape.size() - (b.dim() == 1 ? 0 : 1), 1);
           if (b.dim() == 1) g_shape.push_back(1);
           const Tensor g2 = g.reshape(g_shape);
           // A 2-D operand met a batch of the other: its gradient sums one product per batch
           // element. With the batch folded into the summed dim it is one GEMM, whose sum is
           // rounded once in half precision (a batch of products summed after was rounded per
           // product: up to 0.24 relative error in bfloat16) and is one call, not a batch and a
           // sum.
           // The folded sizes are counted, not inferred (-1): with M, K or N of 0 there is
           // nothing to infer -1 from, and backward threw where PyTorch gives zeros.
           const auto others = [](const Tensor& t, int dim) {
             Shape s = t.shape();
             s.erase(dim < 0 ? dim + t.dim() : dim);
             return s.numel();
           };
           Tensor da, db;
           if (need_a && a2.dim() == 2 && b2.dim() > 2) {
             // [M, (batch, N)] @ [(batch, N), K]
             const int r = g2.dim();
             std::vector<std::int64_t> m_first{r - 2};
             for (int d = 0; d < r; ++d) {
               if (d != r - 2) m_first.push_back(d);
             }
             da = matmul(g2.permute(Shape(m_first)).reshape({g2.size(-2), others(g2, -2)}),
                         b2.transpose(-1, -2).reshape({others(b2, -2), b2.size(-2)}))
                      .reshape(a.shape());
           } else if (need_a) {
             da = sum_to(matmul(g2, b2.transpose(-1, -2)), a2.shape()).reshape(a.shape());
           }
           if (need_b && b2.dim() == 2 && a2.dim() > 2) {
             // [K, (batch, M)] @ [(batch, M), N]
             db = matmul(a2.reshape({others(a2, -1), a2.size(-1)}).t(),
                         g2.reshape({others(g2, -1), g2.size(-1)}))
                      .reshape(b.shape());
           } else if (need_b) {
             db = sum_to(matmul(a2.transpose(-1, -2), g2), b2.shape()).reshape(b.shape());
           }
           return std::vector<Tensor>{da, db};
         },
         {saved_a, saved_b});
}

void record_softmax(const Tensor& a, int dim, bool log, const Tensor& out_in) {
  const Tensor out = out_in.detach();
  record(log ? "log_softmax" : "softmax", out_in, {&a},
         [out, dim, log](const Tensor& g) {
           if (log) return std::vector<Tensor>{g - exp(out) * sum(g, {dim}, /*keepdim=*/true)};
           return std::vector<Tensor>{out * (g - sum(g * out, {dim}, /*keepdim=*/true))};
         },
         {{"output", &out}});
}

}  // namespace tessera::detail
