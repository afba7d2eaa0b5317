// Backward formulas of the elementwise ops. Broadcast inputs get their gradient summed back
// to their shape (sum_to).
#include "autograd/formulas.h"
#include "autograd/record.h"
#include "backend/elementwise_functors.h"
#include "core/check.h"
#include "core/tensor_impl.h"
#include "ops/fused_ops.h"
#include "tessera/factories.h"
#include "tessera/operators.h"

namespace tessera::detail {
namespace {

// d max(a, b) / da: 0 where a loses, 1/2 on ties, 1 elsewhere, as PyTorch: where either is
// NaN (the result is NaN) both get the gradient, as the NaN of a max() reduction does (it
// went nowhere). b a tensor or a scalar (compared as it is, never made a tensor of a's
// dtype, which it may not fit).
template <typename Other>
Tensor winner_mask(const Tensor& a, const Other& b, bool maximum) {
  const Tensor loses = maximum ? lt(a, b) : gt(a, b);
  return where(loses, zeros_like(a), where(eq(a, b), 0.5, ones_like(a)));
}

}  // namespace

void record_binary(BinaryOp op, const char* name, const Tensor& a, const Tensor& b,
                   const Tensor& out) {
  if (is_comparison(op)) return;
  const Shape sa = a.shape(), sb = b.shape();
  const bool ga = a.requires_grad(), gb = b.requires_grad();
  auto finish = [sa, sb, ga, gb](const Tensor& da, const Tensor& db) {
    return std::vector<Tensor>{ga ? sum_to(da, sa) : Tensor(), gb ? sum_to(db, sb) : Tensor()};
  };
  BackwardFn fn;
  bool reads_a = true, reads_b = true, reads_out = false;
  switch (op) {
    case BinaryOp::kAdd:
      reads_a = reads_b = false;
      fn = [finish](const Tensor& g) { return finish(g, g); };
      break;
    case BinaryOp::kSub:
      reads_a = reads_b = false;
      fn = [finish](const Tensor& g) { return finish(g, -g); };
      break;
    case BinaryOp::kMul:
      reads_a = gb;  // d(a*b)/db = a
      reads_b = ga;
      fn = [finish, a, b](const Tensor& g) { return finish(g * b, g * a); };
      break;
    case BinaryOp::kDiv:
      // -g * (a / b) / b, as PyTorch: b * b overflows (float16 past 256) or underflows long
      // before the quotient does, giving a slope of 0 or inf.
      fn = [finish, a, b](const Tensor& g) { return finish(g / b, -g * ((a / b) / b)); };
      break;
    case BinaryOp::kPow:
      reads_out = true;
      // PyTorch's masks: a^0 has slope 0 in a (not 0 * a^-1, NaN at a = 0), and 0^b for b >= 0
      // slope 0 in b (not 0 * log 0).
      fn = [finish, a, b, out = out.detach()](const Tensor& g) {
        const Tensor da = where(eq(b, 0.0), 0.0, g * b * pow(a, b - 1.0));
        // log(a) in the result's dtype: a float32 (or integer) base under a float64
        // exponent gave a slope good to float32 only.
        const Tensor la = log(a.dtype() == out.dtype() ? a : a.to(out.dtype()));
        const Tensor db = where(mul(eq(a, 0.0), ge(b, 0.0)), 0.0, g * out * la);
        return finish(da, db);
      };
      break;
    case BinaryOp::kMaximum:
    case BinaryOp::kMinimum: {
      const bool is_max = op == BinaryOp::kMaximum;
      fn = [finish, a, b, is_max](const Tensor& g) {
        return finish(g * winner_mask(a, b, is_max), g * winner_mask(b, a, is_max));
      };
      break;
    }
    default:
      return;
  }
  record(name, out, {&a, &b}, std::move(fn),
         {{"self", reads_a ? &a : nullptr},
          {"other", reads_b ? &b : nullptr},
          {"output", reads_out ? &out : nullptr}});
}

void record_binary_scalar(BinaryOp op, const char* name, const Tensor& a, double s,
                          bool scalar_first, const Tensor& out) {
  BackwardFn fn;
  switch (op) {
    case BinaryOp::kAdd:
      fn = [](const Tensor& g) { return std::vector<Tensor>{g}; };
      break;
    case BinaryOp::kSub:
      fn = [scalar_first](const Tensor& g) { return std::vector<Tensor>{scalar_first ? -g : g}; };
      break;
    case BinaryOp::kMul:
      fn = [s](const Tensor& g) { return std::vector<Tensor>{g * s}; };
      break;
    case BinaryOp::kDiv:
      fn = [s, scalar_first, a](const Tensor& g) {
        return std::vector<Tensor>{scalar_first ? -g * ((s / a) / a) : g / s};  // as above
      };
      break;
    case BinaryOp::kPow:              // a ** s
      fn = [s, a](const Tensor& g) {  // a^0 has slope 0, even at a = 0 (PyTorch's mask)
        return std::vector<Tensor>{s == 0.0 ? zeros_like(g) : g * s * pow(a, s - 1.0)};
      };
      break;
    case BinaryOp::kMaximum:
    case BinaryOp::kMinimum: {
      const bool is_max = op == BinaryOp::kMaximum;
      fn = [s, a, is_max](const Tensor& g) {
        return std::vector<Tensor>{g * winner_mask(a, s, is_max)};
      };
      break;
    }
    default:
      return;  // comparisons have no gradient
  }
  const bool reads_a = op == BinaryOp::kPow || op == BinaryOp::kMaximum ||
                       op == BinaryOp::kMinimum || (op == BinaryOp::kDiv && scalar_first);
  record(name, out, {&a}, std::move(fn), {{"input", reads_a ? &a : nullptr}});
}

void record_unary(UnaryOp op, const char* name, const Tensor& a, const Tensor& out_in) {
  // A formula keeps the output detached: holding the output itself would be a cycle
  // (output -> its node -> the formula -> output).
  const Tensor out = out_in.detach();
  if (has_fused_backward(op) && is_floating(a.dtype())) {
    // One pass instead of two or three ops (and their temporaries).
    const Tensor saved = backward_saves_output(op) ? out : a.detach();
    record(name, out_in, {&a},
           [op, saved](const Tensor& g) {
             return std::vector<Tensor>{activation_backward(op, g, saved)};
           },
           {{backward_saves_output(op) ? "output" : "input", &saved}});
    return;
  }
  BackwardFn fn;
  switch (op) {
    case UnaryOp::kNeg:
      fn = [](const Tensor& g) { return std::vector<Tensor>{-g}; };
      break;
    case UnaryOp::kExp:
      fn = [out](const Tensor& g) { return std::vector<Tensor>{g * out}; };
      break;
    case UnaryOp::kLog:
      fn = [a](const Tensor& g) { return std::vector<Tensor>{g / a}; };
      break;
    case UnaryOp::kSqrt:
      fn = [out](const Tensor& g) { return std::vector<Tensor>{g / (out * 2.0)}; };
      break;
    case UnaryOp::kAbs:
      fn = [a](const Tensor& g) {
        return std::vector<Tensor>{g *
                                   where(gt(a, 0.0), 1.0, where(lt(a, 0.0), -1.0, zeros_like(a)))};
      };
      break;
    case UnaryOp::kRelu:
      fn = [a](const Tensor& g) { return std::vector<Tensor>{where(le(a, 0.0), 0.0, g)}; };
      break;
    case UnaryOp::kSigmoid:
      fn = [out](const Tensor& g) { return std::vector<Tensor>{g * out * (1.0 - out)}; };
      break;
    case UnaryOp::kTanh:
      fn = [out](const Tensor& g) { return std::vector<Tensor>{g * (1.0 - out * out)}; };
      break;
    case UnaryOp::kGelu:
    case UnaryOp::kGeluTanh:
    case UnaryOp::kSilu:  // floating only, so fused above: never here
      TESSERA_INTERNAL_ASSERT(false, "[{}] reached the unfused backward", name);
  }
  const bool reads_out = op == UnaryOp::kExp || op == UnaryOp::kSqrt || op == UnaryOp::kSigmoid ||
                         op == UnaryOp::kTanh;
  const bool reads_in = op == UnaryOp::kLog || op == UnaryOp::kAbs || op == UnaryOp::kRelu;
  record(name, out_in, {&a}, std::move(fn),
         {{"input", reads_in ? &a : nullptr}, {"output", reads_out ? &out : nullptr}});
}

void record_where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  const Shape sa = a.shape(), sb = b.shape();
  const bool ga = a.requires_grad(), gb = b.requires_grad();
  record("where", out, {&a, &b},
         [cond, sa, sb, ga, gb](const Tensor& g) {
           return std::vector<Tensor>{ga ? sum_to(where(cond, g, 0.0), sa) : Tensor(),
                                      gb ? sum_to(where(cond, 0.0, g), sb) : Tensor()};
         },
         {{"condition", &cond}});
}

}  // namespace tessera::detail
