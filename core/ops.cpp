// Horizon: argument checks and device dispatch for the tensor ops (core/ops.h).
#include "core/ops.h"

#include <algorithm>

#include "core/backend.h"

namespace hz {

static const char* const kUnaryNames[] = {"neg", "exp", "log", "sqrt", "rsqrt", "abs", "square",
                                          "tanh", "sigmoid", "relu", "relu2", "silu", "gelu",
                                          "log_sigmoid"};
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
void check_floating(const Tensor& t, const char* op) {
  HZ_CHECK(is_floating(t.dtype()), DTypeError, op, ": needs a floating tensor (f32, f64, bf16), got ",
           dtype_name(t.dtype()), "; convert with .to(DType::F32)");
}
void check_device(const Tensor& a, const Tensor& b, const char* op) {
  HZ_CHECK(a.device() == b.device(), DeviceError, op, ": tensors on different devices (",
           a.device().str(), " and ", b.device().str(), "); move one with .to(device)");
}
}  // namespace

Tensor unary(UnaryOp op, const Tensor& x) {
  check_defined(x, unary_op_name(op), "x");
  check_floating(x, unary_op_name(op));
  return HZ_BACKEND(x.device(), unary)(op, x);
}
Tensor unary_backward(UnaryOp op, const Tensor& x, const Tensor& gout) {
  check_same(x, gout, unary_op_name(op));
  HZ_CHECK(x.shape() == gout.shape(), ShapeError, unary_op_name(op), " backward: grad shape ",
           shape_str(gout.shape()), " != input shape ", shape_str(x.shape()));
  check_floating(x, unary_op_name(op));
  return HZ_BACKEND(x.device(), unary_backward)(op, x, gout);
}
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  check_same(a, b, binary_op_name(op));
  check_floating(a, binary_op_name(op));
  const Shape out = broadcast_shapes(a.shape(), b.shape());
  return HZ_BACKEND(a.device(), binary)(op, a, b, out);
}
Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Div, a, b); }
Tensor add_scalar(const Tensor& x, double s) {
  check_defined(x, "add_scalar", "x");
  check_floating(x, "add_scalar");
  return HZ_BACKEND(x.device(), scalar_op)(x, 1.0, s, 1.0);
}
Tensor mul_scalar(const Tensor& x, double s) {
  check_defined(x, "mul_scalar", "x");
  check_floating(x, "mul_scalar");
  return HZ_BACKEND(x.device(), scalar_op)(x, s, 0.0, 1.0);
}
Tensor pow_scalar(const Tensor& x, double p) {
  check_defined(x, "pow_scalar", "x");
  check_floating(x, "pow_scalar");
  return HZ_BACKEND(x.device(), scalar_op)(x, 1.0, 0.0, p);
}
void add_(Tensor& dst, const Tensor& src, double alpha) {
  check_same(dst, src, "add_");
  broadcast_shapes(src.shape(), dst.shape());
  HZ_CHECK(broadcast_shapes(src.shape(), dst.shape()) == dst.shape(), ShapeError, "add_: source ",
           shape_str(src.shape()), " does not broadcast to destination ", shape_str(dst.shape()));
  check_floating(dst, "add_");
  HZ_BACKEND(dst.device(), add_inplace)(dst, src, alpha);
}

Tensor swiglu(const Tensor& a, const Tensor& b) {
  check_same(a, b, "swiglu");
  check_floating(a, "swiglu");
  HZ_CHECK(a.shape() == b.shape(), ShapeError, "swiglu: gate ", shape_str(a.shape()), " and value ",
           shape_str(b.shape()), " must have one shape");
  return HZ_BACKEND(a.device(), swiglu)(a.contiguous(), b.contiguous());
}

SwiGluGrads swiglu_backward(const Tensor& a, const Tensor& b, const Tensor& g, bool need_a, bool need_b) {
  check_same(a, b, "swiglu_backward");
  check_same(a, g, "swiglu_backward");
  HZ_CHECK(a.shape() == b.shape() && g.shape() == a.shape(), ShapeError, "swiglu_backward: a ", shape_str(a.shape()),
           ", b ", shape_str(b.shape()), " and g ", shape_str(g.shape()), " must have one shape");
  if (!need_a && !need_b) return {};
  return HZ_BACKEND(a.device(), swiglu_backward)(a.contiguous(), b.contiguous(), g.contiguous(), need_a, need_b);
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
  check_floating(x, "sum");
  return HZ_BACKEND(x.device(), reduce_dim)(ReduceOp::Sum, x, x.normalize_dim(dim), keepdim, nullptr);
}
Tensor mean(const Tensor& x, int64_t dim, bool keepdim) {
  check_defined(x, "mean", "x");
  check_floating(x, "mean");
  return HZ_BACKEND(x.device(), reduce_dim)(ReduceOp::Mean, x, x.normalize_dim(dim), keepdim, nullptr);
}
MaxResult max(const Tensor& x, int64_t dim, bool keepdim) {
  check_defined(x, "max", "x");
  check_floating(x, "max");
  MaxResult r;
  r.values = HZ_BACKEND(x.device(), reduce_dim)(ReduceOp::Max, x, x.normalize_dim(dim), keepdim, &r.indices);
  return r;
}
static Tensor reduce_all(ReduceOp op, const Tensor& x) {
  check_defined(x, reduce_op_name(op), "x");
  check_floating(x, reduce_op_name(op));
  return HZ_BACKEND(x.device(), reduce_all)(op, x);
}
Tensor sum_all(const Tensor& x) { return reduce_all(ReduceOp::Sum, x); }

Tensor cumsum(const Tensor& x, int64_t dim, bool reverse) {
  check_defined(x, "cumsum", "x");
  check_floating(x, "cumsum");
  return HZ_BACKEND(x.device(), cumsum)(x, x.normalize_dim(dim), reverse);
}
Tensor mean_all(const Tensor& x) { return reduce_all(ReduceOp::Mean, x); }
Tensor max_all(const Tensor& x) { return reduce_all(ReduceOp::Max, x); }

Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb, double alpha) {
  check_same(a, b, "matmul");
  check_floating(a, "matmul");
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
  const auto mm = HZ_BACKEND(a.device(), matmul);
  if (b.dim() == 2 && !ta && a.dim() > 2 && a.is_contiguous()) {
    Tensor flat = a.reshape({-1, a.size(-1)});
    Tensor out = mm(flat, b, false, tb, alpha, {});
    Shape os = batch;
    os.push_back(a.size(-2));
    os.push_back(out.size(-1));
    return out.view(os);
  }
  return mm(a.expand(sa), b.expand(sb), ta, tb, alpha, batch);
}

Tensor softmax(const Tensor& x, int64_t dim) {
  check_defined(x, "softmax", "x");
  check_floating(x, "softmax");
  return HZ_BACKEND(x.device(), softmax)(x, x.normalize_dim(dim), false);
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  check_defined(x, "log_softmax", "x");
  check_floating(x, "log_softmax");
  return HZ_BACKEND(x.device(), softmax)(x, x.normalize_dim(dim), true);
}
Tensor softmax_backward(const Tensor& y, const Tensor& g, int64_t dim) {
  check_same(y, g, "softmax_backward");
  check_floating(y, "softmax_backward");
  return HZ_BACKEND(y.device(), softmax_backward)(y, g, y.normalize_dim(dim), false);
}
Tensor log_softmax_backward(const Tensor& y, const Tensor& g, int64_t dim) {
  check_same(y, g, "log_softmax_backward");
  check_floating(y, "log_softmax_backward");
  return HZ_BACKEND(y.device(), softmax_backward)(y, g, y.normalize_dim(dim), true);
}

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  check_defined(weight, "embedding", "weight");
  check_defined(ids, "embedding", "ids");
  HZ_CHECK(weight.dim() == 2, ShapeError, "embedding: weight must be (V, C), got ",
           shape_str(weight.shape()));
  HZ_CHECK(is_integer(ids.dtype()), DTypeError, "embedding: ids must be i32/i64, got ",
           dtype_name(ids.dtype()));
  check_device(weight, ids, "embedding");
  return HZ_BACKEND(weight.device(), embedding)(weight, ids);
}
Tensor embedding_backward(const Tensor& gout, const Tensor& ids, int64_t vocab) {
  check_floating(gout, "embedding_backward");
  check_device(gout, ids, "embedding_backward");
  HZ_CHECK(gout.numel() == ids.numel() * gout.size(-1), ShapeError,
           "embedding_backward: grad ", shape_str(gout.shape()), " does not match ids ",
           shape_str(ids.shape()));
  return HZ_BACKEND(gout.device(), embedding_backward)(gout, ids, vocab);
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
  if (weights.defined()) {
    HZ_CHECK(weights.shape() == targets.shape(), ShapeError, "cross_entropy: weights ",
             shape_str(weights.shape()), " must match targets ", shape_str(targets.shape()));
    check_device(logits, weights, "cross_entropy");
  }
  check_floating(logits, "cross_entropy");
  check_device(logits, targets, "cross_entropy");
}
CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& targets,
                                 const Tensor& weights, int64_t ignore_index) {
  check_ce(logits, targets, weights);
  return HZ_BACKEND(logits.device(), cross_entropy)(logits, targets, weights, ignore_index);
}
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& weights,
                              const Tensor& lse, double weight_sum, int64_t ignore_index,
                              double gscale) {
  check_ce(logits, targets, weights);
  return HZ_BACKEND(logits.device(), cross_entropy_backward)(logits, targets, weights, lse, weight_sum,
                                                             ignore_index, gscale);
}
Tensor cross_entropy_rows(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  check_ce(logits, targets, Tensor());
  return HZ_BACKEND(logits.device(), cross_entropy_rows)(logits, targets, ignore_index);
}

// The gain has x's dtype, or is f32 while x is bf16 (f32 parameters, bf16 activations).
static void check_gain(const Tensor& x, const Tensor& w) {
  check_device(x, w, "rms_norm");
  HZ_CHECK(w.dtype() == x.dtype() || (x.dtype() == DType::BF16 && w.dtype() == DType::F32), DTypeError,
           "rms_norm: gain is ", dtype_name(w.dtype()), " but the input is ", dtype_name(x.dtype()),
           "; the gain must have the input's dtype (or be f32 for a bf16 input)");
}

// A residual operand of the norm (the forward's residual, the backward's gradient already given):
// x's shape, dtype and device; handed over contiguous.
static Tensor residual_operand(const Tensor& x, const Tensor& r, const char* who) {
  if (!r.defined()) return r;
  check_device(x, r, who);
  HZ_CHECK(r.shape() == x.shape() && r.dtype() == x.dtype(), ShapeError, who, ": residual ", shape_str(r.shape()), " ",
           dtype_name(r.dtype()), " must have the input's shape and dtype, ", shape_str(x.shape()), " ",
           dtype_name(x.dtype()));
  return r.contiguous();
}

RmsNormResult rms_norm(const Tensor& x, const Tensor& w, double eps, const Tensor& residual) {
  check_defined(x, "rms_norm", "x");
  check_floating(x, "rms_norm");
  if (w.defined()) {
    check_gain(x, w);
    HZ_CHECK(w.dim() == 1 && w.size(0) == x.size(-1), ShapeError, "rms_norm: weight ",
             shape_str(w.shape()), " must be (", x.size(-1), ")");
  }
  return HZ_BACKEND(x.device(), rms_norm)(x, w, eps, residual_operand(x, residual, "rms_norm"));
}
RmsNormGrads rms_norm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd,
                               const Tensor& gout, bool need_gx, bool need_gw, const Tensor& gres) {
  check_defined(x, "rms_norm_backward", "x");
  check_same(x, gout, "rms_norm_backward");
  if (w.defined()) check_gain(x, w);
  return HZ_BACKEND(x.device(), rms_norm_backward)(x, w, rstd, gout, need_gx, need_gw,
                                                   need_gx ? residual_operand(x, gres, "rms_norm_backward") : Tensor());
}

Tensor scatter_dim(const Tensor& src, const Tensor& index, int64_t dim, const Shape& out_shape) {
  check_defined(src, "scatter_dim", "src");
  check_defined(index, "scatter_dim", "index");
  check_device(src, index, "scatter_dim");
  HZ_CHECK(index.dtype() == DType::I64, DTypeError, "scatter_dim: index must be i64");
  HZ_CHECK(dim >= 0 && dim < static_cast<int64_t>(out_shape.size()), ShapeError, "scatter_dim: dim ", dim,
           " out of range for ", shape_str(out_shape));
  HZ_CHECK(src.numel() == index.numel() && src.numel() * out_shape[dim] == shape_numel(out_shape), ShapeError,
           "scatter_dim: src ", shape_str(src.shape()), " and index ", shape_str(index.shape()),
           " must hold one element per slice of ", shape_str(out_shape), " along dim ", dim);
  return HZ_BACKEND(src.device(), scatter_dim)(src, index, dim, out_shape);
}

Tensor rotary(const Tensor& x, const Tensor& positions, const RotaryParams& p) {
  check_defined(x, "rotary", "x");
  check_floating(x, "rotary");
  HZ_CHECK(x.dim() == 4, ShapeError, "rotary: x must be (B, H, T, D), got ", shape_str(x.shape()));
  const int64_t T = x.size(2), D = x.size(3);
  HZ_CHECK(D % 2 == 0, ShapeError, "rotary: head dim ", D, " must be even");
  HZ_CHECK(static_cast<int64_t>(p.inv_freq.size()) * 2 == D, ShapeError, "rotary: table for head_dim ",
           p.inv_freq.size() * 2, " used on head_dim ", D);
  HZ_CHECK(positions.defined() && ((positions.dim() == 1 && positions.size(0) == T) ||
                                   (positions.dim() == 2 && positions.size(0) == x.size(0) && positions.size(1) == T)),
           ShapeError, "rotary: positions must be (T) = (", T, ") or (B, T) = (", x.size(0), ", ", T, "), got ",
           positions.defined() ? shape_str(positions.shape()) : std::string("undefined"));
  HZ_CHECK(is_integer(positions.dtype()) || positions.dtype() == DType::F64, DTypeError,
           "rotary: positions must be i32/i64, or f64 for positions between integers");
  check_device(x, positions, "rotary");
  return HZ_BACKEND(x.device(), rotary)(x, positions, p);
}

namespace {
void check_rotate_angles(const Tensor& x, const Tensor& angles, const char* op) {
  check_defined(x, op, "x");
  check_defined(angles, op, "angles");
  check_floating(x, op);
  HZ_CHECK(x.dim() == 4 && x.size(3) % 2 == 0, ShapeError, op, ": x must be (B, H, T, D) with D even, got ",
           shape_str(x.shape()));
  HZ_CHECK(angles.dtype() == DType::F32 || angles.dtype() == DType::F64, DTypeError, op,
           ": angles must be f32 or f64, got ", dtype_name(angles.dtype()));
  HZ_CHECK(angles.dim() == 4 && (angles.size(0) == x.size(0) || angles.size(0) == 1) && angles.size(1) > 0 &&
               x.size(1) % angles.size(1) == 0 && angles.size(2) == x.size(2) && angles.size(3) * 2 == x.size(3),
           ShapeError, op, ": angles must be (B or 1, G, T, D/2) with G dividing the heads for x ",
           shape_str(x.shape()), ", got ", shape_str(angles.shape()));
  check_device(x, angles, op);
}
}  // namespace

Tensor rotate_angles(const Tensor& x, const Tensor& angles, double mscale, bool inverse) {
  check_rotate_angles(x, angles, "rotate_angles");
  return HZ_BACKEND(x.device(), rotate_angles)(x, angles, mscale, inverse);
}

Tensor rotate_angles_grad(const Tensor& y, const Tensor& gy, const Tensor& angles, bool inverse) {
  check_rotate_angles(y, angles, "rotate_angles_grad");
  check_defined(gy, "rotate_angles_grad", "gy");
  HZ_CHECK(gy.shape() == y.shape() && gy.dtype() == y.dtype(), ShapeError, "rotate_angles_grad: gy ",
           shape_str(gy.shape()), " must match y ", shape_str(y.shape()));
  check_device(y, gy, "rotate_angles_grad");
  return HZ_BACKEND(y.device(), rotate_angles_grad)(y, gy, angles, inverse);
}

void random_fill_(Tensor& t, const RandomFill& r) {
  check_defined(t, "random_fill_", "t");
  check_floating(t, "random_fill_");
  HZ_CHECK(r.kind != RandomKind::Uniform || r.a < r.b, ValueError, "uniform: low (", r.a,
           ") must be below high (", r.b, ")");
  if (t.is_contiguous()) {
    HZ_BACKEND(t.device(), random_fill)(t, r);
    return;
  }
  Tensor c = Tensor::empty(t.shape(), t.dtype(), t.device());
  HZ_BACKEND(t.device(), random_fill)(c, r);
  t.copy_(c);
}

// One AdamW parameter's checks (adamw_update_ and every slot of adamw_multi_update_); returns g in
// p's dtype, contiguous.
static Tensor checked_adamw(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const char* who) {
  check_defined(p, who, "p");
  HZ_CHECK(p.dtype() == DType::F32 || p.dtype() == DType::F64, DTypeError, "adamw: parameters must be f32/f64, got ",
           dtype_name(p.dtype()), " (keep bf16 master weights in f32)");
  HZ_CHECK(p.is_contiguous() && m.is_contiguous() && v.is_contiguous(), ValueError,
           who, ": parameter and state must be contiguous");
  HZ_CHECK(g.shape() == p.shape() && m.shape() == p.shape() && v.shape() == p.shape(), ShapeError,
           who, ": shapes differ: p ", shape_str(p.shape()), ", g ", shape_str(g.shape()), ", m ",
           shape_str(m.shape()), ", v ", shape_str(v.shape()));
  HZ_CHECK(m.dtype() == p.dtype() && v.dtype() == p.dtype(), DTypeError, who, ": state dtype must be the parameter's");
  check_device(p, g, who);
  check_device(p, m, who);
  check_device(p, v, who);
  return (g.dtype() == p.dtype() ? g : g.to(p.dtype())).contiguous();
}

void adamw_update_(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const math::AdamWCoef& c) {
  const Tensor gp = checked_adamw(p, g, m, v, "adamw_update_");
  HZ_BACKEND(p.device(), adamw_update)(p, gp, m, v, c);
}

void adamw_multi_update_(std::vector<AdamWSlot>& slots, const math::AdamWCoef& c) {
  // slots grouped by (device, dtype) in list order: one backend call per group
  std::vector<std::vector<AdamWSlot>> groups;
  for (AdamWSlot& s : slots) {
    AdamWSlot e = s;
    e.g = checked_adamw(s.p, s.g, s.m, s.v, "adamw_multi_update_");
    auto it = std::find_if(groups.begin(), groups.end(), [&](const std::vector<AdamWSlot>& gr) {
      return gr.front().p.device() == e.p.device() && gr.front().p.dtype() == e.p.dtype();
    });
    if (it == groups.end()) groups.push_back({e});
    else it->push_back(e);
  }
  for (auto& gr : groups) HZ_BACKEND(gr.front().p.device(), adamw_multi_update)(gr, c);
}

void momentum_update_(const Tensor& g, Tensor& buf, Tensor& out, double mu, bool nesterov, double gscale) {
  check_defined(buf, "momentum_update_", "buf");
  HZ_CHECK(buf.dtype() == DType::F32 || buf.dtype() == DType::F64, DTypeError, "momentum: buffers must be f32/f64");
  HZ_CHECK(buf.is_contiguous() && out.is_contiguous(), ValueError, "momentum_update_: buffers must be contiguous");
  HZ_CHECK(g.shape() == buf.shape() && out.shape() == buf.shape() && out.dtype() == buf.dtype(), ShapeError,
           "momentum_update_: gradient ", shape_str(g.shape()), " and buffers ", shape_str(buf.shape()), " / ",
           shape_str(out.shape()), " differ");
  check_device(buf, g, "momentum_update_");
  check_device(buf, out, "momentum_update_");
  const Tensor gb = (g.dtype() == buf.dtype() ? g : g.to(buf.dtype())).contiguous();
  HZ_BACKEND(buf.device(), momentum_update)(gb, buf, out, mu, nesterov, gscale);
}

void axpby_(Tensor& x, const Tensor& y, double alpha, double beta) {
  check_defined(x, "axpby_", "x");
  check_floating(x, "axpby_");
  if (y.defined()) {
    check_device(x, y, "axpby_");
    HZ_CHECK(broadcast_shapes(y.shape(), x.shape()) == x.shape(), ShapeError, "axpby_: ", shape_str(y.shape()),
             " does not broadcast to ", shape_str(x.shape()));
  }
  HZ_BACKEND(x.device(), axpby)(x, y, alpha, beta);
}

double sum_squares(const std::vector<Tensor>& xs) {
  if (xs.empty()) return 0.0;
  const Device d = xs.front().device();
  for (const Tensor& x : xs) {
    check_defined(x, "sum_squares", "x");
    check_floating(x, "sum_squares");
    HZ_CHECK(x.device() == d, DeviceError, "sum_squares: tensors on ", d.str(), " and ", x.device().str());
  }
  return HZ_BACKEND(d, sum_squares)(xs);
}

}  // namespace ops
}  // namespace hz
