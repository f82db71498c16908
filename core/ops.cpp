// Horizon: argument checks and device dispatch for the tensor ops (core/ops.h).
#include "core/ops.h"

#include "core/cpu/kernels.h"
#include "core/cuda/backend.h"

namespace hz {

static const char* const kUnaryNames[] = {"neg", "exp", "log", "sqrt", "rsqrt", "abs", "square",
                                          "tanh", "sigmoid", "relu", "relu2", "silu", "gelu"};
static_assert(sizeof(kUnaryNames) / sizeof(kUnaryNames[0]) == static_cast<size_t>(UnaryOp::Count));
static const char* const kBinaryNames[] = {"add", "sub", "mul", "div", "maximum", "minimum"};
static_assert(sizeof(kBinaryNames) / sizeof(kBinaryNames[0]) == static_cast<size_t>(BinaryOp::Count));
static const char* const kReduceNames[] = {"sum", "mean", "max"};
static_assert(sizeof(kReduceNames) / sizeof(kReduceNames[0]) == static_cast<size_t>(ReduceOp::Count));
const char* unary_op_name(UnaryOp op) { return kUnaryNames[static_cast<int>(op)]; }
const char* binary_op_name(BinaryOp op) { return kBinaryNames[static_cast<int>(op)]; }
const char* reduce_op_name(ReduceOp op) { return kReduceNames[static_cast<int>(op)]; }

namespace ops {
namespace {
void check_defined(const Tensor& t, const char* op, const char* arg) {
  HZ_CHECK(t.defined(), ValueError, op, ": argument '", arg, "' is undefined");
}
void check_same(const Tensor& a, const Tensor& b, const char* op) {
  check_defined(a, op, "a");
  check_defined(b, op, "b");
  HZ_CHECK(a.device() == b.device(), DeviceError, op, ": tensors on different devices (",
           a.device().str(), " and ", b.device().str(), "); move one with .to(device)");
  HZ_CHECK(a.dtype() == b.dtype(), DTypeError, op, ": dtypes differ (", dtype_name(a.dtype()),
           " and ", dtype_name(b.dtype()), "); convert one with .to(dtype)");
}
// CPU only for now: names the op so the user knows what the CUDA skeleton lacks.
void need_cpu(const Tensor& t, const char* op) {
  HZ_CHECK(t.device().is_cpu(), NotImplementedError, op, " on ", t.device().str(),
           " is not implemented in the CUDA skeleton yet; run it on CPU");
}
}  // namespace

Tensor unary(UnaryOp op, const Tensor& x) {
  check_defined(x, unary_op_name(op), "x");
  need_cpu(x, unary_op_name(op));
  return cpu::unary(op, x);
}
Tensor unary_backward(UnaryOp op, const Tensor& x, const Tensor& gout) {
  check_same(x, gout, unary_op_name(op));
  HZ_CHECK(x.shape() == gout.shape(), ShapeError, unary_op_name(op), " backward: grad shape ",
           shape_str(gout.shape()), " != input shape ", shape_str(x.shape()));
  need_cpu(x, unary_op_name(op));
  return cpu::unary_backward(op, x, gout);
}
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  check_same(a, b, binary_op_name(op));
  const Shape out = broadcast_shapes(a.shape(), b.shape());
  if (a.device().is_cuda()) {
    HZ_CHECK(a.shape() == b.shape() && a.is_contiguous() && b.is_contiguous(),
             NotImplementedError, binary_op_name(op),
             " on CUDA supports contiguous same-shape tensors only in the skeleton");
    return cuda::binary(op, a, b);
  }
  return cpu::binary(op, a, b, out);
}
Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Div, a, b); }
Tensor add_scalar(const Tensor& x, double s) {
  check_defined(x, "add_scalar", "x");
  need_cpu(x, "add_scalar");
  return cpu::scalar_op(x, 1.0, s, 1.0);
}
Tensor mul_scalar(const Tensor& x, double s) {
  check_defined(x, "mul_scalar", "x");
  need_cpu(x, "mul_scalar");
  return cpu::scalar_op(x, s, 0.0, 1.0);
}
Tensor pow_scalar(const Tensor& x, double p) {
  check_defined(x, "pow_scalar", "x");
  need_cpu(x, "pow_scalar");
  return cpu::scalar_op(x, 1.0, 0.0, p);
}
void add_(Tensor& dst, const Tensor& src, double alpha) {
  check_same(dst, src, "add_");
  broadcast_shapes(src.shape(), dst.shape());
  HZ_CHECK(broadcast_shapes(src.shape(), dst.shape()) == dst.shape(), ShapeError, "add_: source ",
           shape_str(src.shape()), " does not broadcast to destination ", shape_str(dst.shape()));
  need_cpu(dst, "add_");
  cpu::add_inplace(dst, src, alpha);
}

Tensor sum_to_shape(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  Tensor r = g;
  const int64_t lead = r.dim() - static_cast<int64_t>(shape.size());
  HZ_CHECK(lead >= 0, ShapeError, "sum_to_shape: ", shape_str(g.shape()), " has fewer dims than ",
           shape_str(shape));
  for (int64_t i = 0; i < lead; ++i) r = sum(r, 0, false);
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (shape[d] == 1 && r.size(d) != 1) r = sum(r, d, true);
    else HZ_CHECK(shape[d] == r.size(d), ShapeError, "sum_to_shape: ", shape_str(g.shape()),
                  " does not reduce to ", shape_str(shape));
  }
  return r;
}

Tensor sum(const Tensor& x, int64_t dim, bool keepdim) {
  check_defined(x, "sum", "x");
  need_cpu(x, "sum");
  return cpu::reduce_dim(ReduceOp::Sum, x, x.normalize_dim(dim), keepdim, nullptr);
}
Tensor mean(const Tensor& x, int64_t dim, bool keepdim) {
  check_defined(x, "mean", "x");
  need_cpu(x, "mean");
  return cpu::reduce_dim(ReduceOp::Mean, x, x.normalize_dim(dim), keepdim, nullptr);
}
MaxResult max(const Tensor& x, int64_t dim, bool keepdim) {
  check_defined(x, "max", "x");
  need_cpu(x, "max");
  MaxResult r;
  r.values = cpu::reduce_dim(ReduceOp::Max, x, x.normalize_dim(dim), keepdim, &r.indices);
  return r;
}
Tensor sum_all(const Tensor& x) { need_cpu(x, "sum_all"); return cpu::reduce_all(ReduceOp::Sum, x); }
Tensor mean_all(const Tensor& x) { need_cpu(x, "mean_all"); return cpu::reduce_all(ReduceOp::Mean, x); }
Tensor max_all(const Tensor& x) { need_cpu(x, "max_all"); return cpu::reduce_all(ReduceOp::Max, x); }

Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb, double alpha) {
  check_same(a, b, "matmul");
  HZ_CHECK(a.dim() >= 2 && b.dim() >= 2, ShapeError, "matmul needs operands with >= 2 dims, got ",
           shape_str(a.shape()), " and ", shape_str(b.shape()));
  const int64_t K_a = ta ? a.size(-2) : a.size(-1), K_b = tb ? b.size(-1) : b.size(-2);
  HZ_CHECK(K_a == K_b, ShapeError, "matmul: inner dims differ: ", shape_str(a.shape()),
           ta ? "^T" : "", " x ", shape_str(b.shape()), tb ? "^T" : "", " (", K_a, " vs ", K_b, ")");
  const Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  const Shape batch = broadcast_shapes(ba, bb);
  Shape sa = batch, sb = batch;
  sa.insert(sa.end(), a.shape().end() - 2, a.shape().end());
  sb.insert(sb.end(), b.shape().end() - 2, b.shape().end());
  // A 2-D b shared by a contiguous batch of a: fold the batch into M (one large GEMM).
  if (b.dim() == 2 && !ta && a.dim() > 2 && a.is_contiguous() && a.device().is_cpu()) {
    Tensor flat = a.reshape({-1, a.size(-1)});
    Tensor out = cpu::matmul(flat, b, false, tb, alpha, {});
    Shape os = batch;
    os.push_back(a.size(-2));
    os.push_back(out.size(-1));
    return out.view(os);
  }
  if (a.device().is_cuda()) return cuda::matmul(a.expand(sa), b.expand(sb), ta, tb, alpha, batch);
  return cpu::matmul(a.expand(sa), b.expand(sb), ta, tb, alpha, batch);
}

Tensor softmax(const Tensor& x, int64_t dim) {
  check_defined(x, "softmax", "x");
  need_cpu(x, "softmax");
  return cpu::softmax(x, x.normalize_dim(dim), false);
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  check_defined(x, "log_softmax", "x");
  need_cpu(x, "log_softmax");
  return cpu::softmax(x, x.normalize_dim(dim), true);
}
Tensor softmax_backward(const Tensor& y, const Tensor& g, int64_t dim) {
  check_same(y, g, "softmax_backward");
  need_cpu(y, "softmax_backward");
  return cpu::softmax_backward(y, g, y.normalize_dim(dim), false);
}
Tensor log_softmax_backward(const Tensor& y, const Tensor& g, int64_t dim) {
  check_same(y, g, "log_softmax_backward");
  need_cpu(y, "log_softmax_backward");
  return cpu::softmax_backward(y, g, y.normalize_dim(dim), true);
}

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  check_defined(weight, "embedding", "weight");
  check_defined(ids, "embedding", "ids");
  HZ_CHECK(weight.dim() == 2, ShapeError, "embedding: weight must be (V, C), got ",
           shape_str(weight.shape()));
  HZ_CHECK(is_integer(ids.dtype()), DTypeError, "embedding: ids must be i32/i64, got ",
           dtype_name(ids.dtype()));
  need_cpu(weight, "embedding");
  return cpu::embedding(weight, ids);
}
Tensor embedding_backward(const Tensor& gout, const Tensor& ids, int64_t vocab) {
  need_cpu(gout, "embedding_backward");
  HZ_CHECK(gout.numel() == ids.numel() * gout.size(-1), ShapeError,
           "embedding_backward: grad ", shape_str(gout.shape()), " does not match ids ",
           shape_str(ids.shape()));
  return cpu::embedding_backward(gout, ids, vocab);
}

static void check_ce(const Tensor& logits, const Tensor& targets, const Tensor& weights) {
  check_defined(logits, "cross_entropy", "logits");
  check_defined(targets, "cross_entropy", "targets");
  HZ_CHECK(logits.dim() == 2, ShapeError, "cross_entropy: logits must be (N, V), got ",
           shape_str(logits.shape()), "; reshape to (-1, V)");
  HZ_CHECK(targets.dim() == 1 && targets.size(0) == logits.size(0), ShapeError,
           "cross_entropy: targets must be (N) = (", logits.size(0), "), got ",
           shape_str(targets.shape()));
  HZ_CHECK(is_integer(targets.dtype()), DTypeError, "cross_entropy: targets must be i32/i64");
  if (weights.defined())
    HZ_CHECK(weights.shape() == targets.shape(), ShapeError, "cross_entropy: weights ",
             shape_str(weights.shape()), " must match targets ", shape_str(targets.shape()));
  need_cpu(logits, "cross_entropy");
}
CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& targets,
                                 const Tensor& weights, int64_t ignore_index) {
  check_ce(logits, targets, weights);
  return cpu::cross_entropy(logits, targets, weights, ignore_index);
}
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& weights,
                              const Tensor& lse, double weight_sum, int64_t ignore_index,
                              double gscale) {
  check_ce(logits, targets, weights);
  return cpu::cross_entropy_backward(logits, targets, weights, lse, weight_sum, ignore_index, gscale);
}
Tensor cross_entropy_rows(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  check_ce(logits, targets, Tensor());
  return cpu::cross_entropy_rows(logits, targets, ignore_index);
}

RmsNormResult rms_norm(const Tensor& x, const Tensor& w, double eps) {
  check_defined(x, "rms_norm", "x");
  if (w.defined()) {
    check_same(x, w, "rms_norm");
    HZ_CHECK(w.dim() == 1 && w.size(0) == x.size(-1), ShapeError, "rms_norm: weight ",
             shape_str(w.shape()), " must be (", x.size(-1), ")");
  }
  need_cpu(x, "rms_norm");
  return cpu::rms_norm(x, w, eps);
}
RmsNormGrads rms_norm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd,
                               const Tensor& gout, bool need_gx, bool need_gw) {
  need_cpu(x, "rms_norm_backward");
  return cpu::rms_norm_backward(x, w, rstd, gout, need_gx, need_gw);
}

}  // namespace ops
}  // namespace hz
