// Horizon: differentiable ops on Variables. Each op family lives in one ops_*.cpp file with its
// shape rules, forward and backward side by side. Integer inputs (ids, targets) and masks are
// plain Tensors: they never need gradients.
#pragma once
#include <vector>

#include "autograd/variable.h"
#include "core/device.h"
#include "core/ops.h"

namespace hz::ag {

// ---- arithmetic (ops_arith.cpp); binary ops broadcast numpy-style ---------------------------
Variable add(const Variable& a, const Variable& b);
Variable sub(const Variable& a, const Variable& b);
Variable mul(const Variable& a, const Variable& b);
Variable div(const Variable& a, const Variable& b);
Variable add_scalar(const Variable& x, double s);
Variable mul_scalar(const Variable& x, double s);
Variable pow_scalar(const Variable& x, double p);
Variable unary(UnaryOp op, const Variable& x);
inline Variable neg(const Variable& x) { return unary(UnaryOp::Neg, x); }
inline Variable exp(const Variable& x) { return unary(UnaryOp::Exp, x); }
inline Variable log(const Variable& x) { return unary(UnaryOp::Log, x); }
inline Variable sqrt(const Variable& x) { return unary(UnaryOp::Sqrt, x); }
inline Variable rsqrt(const Variable& x) { return unary(UnaryOp::Rsqrt, x); }
inline Variable square(const Variable& x) { return unary(UnaryOp::Square, x); }
inline Variable tanh(const Variable& x) { return unary(UnaryOp::Tanh, x); }
inline Variable sigmoid(const Variable& x) { return unary(UnaryOp::Sigmoid, x); }
inline Variable relu(const Variable& x) { return unary(UnaryOp::Relu, x); }
inline Variable relu2(const Variable& x) { return unary(UnaryOp::Relu2, x); }  // relu(x)^2
// SwiGLU's gate silu(a) * b in one op (ops::swiglu): the values and gradients of mul(silu(a), b) bit
// for bit, keeping a and b for the backward but not silu(a).
Variable swiglu(const Variable& a, const Variable& b);
inline Variable silu(const Variable& x) { return unary(UnaryOp::Silu, x); }
inline Variable gelu(const Variable& x) { return unary(UnaryOp::Gelu, x); }    // exact (erf)
inline Variable log_sigmoid(const Variable& x) { return unary(UnaryOp::LogSigmoid, x); }

inline Variable operator+(const Variable& a, const Variable& b) { return add(a, b); }
inline Variable operator-(const Variable& a, const Variable& b) { return sub(a, b); }
inline Variable operator*(const Variable& a, const Variable& b) { return mul(a, b); }
inline Variable operator/(const Variable& a, const Variable& b) { return div(a, b); }
inline Variable operator-(const Variable& a) { return neg(a); }

// ---- views (ops_view.cpp): share storage forward; backward maps the gradient back --------
Variable reshape(const Variable& x, const Shape& shape);
Variable transpose(const Variable& x, int64_t d0, int64_t d1);
Variable permute(const Variable& x, const std::vector<int64_t>& dims);
Variable narrow(const Variable& x, int64_t dim, int64_t start, int64_t length);
Variable slice(const Variable& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Variable expand(const Variable& x, const Shape& shape);
Variable unsqueeze(const Variable& x, int64_t dim);
Variable squeeze(const Variable& x, int64_t dim);
Variable contiguous(const Variable& x);
// Value conversion to dtype `dt` (identity when x already is dt); the gradient is converted back
// to x's dtype (bf16 activations from f32 parameters: the parameter's gradient stays f32).
Variable cast(const Variable& x, DType dt);
Variable cat(const std::vector<Variable>& xs, int64_t dim);

// ---- reductions and softmax (ops_reduce.cpp) ----------------------------------------------
Variable sum(const Variable& x, int64_t dim, bool keepdim = false);
Variable mean(const Variable& x, int64_t dim, bool keepdim = false);
Variable max(const Variable& x, int64_t dim, bool keepdim = false);  // grad to the first argmax
Variable sum_all(const Variable& x);
Variable cumsum(const Variable& x, int64_t dim);  // inclusive prefix sums along dim
Variable mean_all(const Variable& x);
Variable softmax(const Variable& x, int64_t dim = -1);
Variable log_softmax(const Variable& x, int64_t dim = -1);

// ---- matrix products (ops_matmul.cpp) ----------------------------------------------------
// alpha * op(a) op(b) with batch broadcasting (see ops::matmul).
Variable matmul(const Variable& a, const Variable& b, bool trans_a = false, bool trans_b = false,
                double alpha = 1.0);
// x (..., in) @ w(out, in)^T (+ b (out)).
Variable linear(const Variable& x, const Variable& w, const Variable& b = Variable());

// ---- nn (ops_nn.cpp) ----------------------------------------------------------------------
Variable embedding(const Variable& weight, const Tensor& ids);
// Mean NLL over rows with weight (undefined = 1) and target != ignore_index.
Variable cross_entropy(const Variable& logits, const Tensor& targets,
                       const Tensor& weights = Tensor(), int64_t ignore_index = -100);
// The LM head and its loss in one op, chunked: the mean NLL (weighted as cross_entropy) of the
// logits h W^T, h (N, C), W (V, C), never holding more than `chunk` rows of logits (forward) or
// of logits and their gradient (backward, which recomputes them). chunk <= 0: all rows at once;
// otherwise rounded up to a multiple of kLossSlice.
//   - With chunk 0 the loss and dh are bitwise those of cross_entropy(matmul(h, W^T)) computed
//     under cpu::RowBlockedProducts (as Transformer::project computes logits): each row's
//     logits, NLL and gradient come from the same kernels, and the loss sums the rows' f64 NLL in
//     row order as cross_entropy does.
//   - dW sums dlogits_s^T h_s over fixed slices of kLossSlice rows in order on the CPU, and one
//     GEMM per chunk elsewhere; it differs from one GEMM over all N rows by round-off only (that
//     GEMM's reduction over N is split by BLAS's own blocking, which no chunked computation can
//     reproduce).
//   - The chunk changes no bit on the CPU, in any dtype: the head's products run row-blocked
//     (cpu::RowBlockedProducts: rows in blocks of cpu::kGemmRowBlock from the first, core/device.h)
//     and chunks start at multiples of kLossSlice, a multiple of the block, so every row meets
//     the same block (tests/autograd/lm_head_loss_test.cpp).
//     cuBLAS may pick other kernels for other row counts: there the chunks agree to round-off,
//     and one setting still repeats bitwise.
// Memory: chunk x V logits (and their gradient) instead of N x V.
constexpr int64_t kLossSlice = 256;
static_assert(kLossSlice % cpu::kGemmRowBlock == 0, "chunks must start where the CPU GEMM's row blocks do");
// The rows lm_head_loss (and every chunked use of the head) takes at a time for N rows: all of
// them for chunk <= 0, else chunk rounded up to whole kLossSlice slices (a chunk beyond 2^40 rows
// is taken as 2^40: the round-up cannot overflow).
inline int64_t loss_chunk_step(int64_t chunk, int64_t N) {
  if (chunk > (int64_t{1} << 40)) chunk = int64_t{1} << 40;
  return chunk <= 0 ? (N > 1 ? N : 1) : (chunk + kLossSlice - 1) / kLossSlice * kLossSlice;
}
Variable lm_head_loss(const Variable& h, const Variable& w, const Tensor& targets, const Tensor& weights = Tensor(),
                      int64_t chunk = 0, int64_t ignore_index = -100);
// RMSNorm over the last dim; w (C) or undefined (no gain). Its backward adds the gradient that x's
// other consumers have already given it in the same pass (Grads::pending: on the residual stream,
// the next residual add's), instead of the engine adding the two afterwards.
Variable rms_norm(const Variable& x, const Variable& w, double eps = 1e-6);
// The residual stream's add and the norm after it in one pass: sum = x + r, normed = rms_norm(sum,
// w). The graph is the two ops' (an "add" node, then an "rms_norm" node), so gradients, traces and
// recomputation see no difference; values are bit for bit the unfused ones. r must have x's shape
// and dtype (anything else runs the two ops).
struct ResidualNorm {
  Variable sum, normed;
};
ResidualNorm add_rms_norm(const Variable& x, const Variable& r, const Variable& w, double eps = 1e-6);

}  // namespace hz::ag
