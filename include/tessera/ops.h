#pragma once
/// Ops on tensors. Every op checks that all its tensor operands live on one device, computes
/// there and returns a result there; tensors on different devices throw DeviceMismatchError
/// (tessera never copies silently). C++ scalars are always allowed (scalar.h: an integer
/// scalar keeps an integer tensor's dtype, a floating one gives float32). Binary ops
/// broadcast like NumPy and promote dtypes (bool < uint8 < int32 < int64 < float32 <
/// float64). A 0-dim tensor promotes like any other (PyTorch lets a dimensioned operand's
/// dtype win over a 0-dim one of the same kind: float32 x * a float64 0-dim tensor is
/// float64 here, float32 there).
/// Ops never wait for the device.
#include <cstdint>
#include <vector>

#include "tessera/export.h"
#include "tessera/tensor.h"

namespace tessera {

// ---- elementwise, binary ----
TESSERA_API Tensor add(const Tensor& a, const Tensor& b);
TESSERA_API Tensor sub(const Tensor& a, const Tensor& b);
TESSERA_API Tensor mul(const Tensor& a, const Tensor& b);
/// True division: integer operands give float32.
TESSERA_API Tensor div(const Tensor& a, const Tensor& b);
/// Integers are raised exactly (wrapping on overflow, as multiplication does); an integer to
/// a negative integer power is 1 / a^|b| truncated toward zero (0 unless a is 1 or -1).
TESSERA_API Tensor pow(const Tensor& a, const Tensor& b);
TESSERA_API Tensor maximum(const Tensor& a, const Tensor& b);
TESSERA_API Tensor minimum(const Tensor& a, const Tensor& b);
TESSERA_API Tensor add(const Tensor& a, Scalar b);
TESSERA_API Tensor sub(const Tensor& a, Scalar b);
TESSERA_API Tensor sub(Scalar a, const Tensor& b);
TESSERA_API Tensor mul(const Tensor& a, Scalar b);
TESSERA_API Tensor div(const Tensor& a, Scalar b);
TESSERA_API Tensor div(Scalar a, const Tensor& b);
/// DtypeError for an integer tensor and a negative integer exponent (not an integer result;
/// pow(x, -1.0) is float32).
TESSERA_API Tensor pow(const Tensor& a, Scalar exponent);
TESSERA_API Tensor maximum(const Tensor& a, Scalar b);
TESSERA_API Tensor minimum(const Tensor& a, Scalar b);

// ---- comparisons (bool results) ----
TESSERA_API Tensor eq(const Tensor& a, const Tensor& b);
TESSERA_API Tensor ne(const Tensor& a, const Tensor& b);
TESSERA_API Tensor lt(const Tensor& a, const Tensor& b);
TESSERA_API Tensor le(const Tensor& a, const Tensor& b);
TESSERA_API Tensor gt(const Tensor& a, const Tensor& b);
TESSERA_API Tensor ge(const Tensor& a, const Tensor& b);
TESSERA_API Tensor eq(const Tensor& a, Scalar b);
TESSERA_API Tensor ne(const Tensor& a, Scalar b);
TESSERA_API Tensor lt(const Tensor& a, Scalar b);
TESSERA_API Tensor le(const Tensor& a, Scalar b);
TESSERA_API Tensor gt(const Tensor& a, Scalar b);
TESSERA_API Tensor ge(const Tensor& a, Scalar b);

/// cond ? a : b elementwise, broadcasting all three; cond must be bool.
TESSERA_API Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
/// A scalar promotes as in arithmetic: where(c, int_tensor, 0.0) is float32, an integer
/// scalar keeps the integer dtype, and an integer scalar with a bool tensor gives int64.
TESSERA_API Tensor where(const Tensor& cond, const Tensor& a, Scalar b);
TESSERA_API Tensor where(const Tensor& cond, Scalar a, const Tensor& b);

// ---- elementwise, unary (exp, log, sqrt, sigmoid, tanh promote integers to float32) ----
TESSERA_API Tensor neg(const Tensor& a);
TESSERA_API Tensor exp(const Tensor& a);
TESSERA_API Tensor log(const Tensor& a);
TESSERA_API Tensor sqrt(const Tensor& a);
TESSERA_API Tensor abs(const Tensor& a);
TESSERA_API Tensor relu(const Tensor& a);
TESSERA_API Tensor sigmoid(const Tensor& a);
TESSERA_API Tensor tanh(const Tensor& a);
/// How gelu computes Phi(x): exactly (PyTorch's approximate='none') or by its tanh form.
enum class GeluApproximation : std::uint8_t { kNone, kTanh };
/// x * Phi(x), Phi the standard normal CDF (kTanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
/// x^3)))), as torch.nn.functional.gelu. Floating tensors only: DtypeError for integer and
/// bool ones, as PyTorch. Differentiable (one fused kernel backward).
TESSERA_API Tensor gelu(const Tensor& a, GeluApproximation approximate = GeluApproximation::kNone);
/// x * sigmoid(x) (SiLU, swish), as torch.nn.functional.silu; dtypes and errors as gelu.
TESSERA_API Tensor silu(const Tensor& a);

// ---- reductions: over all elements, or over `dims` (negative counts from the end) ----
// An empty `dims` reduces no dim, as NumPy's axis=() (LibTorch's x.sum({}) reduces every
// dim: call sum(x) for that).
/// Sum; bool and integer inputs sum to int64. Floating inputs are summed in float64; float64
/// inputs on the CPU add each block of 256 contiguous elements plainly and the blocks' sums
/// with compensation (Neumaier's), so a long sum's error does not grow with its length (but
/// values that cancel within one block lose digits, as in any plain sum).
TESSERA_API Tensor sum(const Tensor& a);
TESSERA_API Tensor sum(const Tensor& a, const std::vector<int>& dims, bool keepdim = false);
/// Mean; floating inputs only (DtypeError otherwise). Empty input gives NaN.
TESSERA_API Tensor mean(const Tensor& a);
TESSERA_API Tensor mean(const Tensor& a, const std::vector<int>& dims, bool keepdim = false);
/// Max/min values. Throws ShapeError on an empty reduction. NaN wins; the gradient of a NaN
/// result goes to the NaNs that made it (shared), that of ties is shared evenly.
TESSERA_API Tensor max(const Tensor& a);
TESSERA_API Tensor max(const Tensor& a, const std::vector<int>& dims, bool keepdim = false);
TESSERA_API Tensor min(const Tensor& a);
TESSERA_API Tensor min(const Tensor& a, const std::vector<int>& dims, bool keepdim = false);
/// Index of the first max/min (int64) over the flattened tensor, or along `dim`.
TESSERA_API Tensor argmax(const Tensor& a);
TESSERA_API Tensor argmax(const Tensor& a, int dim, bool keepdim = false);
TESSERA_API Tensor argmin(const Tensor& a);
TESSERA_API Tensor argmin(const Tensor& a, int dim, bool keepdim = false);
/// Frobenius norm sqrt(sum(a^2)) as a 0-dim tensor; floating inputs only. Its gradient at
/// a = 0 is 0 (the subgradient PyTorch takes), not 0 / 0.
TESSERA_API Tensor norm(const Tensor& a);

// ---- linear algebra ----
/// Matrix product: 1-D x 1-D (dot), 2-D x 2-D, and batched (leading dims broadcast), like
/// numpy.matmul. Floating dtypes; both operands of one dtype. Throws ShapeError naming both
/// shapes when the inner sizes differ.
TESSERA_API Tensor matmul(const Tensor& a, const Tensor& b);

// ---- diagonals ----
/// For a 1-D tensor of n values, the n x n matrix with them on its diagonal; for a 2-D
/// tensor, its main diagonal (min(rows, cols) values). Differentiable. ShapeError for
/// another rank.
TESSERA_API Tensor diag(const Tensor& a);
/// The sum of a 2-D tensor's main diagonal, as a 0-dim tensor. ShapeError for another rank.
TESSERA_API Tensor trace(const Tensor& a);

// ---- joining and splitting ----
/// The tensors joined along `dim` (negative counts from the end), on their device. All must
/// live on one device (DeviceMismatchError naming the first that does not) and have the same
/// rank and sizes but along `dim`, where a size may be 0 (ShapeError naming the tensor, both
/// shapes and the dim; a 0-dim tensor has no dim to join). Dtypes promote as in the binary
/// ops. Throws Error for an empty list. Differentiable: each input's gradient is its slice of
/// the result's.
TESSERA_API Tensor cat(const std::vector<Tensor>& tensors, int dim = 0);
/// The tensors joined along a new dim `dim` (from -(rank + 1) to rank): cat of each
/// unsqueeze(dim). All must have one shape (ShapeError naming the tensor and both shapes);
/// devices, dtypes and gradients as in cat.
TESSERA_API Tensor stack(const std::vector<Tensor>& tensors, int dim = 0);
/// Views of `a` along `dim`, split_size elements each (the last may have fewer; an empty dim
/// gives one empty view). ShapeError when split_size is not positive.
TESSERA_API std::vector<Tensor> split(const Tensor& a, std::int64_t split_size, int dim = 0);
/// Views of `a` along `dim` of the given sizes, which must sum to the dim's size (ShapeError).
TESSERA_API std::vector<Tensor> split(const Tensor& a, const std::vector<std::int64_t>& sizes,
                                      int dim = 0);
/// `a` split along `dim` into views of ceil(n / chunks) elements, as PyTorch's chunk: there
/// may be fewer than `chunks` (5 elements in 4 chunks give 2, 2, 1); an empty dim gives
/// `chunks` empty views. ShapeError when chunks is not positive.
TESSERA_API std::vector<Tensor> chunk(const Tensor& a, std::int64_t chunks, int dim = 0);

// ---- indexing ----
/// The slices of `x` along `dim` (negative counts from the end) that `index` names, in its
/// order, as PyTorch's index_select: the result has index.numel() elements along dim and
/// x's sizes elsewhere, x's dtype (any) and device. `index` is a 1-D (or 0-dim) int64 or
/// int32 tensor on x's device (DtypeError, ShapeError, DeviceMismatchError); an index may
/// repeat. Indices must be in [0, x.size(dim)): negative ones are refused, as in PyTorch.
/// Index values stay on the device, so a bad one throws IndexError where the kernel meets
/// it: from this call on the plain CPU, at the next wait for the device (item(),
/// to_vector(), synchronize()) elsewhere. Differentiable in x: the gradient is index_add of
/// the result's gradient into zeros (repeated indices add up).
TESSERA_API Tensor index_select(const Tensor& x, int dim, const Tensor& index);
/// A copy of `x` with source's slice i added to its slice index[i] along `dim`, for each i in
/// order (repeated indices add up), as PyTorch's index_add. source has x's dtype and rank,
/// index.numel() elements along dim and x's sizes elsewhere (DtypeError, ShapeError); index
/// and its errors as in index_select. bool adds as logical or. Differentiable in x (the
/// gradient passes through) and source (index_select of the gradient). x.index_add_() is
/// the in-place form.
TESSERA_API Tensor index_add(const Tensor& x, int dim, const Tensor& index, const Tensor& source);

// ---- normalization ----
/// softmax and log_softmax along `dim`, numerically stable (max subtracted first).
TESSERA_API Tensor softmax(const Tensor& a, int dim);
TESSERA_API Tensor log_softmax(const Tensor& a, int dim);

}  // namespace tessera
