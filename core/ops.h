// Horizon: the tensor op interface (no autograd). Each function checks shapes/dtypes/devices,
// then calls the entry of the tensors' device in the backend table (core/backend.h; kernels in
// core/cpu/ and core/cuda/). Floating ops take f32, f64 and bf16 (bf16 computes in f32).
//
// Dimension letters: B batch, M/N/K matrix dims, N rows, V vocabulary, C channels.
#pragma once
#include <cstdint>
#include <vector>

#include "core/math.h"
#include "core/op_kinds.h"
#include "core/tensor.h"

namespace hz {

const char* unary_op_name(UnaryOp op);
// The dtype floating ops accumulate and return statistics in: f32 for bf16, else the dtype itself.
inline DType acc_dtype(DType t) { return t == DType::BF16 ? DType::F32 : t; }
const char* binary_op_name(BinaryOp op);
const char* reduce_op_name(ReduceOp op);

struct MaxResult {
  Tensor values;   // reduced shape
  Tensor indices;  // I64, same shape: argmax along the dim (first occurrence)
};

struct CrossEntropyResult {
  Tensor loss;       // scalar: sum_i w_i * nll_i / sum_i w_i over rows not ignored (acc dtype)
  Tensor lse;        // (N) row log-sum-exp of the logits, acc dtype (saved for backward)
  double weight_sum; // sum_i w_i (0 -> loss is 0)
};

// Rotation of pairs (x[m], x[m + D/2]) by angle positions[t] * inv_freq[m] (RoPE's rotate-half
// layout), then times mscale; inverse rotates by the negative angle. Angles, cos and sin are
// computed in double.
struct RotaryParams {
  std::vector<double> inv_freq;  // D/2 frequencies (0 = no rotation)
  double mscale = 1.0;
  bool inverse = false;
};

// Philox4x32-10 numbers (core/rng.h): element i (row-major) uses words (2i, 2i+1) of the stream
// (seed, stream) from word `offset`. Normal: Box-Muller in double; uniform: 53-bit [low, high).
enum class RandomKind : uint8_t { Normal, Uniform };
struct RandomFill {
  RandomKind kind = RandomKind::Normal;
  uint64_t seed = 0, stream = 0, offset = 0;
  double a = 0.0, b = 1.0;  // normal: mean, stddev; uniform: low, high
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

// SwiGLU's gate, out = silu(a) * b (a, b of one shape and dtype), in one pass: silu(a) is rounded to
// the dtype before the product, so the result is bit for bit ops::mul(unary(Silu, a), b). The
// backward returns da = (g b) silu'(a) and db = g silu(a), each product rounded as the two ops'
// backwards round it, from a and b alone (silu(a) is not kept).
Tensor swiglu(const Tensor& a, const Tensor& b);
struct SwiGluGrads {
  Tensor da, db;
};
SwiGluGrads swiglu_backward(const Tensor& a, const Tensor& b, const Tensor& g, bool need_a, bool need_b);

// Sum `g` down to `shape` (the reverse of broadcasting).
Tensor sum_to_shape(const Tensor& g, const Shape& shape);

// ---- reductions ---------------------------------------------------------------------------
Tensor sum(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& x, int64_t dim, bool keepdim = false);
MaxResult max(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor sum_all(const Tensor& x);   // scalar, accumulated in double
Tensor mean_all(const Tensor& x);
Tensor max_all(const Tensor& x);
// out_k = sum_{m <= k} x_m along dim (reverse: sum_{m >= k}, cumsum's backward)
Tensor cumsum(const Tensor& x, int64_t dim, bool reverse = false);

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
// Per-row negative log-likelihood (N) in f64 (the values cross_entropy sums), 0 for ignored rows;
// for evaluation and the chunked LM-head loss.
Tensor cross_entropy_rows(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);

// ---- RMSNorm over the last dim ------------------------------------------------------------
// y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps). x (..., C), w (C) or undefined.
// With a residual r (x's shape and dtype), the residual stream's add and the norm after it are one
// pass: s = x + r (rounded to x's dtype, as ops::add rounds it) is returned as `sum` and y, rstd
// are the norm of s, bit for bit what ops::add followed by rms_norm gives.
struct RmsNormResult {
  Tensor y;
  Tensor rstd;  // (...) per row, saved for backward
  Tensor sum;   // x + residual, when a residual was given
};
RmsNormResult rms_norm(const Tensor& x, const Tensor& w, double eps, const Tensor& residual = Tensor());
struct RmsNormGrads {
  Tensor gx, gw;
};
// x is the normed input (the sum, when the forward had a residual). With gres (x's shape and
// dtype: the gradient that the input's other consumers have already given it), gx comes back as
// gres + the norm's gradient in the same pass, bit for bit ops::add(gres, gx).
RmsNormGrads rms_norm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd,
                               const Tensor& gout, bool need_gx, bool need_gw, const Tensor& gres = Tensor());

// ---- index ops ------------------------------------------------------------------------------
// out (out_shape, zeros) with out[..., index[...], ...] = src along `dim`; index is I64 with src's
// shape, out_shape equals src's shape except at `dim` (the backward of max along a dim).
Tensor scatter_dim(const Tensor& src, const Tensor& index, int64_t dim, const Shape& out_shape);

// ---- rotary position rotation -----------------------------------------------------------------
// x (B, H, T, D), positions (T) or (B, T) integer (per sequence: packed documents) -> rotated x
// (same dtype; computed in double/f32).
Tensor rotary(const Tensor& x, const Tensor& positions, const RotaryParams& p);

// ---- rotation by given angles (learned or accumulated RoPE angles) -------------------------------
// x (B, Hx, T, D), angles (B or 1, G, T, D/2) f32 or f64 with Hx % G == 0 (head h reads group
// h / (Hx / G), the GQA grouping): pair (m, m + D/2) of each row rotates by angles[.., m] (inverse:
// by minus it), then times mscale. cos and sin in double, applied in x's compute type.
Tensor rotate_angles(const Tensor& x, const Tensor& angles, double mscale, bool inverse);
// The angles' gradient, from y = rotate_angles(x, angles, ..) and its gradient gy: per (b, g, t, m)
// the sum over the group's heads (and over the batch when angles has one row) of g_b y_a - g_a y_b
// (inverse: minus it), (y_a, y_b) the rotated pair; accumulated in double (f32 for f32 angles on
// CUDA) in head order by one thread, so deterministic. Angles' shape and dtype.
Tensor rotate_angles_grad(const Tensor& y, const Tensor& gy, const Tensor& angles, bool inverse);

// ---- random fill --------------------------------------------------------------------------------
void random_fill_(Tensor& t, const RandomFill& r);  // floating t, any device

// ---- optimizer arithmetic (in place) ------------------------------------------------------------
// AdamW on one parameter: p, m, v contiguous of one shape and device, g of p's shape (any dtype,
// any layout). Arithmetic in double (see math::adamw_element).
void adamw_update_(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const math::AdamWCoef& c);
// AdamW on many parameters at once: one launch per device and dtype for up to multi::kTensors
// parameters (core/multi_tensor.h), each slot with its own lr and decay (c's are not read); every
// slot checked as adamw_update_ checks it. The same bits as adamw_update_ on each slot.
struct AdamWSlot {
  Tensor p, g, m, v;
  double lr = 0.0, decay = 1.0;
};
void adamw_multi_update_(std::vector<AdamWSlot>& slots, const math::AdamWCoef& c);
// buf = mu buf + (1 - mu) g;  out = nesterov ? (1 - mu) g + mu buf : buf  (buf, out contiguous),
// g read as g * gscale rounded to its dtype (math::scaled_grad: the gradient clip's factor)
void momentum_update_(const Tensor& g, Tensor& buf, Tensor& out, double mu, bool nesterov, double gscale = 1.0);
// x = alpha x + beta y (y undefined: x = alpha x); y broadcasts to x.
void axpby_(Tensor& x, const Tensor& y, double alpha, double beta);
// sum over every element of every tensor of x^2, in double, in a fixed order (one device sync).
double sum_squares(const std::vector<Tensor>& xs);

}  // namespace ops
}  // namespace hz
