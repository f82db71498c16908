// Horizon: the tensor op interface (no autograd). Each function checks shapes/dtypes/devices,
// then dispatches to the kernel of the tensors' device (core/cpu/, core/cuda/). Floating ops
// support f32 and f64 on CPU; the CUDA skeleton implements a subset and says so otherwise.
//
// Dimension letters: B batch, M/N/K matrix dims, N rows, V vocabulary, C channels.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace hz {

enum class UnaryOp : uint8_t {
  Neg, Exp, Log, Sqrt, Rsqrt, Abs, Square, Tanh, Sigmoid, Relu, Relu2, Silu, Gelu, Count
};
static_assert(static_cast<int>(UnaryOp::Count) == 13, "update unary_op_name and the kernels");
const char* unary_op_name(UnaryOp op);

enum class BinaryOp : uint8_t { Add, Sub, Mul, Div, Maximum, Minimum, Count };
static_assert(static_cast<int>(BinaryOp::Count) == 6, "update binary_op_name and the kernels");
const char* binary_op_name(BinaryOp op);

enum class ReduceOp : uint8_t { Sum, Mean, Max, Count };
static_assert(static_cast<int>(ReduceOp::Count) == 3, "update reduce_op_name");
const char* reduce_op_name(ReduceOp op);

struct MaxResult {
  Tensor values;   // reduced shape
  Tensor indices;  // I64, same shape: argmax along the dim (first occurrence)
};

struct CrossEntropyResult {
  Tensor loss;       // scalar: sum_i w_i * nll_i / sum_i w_i over rows not ignored
  Tensor lse;        // (N) row log-sum-exp of the logits, f32/f64 (saved for backward)
  double weight_sum; // sum_i w_i (0 -> loss is 0)
};

namespace ops {

// ---- elementwise --------------------------------------------------------------------------
Tensor unary(UnaryOp op, const Tensor& x);
// gout * f'(x) for the unary op (the backward of `unary`).
Tensor unary_backward(UnaryOp op, const Tensor& x, const Tensor& gout);
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);  // numpy broadcasting
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add_scalar(const Tensor& x, double s);
Tensor mul_scalar(const Tensor& x, double s);
Tensor pow_scalar(const Tensor& x, double p);
void add_(Tensor& dst, const Tensor& src, double alpha = 1.0);  // dst += alpha * src (broadcast src)

// Sum `g` down to `shape` (the reverse of broadcasting).
Tensor sum_to_shape(const Tensor& g, const Shape& shape);

// ---- reductions ---------------------------------------------------------------------------
Tensor sum(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& x, int64_t dim, bool keepdim = false);
MaxResult max(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor sum_all(const Tensor& x);   // scalar, accumulated in double
Tensor mean_all(const Tensor& x);
Tensor max_all(const Tensor& x);

// ---- matrix products ----------------------------------------------------------------------
// C = alpha * op(A) op(B) (+ beta * C_in when c_in is given). A: (..., M, K) or (..., K, M)
// with trans_a; B likewise. Batch dims broadcast (a 2-D operand is shared by every batch).
// Transposed views are passed to BLAS as transposes, not copied.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false,
              double alpha = 1.0);

// ---- softmax family -----------------------------------------------------------------------
Tensor softmax(const Tensor& x, int64_t dim = -1);
Tensor log_softmax(const Tensor& x, int64_t dim = -1);
// Backward of softmax given its output y: y * (g - sum(g*y)).
Tensor softmax_backward(const Tensor& y, const Tensor& g, int64_t dim = -1);
// Backward of log_softmax given its output y: g - exp(y) * sum(g).
Tensor log_softmax_backward(const Tensor& y, const Tensor& g, int64_t dim = -1);

// ---- embedding ----------------------------------------------------------------------------
// weight (V, C), ids integer of any shape -> (*ids.shape, C). Out-of-range ids throw.
Tensor embedding(const Tensor& weight, const Tensor& ids);
// Scatter-add of gout (*ids.shape, C) into a (V, C) gradient; deterministic.
Tensor embedding_backward(const Tensor& gout, const Tensor& ids, int64_t vocab);

// ---- cross-entropy ------------------------------------------------------------------------
// logits (N, V); targets (N) integer; weights (N) float or undefined (= 1). Rows whose target
// equals ignore_index count as weight 0.
CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& targets,
                                 const Tensor& weights = Tensor(), int64_t ignore_index = -100);
// d loss / d logits, scaled by the scalar upstream gradient `gscale`.
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& weights,
                              const Tensor& lse, double weight_sum, int64_t ignore_index,
                              double gscale);
// Per-row negative log-likelihood (N), 0 for ignored rows; for evaluation.
Tensor cross_entropy_rows(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);

// ---- RMSNorm over the last dim ------------------------------------------------------------
// y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps). x (..., C), w (C) or undefined.
struct RmsNormResult {
  Tensor y;
  Tensor rstd;  // (...) per row, saved for backward
};
RmsNormResult rms_norm(const Tensor& x, const Tensor& w, double eps);
struct RmsNormGrads {
  Tensor gx, gw;
};
RmsNormGrads rms_norm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd,
                               const Tensor& gout, bool need_gx, bool need_gw);

}  // namespace ops
}  // namespace hz
