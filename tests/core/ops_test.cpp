// Horizon core tests: every op in core/ops.h against a naive double-precision reference.
//
// One parameterised test per op family. Each case names its shapes, dtype and memory layout
// (C contiguous, T transposed storage, S step-2 slice, P padded rows); the logical input values
// are the same whatever the layout, so the reference never looks at strides.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "tests/core/test_util.h"

namespace {

using hz::BinaryOp;
using hz::DType;
using hz::ReduceOp;
using hz::Shape;
using hz::Tensor;
using hz::UnaryOp;
using hzt::all_close;
using hzt::all_equal;
using hzt::Layout;
using hzt::make_tensor;
using hzt::numel_of;
using hzt::rand_values;
using hzt::shape_tag;
using hzt::Tol;
using hzt::tol_for;

const char* dt_tag(DType d) { return hz::dtype_name(d); }
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kSqrt2 = 1.4142135623730950488;
constexpr double kPi = 3.14159265358979323846;

// gtest test-name generator: "<index>_<tag>"
struct CaseName {
  template <class P>
  std::string operator()(const ::testing::TestParamInfo<P>& info) const {
    std::string s = std::to_string(info.index) + "_" + info.param.tag() + hzt::device_tag(info.param.dev);
    for (char& ch : s)
      if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    return s;
  }
};

// =================================================================================================
// Unary ops and their backward
// =================================================================================================
double ref_unary(UnaryOp op, double x) {
  switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Exp: return std::exp(x);
    case UnaryOp::Log: return std::log(x);
    case UnaryOp::Sqrt: return std::sqrt(x);
    case UnaryOp::Rsqrt: return 1.0 / std::sqrt(x);
    case UnaryOp::Abs: return std::fabs(x);
    case UnaryOp::Square: return x * x;
    case UnaryOp::Tanh: return std::tanh(x);
    case UnaryOp::Sigmoid: return 1.0 / (1.0 + std::exp(-x));
    case UnaryOp::Relu: return x > 0 ? x : 0.0;
    case UnaryOp::Relu2: return x > 0 ? x * x : 0.0;
    case UnaryOp::Silu: return x / (1.0 + std::exp(-x));
    case UnaryOp::Gelu: return 0.5 * x * std::erfc(-x / kSqrt2);  // exact (erf) GELU
    case UnaryOp::LogSigmoid: return -std::log1p(std::exp(-x));
    default: ADD_FAILURE() << "unknown op"; return 0;
  }
}
// f'(x), written from the textbook derivatives.
double ref_unary_deriv(UnaryOp op, double x) {
  switch (op) {
    case UnaryOp::Neg: return -1.0;
    case UnaryOp::Exp: return std::exp(x);
    case UnaryOp::Log: return 1.0 / x;
    case UnaryOp::Sqrt: return 0.5 / std::sqrt(x);
    case UnaryOp::Rsqrt: return -0.5 * std::pow(x, -1.5);
    case UnaryOp::Abs: return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0);
    case UnaryOp::Square: return 2.0 * x;
    case UnaryOp::Tanh: { const double c = std::cosh(x); return 1.0 / (c * c); }
    case UnaryOp::Sigmoid: { const double e = std::exp(-x); return e / ((1 + e) * (1 + e)); }
    case UnaryOp::Relu: return x > 0 ? 1.0 : 0.0;
    case UnaryOp::Relu2: return x > 0 ? 2.0 * x : 0.0;
    case UnaryOp::Silu: {
      const double e = std::exp(-x);
      return 1.0 / (1 + e) + x * e / ((1 + e) * (1 + e));
    }
    case UnaryOp::Gelu: return 0.5 * std::erfc(-x / kSqrt2) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * kPi);
    case UnaryOp::LogSigmoid: return 1.0 / (1.0 + std::exp(x));
    default: ADD_FAILURE() << "unknown op"; return 0;
  }
}
bool positive_domain(UnaryOp op) {
  return op == UnaryOp::Log || op == UnaryOp::Sqrt || op == UnaryOp::Rsqrt;
}

struct UnaryCase {
  UnaryOp op;
  Shape shape;
  DType dtype;
  Layout layout;
  hz::Device dev = hz::Device::cpu();
  std::string tag() const {
    return std::string(hz::unary_op_name(op)) + "_" + shape_tag(shape) + "_" + dt_tag(dtype) + "_" +
           hzt::layout_name(layout);
  }
};
void PrintTo(const UnaryCase& c, std::ostream* os) { *os << c.tag(); }

std::vector<UnaryCase> unary_cases() {
  struct SL {
    Shape s;
    DType d;
    Layout l;
  };
  const SL shapes[] = {{{17}, DType::F32, Layout::Contig},        {{3, 65}, DType::F64, Layout::Transposed},
                       {{4, 17, 3}, DType::F32, Layout::Sliced},  {{130, 65}, DType::F64, Layout::Padded},
                       {{300, 257}, DType::F32, Layout::Contig},  {{257, 130}, DType::F32, Layout::Transposed},
                       {{}, DType::F64, Layout::Contig},          {{1}, DType::F32, Layout::Contig},
                       {{0, 5}, DType::F32, Layout::Contig},      {{3, 65}, DType::BF16, Layout::Transposed},
                       {{300, 257}, DType::BF16, Layout::Contig}};
  std::vector<UnaryCase> v;
  for (int o = 0; o < static_cast<int>(UnaryOp::Count); ++o)
    for (const SL& s : shapes) v.push_back({static_cast<UnaryOp>(o), s.s, s.d, s.l});
  return v;
}

// Inputs: (-3, 3) with a few exact zeros, or (0.1, 4) for log/sqrt/rsqrt.
std::vector<double> unary_inputs(const UnaryCase& c, uint64_t seed) {
  const int64_t n = numel_of(c.shape);
  if (positive_domain(c.op)) return rand_values(n, seed, 0.1, 4.0, c.dtype);
  std::vector<double> v = rand_values(n, seed, -3.0, 3.0, c.dtype);
  for (int64_t i = 0; i < n; i += 7) v[i] = 0.0;
  return v;
}

class UnaryTest : public ::testing::TestWithParam<UnaryCase> {};
TEST_P(UnaryTest, MatchesReference) {
  const UnaryCase& c = GetParam();
  HZT_ON_DEVICE(c.dev);
  const std::vector<double> x = unary_inputs(c, 11);
  Tensor xt = make_tensor(x, c.shape, c.dtype, c.layout);
  Tensor y = hz::ops::unary(c.op, xt);
  EXPECT_EQ(y.shape(), c.shape);
  EXPECT_EQ(y.dtype(), c.dtype);
  std::vector<double> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = ref_unary(c.op, x[i]);
  EXPECT_TRUE(all_close(y, want, tol_for(c.dtype)));
  // the input is untouched
  EXPECT_TRUE(all_equal(xt, x));
}
INSTANTIATE_TEST_SUITE_P(Ops, UnaryTest, ::testing::ValuesIn(hzt::on_devices(unary_cases())), CaseName());

class UnaryBackwardTest : public ::testing::TestWithParam<UnaryCase> {};
TEST_P(UnaryBackwardTest, MatchesReference) {
  const UnaryCase& c = GetParam();
  HZT_ON_DEVICE(c.dev);
  const std::vector<double> x = unary_inputs(c, 12);
  const std::vector<double> g = rand_values(numel_of(c.shape), 13, -2.0, 2.0, c.dtype);
  // gout laid out differently from x when possible
  const Layout gl = c.layout == Layout::Contig ? Layout::Sliced : Layout::Contig;
  Tensor gx = hz::ops::unary_backward(c.op, make_tensor(x, c.shape, c.dtype, c.layout),
                                      make_tensor(g, c.shape, c.dtype, gl));
  EXPECT_EQ(gx.shape(), c.shape);
  std::vector<double> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = g[i] * ref_unary_deriv(c.op, x[i]);
  EXPECT_TRUE(all_close(gx, want, tol_for(c.dtype)));
}
INSTANTIATE_TEST_SUITE_P(Ops, UnaryBackwardTest, ::testing::ValuesIn(hzt::on_devices(unary_cases())), CaseName());

TEST(UnaryErrors, ShapeAndDType) {
  Tensor x = Tensor::ones({2, 3});
  EXPECT_THROW(hz::ops::unary_backward(UnaryOp::Exp, x, Tensor::ones({3, 2})), hz::ShapeError);
  EXPECT_THROW(hz::ops::unary_backward(UnaryOp::Exp, x, Tensor::ones({2, 3}, DType::F64)), hz::DTypeError);
  EXPECT_THROW(hz::ops::unary(UnaryOp::Exp, Tensor::ones({2}, DType::I32)), hz::DTypeError);
  EXPECT_THROW(hz::ops::unary(UnaryOp::Exp, Tensor::ones({2}, DType::I64)), hz::DTypeError);
}

// =================================================================================================
// Binary ops with broadcasting
// =================================================================================================
double ref_binop(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
    case BinaryOp::Maximum: return std::max(a, b);
    case BinaryOp::Minimum: return std::min(a, b);
    default: ADD_FAILURE() << "unknown op"; return 0;
  }
}

struct BinaryCase {
  BinaryOp op;
  Shape sa, sb;
  DType dtype;
  Layout la, lb;
  hz::Device dev = hz::Device::cpu();
  std::string tag() const {
    return std::string(hz::binary_op_name(op)) + "_" + shape_tag(sa) + "_by_" + shape_tag(sb) + "_" +
           dt_tag(dtype) + "_" + hzt::layout_name(la) + hzt::layout_name(lb);
  }
};
void PrintTo(const BinaryCase& c, std::ostream* os) { *os << c.tag(); }

std::vector<BinaryCase> binary_cases() {
  const std::pair<Shape, Shape> shapes[] = {
      {{3, 1, 5}, {4, 5}}, {{1}, {7, 3}},       {{2, 3, 4}, {2, 3, 4}}, {{17}, {65, 17}},
      {{65, 1}, {1, 130}}, {{300, 257}, {257}}, {{}, {3, 4}},           {{1}, {1}},
      {{2, 1, 17}, {3, 1}}, {{4, 5}, {3, 1, 5}}};
  struct Cfg {
    DType d;
    Layout la, lb;
  };
  const Cfg cfgs[] = {{DType::F32, Layout::Contig, Layout::Contig},
                      {DType::F64, Layout::Transposed, Layout::Sliced},
                      {DType::F32, Layout::Sliced, Layout::Transposed},
                      {DType::F64, Layout::Padded, Layout::Contig},
                      {DType::BF16, Layout::Sliced, Layout::Contig}};
  std::vector<BinaryCase> v;
  for (int o = 0; o < static_cast<int>(BinaryOp::Count); ++o)
    for (const auto& s : shapes)
      for (const Cfg& c : cfgs) v.push_back({static_cast<BinaryOp>(o), s.first, s.second, c.d, c.la, c.lb});
  return v;
}

class BinaryTest : public ::testing::TestWithParam<BinaryCase> {};
TEST_P(BinaryTest, MatchesReference) {
  const BinaryCase& c = GetParam();
  HZT_ON_DEVICE(c.dev);
  const std::vector<double> a = rand_values(numel_of(c.sa), 21, -3.0, 3.0, c.dtype);
  // divisors kept away from zero
  std::vector<double> b = c.op == BinaryOp::Div ? rand_values(numel_of(c.sb), 22, 0.25, 3.0, c.dtype)
                                                : rand_values(numel_of(c.sb), 22, -3.0, 3.0, c.dtype);
  if (c.op == BinaryOp::Div)
    for (size_t i = 0; i < b.size(); i += 2) b[i] = -b[i];
  Shape os;
  const std::vector<double> want = hzt::ref_binary(
      a, c.sa, b, c.sb, [&](double x, double y) { return ref_binop(c.op, x, y); }, &os);
  Tensor ta = make_tensor(a, c.sa, c.dtype, c.la), tb = make_tensor(b, c.sb, c.dtype, c.lb);
  Tensor out = hz::ops::binary(c.op, ta, tb);
  EXPECT_EQ(out.shape(), os);
  EXPECT_EQ(out.dtype(), c.dtype);
  EXPECT_TRUE(out.is_contiguous());
  EXPECT_TRUE(all_close(out, want, tol_for(c.dtype)));
  // the named wrappers agree with binary()
  if (c.op == BinaryOp::Add) {
    EXPECT_TRUE(all_equal(hz::ops::add(ta, tb), out.to_vector()));
  }
  if (c.op == BinaryOp::Sub) {
    EXPECT_TRUE(all_equal(hz::ops::sub(ta, tb), out.to_vector()));
  }
  if (c.op == BinaryOp::Mul) {
    EXPECT_TRUE(all_equal(hz::ops::mul(ta, tb), out.to_vector()));
  }
  if (c.op == BinaryOp::Div) {
    EXPECT_TRUE(all_equal(hz::ops::div(ta, tb), out.to_vector()));
  }
}
INSTANTIATE_TEST_SUITE_P(Ops, BinaryTest, ::testing::ValuesIn(hzt::on_devices(binary_cases())), CaseName());

TEST(BinaryErrors, Mismatches) {
  EXPECT_THROW(hz::ops::add(Tensor::ones({2}), Tensor::ones({2}, DType::F64)), hz::DTypeError);
  EXPECT_THROW(hz::ops::mul(Tensor::ones({2, 3}), Tensor::ones({3, 2})), hz::ShapeError);
  EXPECT_THROW(hz::ops::add(Tensor::ones({2}, DType::I64), Tensor::ones({2}, DType::I64)), hz::DTypeError);
  EXPECT_THROW(hz::ops::add(Tensor(), Tensor::ones({2})), hz::ValueError);
}

// =================================================================================================
// Scalar ops: add_scalar, mul_scalar, pow_scalar
// =================================================================================================
enum class ScalarKind { Add, Mul, Pow };
struct ScalarCase {
  ScalarKind kind;
  double s;
  Shape shape;
  DType dtype;
  Layout layout;
  hz::Device dev = hz::Device::cpu();
  std::string tag() const {
    std::string k = kind == ScalarKind::Add ? "add" : kind == ScalarKind::Mul ? "mul" : "pow";
    std::string sv = std::to_string(s);
    for (char& ch : sv)
      if (ch == '.' ) ch = 'p';
      else if (ch == '-') ch = 'm';
    return k + "_" + sv + "_" + shape_tag(shape) + "_" + dt_tag(dtype) + "_" + hzt::layout_name(layout);
  }
};
void PrintTo(const ScalarCase& c, std::ostream* os) { *os << c.tag(); }

std::vector<ScalarCase> scalar_cases() {
  const std::pair<ScalarKind, double> ks[] = {
      {ScalarKind::Add, 2.5}, {ScalarKind::Add, -1.0}, {ScalarKind::Mul, -3.0}, {ScalarKind::Mul, 0.5},
      {ScalarKind::Mul, 0.0}, {ScalarKind::Pow, 2.0},  {ScalarKind::Pow, 0.5},  {ScalarKind::Pow, 3.0},
      {ScalarKind::Pow, 1.0}, {ScalarKind::Pow, -1.5}, {ScalarKind::Pow, 0.0}};
  struct SL {
    Shape s;
    DType d;
    Layout l;
  };
  const SL shapes[] = {{{17}, DType::F32, Layout::Contig},
                       {{3, 65}, DType::F64, Layout::Transposed},
                       {{300, 257}, DType::F32, Layout::Sliced},
                       {{5, 130}, DType::F64, Layout::Padded},
                       {{3, 65}, DType::BF16, Layout::Transposed}};
  std::vector<ScalarCase> v;
  for (const auto& k : ks)
    for (const SL& s : shapes) v.push_back({k.first, k.second, s.s, s.d, s.l});
  return v;
}

class ScalarOpTest : public ::testing::TestWithParam<ScalarCase> {};
TEST_P(ScalarOpTest, MatchesReference) {
  const ScalarCase& c = GetParam();
  HZT_ON_DEVICE(c.dev);
  const bool integral_pow = c.kind != ScalarKind::Pow || c.s == std::floor(c.s);
  // non-integer powers need positive bases; integer ones see negative bases too
  const std::vector<double> x = integral_pow ? rand_values(numel_of(c.shape), 31, -3.0, 3.0, c.dtype)
                                             : rand_values(numel_of(c.shape), 31, 0.1, 3.0, c.dtype);
  Tensor xt = make_tensor(x, c.shape, c.dtype, c.layout);
  Tensor y = c.kind == ScalarKind::Add   ? hz::ops::add_scalar(xt, c.s)
             : c.kind == ScalarKind::Mul ? hz::ops::mul_scalar(xt, c.s)
                                         : hz::ops::pow_scalar(xt, c.s);
  EXPECT_EQ(y.shape(), c.shape);
  std::vector<double> want(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    want[i] = c.kind == ScalarKind::Add ? x[i] + c.s : c.kind == ScalarKind::Mul ? x[i] * c.s : std::pow(x[i], c.s);
  EXPECT_TRUE(all_close(y, want, tol_for(c.dtype)));
}
INSTANTIATE_TEST_SUITE_P(Ops, ScalarOpTest, ::testing::ValuesIn(hzt::on_devices(scalar_cases())), CaseName());

// =================================================================================================
// add_ (in place, broadcast source)
// =================================================================================================
struct AddInplaceCase {
  Shape dst, src;
  double alpha;
  DType dtype;
  Layout ld, ls;
  hz::Device dev = hz::Device::cpu();
  std::string tag() const {
    return shape_tag(dst) + "_plus_" + shape_tag(src) + "_a" + std::to_string(static_cast<int>(alpha * 100)) +
           "_" + dt_tag(dtype) + "_" + hzt::layout_name(ld) + hzt::layout_name(ls);
  }
};
void PrintTo(const AddInplaceCase& c, std::ostream* os) { *os << c.tag(); }

class AddInplaceTest : public ::testing::TestWithParam<AddInplaceCase> {};
TEST_P(AddInplaceTest, MatchesReference) {
  const AddInplaceCase& c = GetParam();
  HZT_ON_DEVICE(c.dev);
  const std::vector<double> d = rand_values(numel_of(c.dst), 41, -2.0, 2.0, c.dtype);
  const std::vector<double> s = rand_values(numel_of(c.src), 42, -2.0, 2.0, c.dtype);
  Tensor base;
  Tensor dt = make_tensor(d, c.dst, c.dtype, c.ld, &base);
  const std::vector<double> base_before = base.to_vector();
  const void* storage_before = dt.storage().get();
  hz::ops::add_(dt, make_tensor(s, c.src, c.dtype, c.ls), c.alpha);
  EXPECT_EQ(dt.storage().get(), storage_before);  // in place
  EXPECT_EQ(dt.shape(), c.dst);
  const std::vector<double> want = hzt::ref_binary(
      d, c.dst, s, c.src, [&](double x, double y) { return x + c.alpha * y; }, nullptr);
  EXPECT_TRUE(all_close(dt, want, tol_for(c.dtype)));
  // storage outside the view (gaps of sliced/padded layouts) is untouched
  const std::vector<double> base_after = base.to_vector();
  int64_t sentinels_before = 0, sentinels_after = 0;
  for (size_t i = 0; i < base_before.size(); ++i) {
    sentinels_before += base_before[i] == hzt::kSentinel;
    sentinels_after += base_after[i] == hzt::kSentinel;
  }
  EXPECT_EQ(sentinels_after, sentinels_before);
}
INSTANTIATE_TEST_SUITE_P(
    Ops, AddInplaceTest,
    ::testing::ValuesIn(hzt::on_devices(std::vector<AddInplaceCase>{AddInplaceCase{{3, 4, 5}, {4, 5}, 1.0, DType::F32, Layout::Contig, Layout::Contig},
                      AddInplaceCase{{3, 4, 5}, {1}, -2.0, DType::F64, Layout::Sliced, Layout::Contig},
                      AddInplaceCase{{17, 65}, {17, 1}, 0.5, DType::F32, Layout::Transposed, Layout::Sliced},
                      AddInplaceCase{{300, 257}, {257}, 1.0, DType::F32, Layout::Padded, Layout::Sliced},
                      AddInplaceCase{{300, 257}, {300, 1}, -0.25, DType::F64, Layout::Transposed, Layout::Contig},
                      AddInplaceCase{{2, 3}, {2, 3}, 3.0, DType::F64, Layout::Sliced, Layout::Transposed},
                      AddInplaceCase{{7}, {}, 1.0, DType::F32, Layout::Contig, Layout::Contig},
                      AddInplaceCase{{2, 3, 17}, {3, 17}, 1.0, DType::F64, Layout::Transposed, Layout::Padded},
                      AddInplaceCase{{17, 65}, {17, 1}, 0.5, DType::BF16, Layout::Transposed, Layout::Sliced}})),
    CaseName());

TEST(AddInplaceErrors, SourceMustBroadcastToDestination) {
  Tensor d = Tensor::zeros({3, 1});
  EXPECT_THROW(hz::ops::add_(d, Tensor::ones({3, 4})), hz::ShapeError);
  EXPECT_THROW(hz::ops::add_(d, Tensor::ones({2, 1})), hz::ShapeError);
  EXPECT_THROW(hz::ops::add_(d, Tensor::ones({3, 1}, DType::F64)), hz::DTypeError);
  EXPECT_TRUE(all_equal(d, {0, 0, 0}));
}

// =================================================================================================
// sum_to_shape
// =================================================================================================
struct SumToShapeCase {
  Shape g, target;
  DType dtype;
  Layout layout;
  hz::Device dev = hz::Device::cpu();
  std::string tag() const {
    return shape_tag(g) + "_to_" + shape_tag(target) + "_" + dt_tag(dtype) + "_" + hzt::layout_name(layout);
  }
};
void PrintTo(const SumToShapeCase& c, std::ostream* os) { *os << c.tag(); }

class SumToShapeTest : public ::testing::TestWithParam<SumToShapeCase> {};
TEST_P(SumToShapeTest, MatchesReference) {
  const SumToShapeCase& c = GetParam();
  HZT_ON_DEVICE(c.dev);
  const std::vector<double> g = rand_values(numel_of(c.g), 51, -1.0, 1.0, c.dtype);
  Tensor r = hz::ops::sum_to_shape(make_tensor(g, c.g, c.dtype, c.layout), c.target);
  EXPECT_EQ(r.shape(), c.target);
  // every element of g adds into the target element it was broadcast from
  std::vector<double> want(numel_of(c.target), 0.0), mag(want.size(), 0.0);
  for (int64_t i = 0; i < static_cast<int64_t>(g.size()); ++i) {
    const int64_t j = hzt::broadcast_source(hzt::unravel(i, c.g), c.target);
    want[j] += g[i];
    mag[j] += std::fabs(g[i]);
  }
  EXPECT_TRUE(all_close(r, want, tol_for(c.dtype).rtol, tol_for(c.dtype).atol, &mag));
}
INSTANTIATE_TEST_SUITE_P(
    Ops, SumToShapeTest,
    ::testing::ValuesIn(hzt::on_devices(std::vector<SumToShapeCase>{SumToShapeCase{{3, 4, 5}, {4, 5}, DType::F32, Layout::Contig},
                      SumToShapeCase{{3, 4, 5}, {1, 5}, DType::F64, Layout::Transposed},
                      SumToShapeCase{{3, 4, 5}, {3, 1, 5}, DType::F32, Layout::Sliced},
                      SumToShapeCase{{3, 4, 5}, {1, 1, 1}, DType::F64, Layout::Contig},
                      SumToShapeCase{{3, 4, 5}, {}, DType::F32, Layout::Padded},
                      SumToShapeCase{{3, 4, 5}, {3, 4, 5}, DType::F64, Layout::Sliced},
                      SumToShapeCase{{17, 65}, {17, 1}, DType::F32, Layout::Transposed},
                      SumToShapeCase{{300, 257}, {257}, DType::F32, Layout::Contig},
                      SumToShapeCase{{300, 257}, {300, 1}, DType::F64, Layout::Sliced},
                      SumToShapeCase{{2, 3, 4, 5}, {3, 1, 1}, DType::F64, Layout::Transposed},
                      SumToShapeCase{{7, 1}, {1}, DType::F32, Layout::Contig}})),
    CaseName());

TEST(SumToShapeErrors, Incompatible) {
  EXPECT_THROW(hz::ops::sum_to_shape(Tensor::ones({3, 4}), {2, 3, 4}), hz::ShapeError);
  EXPECT_THROW(hz::ops::sum_to_shape(Tensor::ones({3, 4}), {3, 2}), hz::ShapeError);
  Tensor g = Tensor::ones({3, 4});
  EXPECT_EQ(hz::ops::sum_to_shape(g, {3, 4}).storage().get(), g.storage().get());  // identity
}

// =================================================================================================
// Reductions over one dim: sum / mean / max (+ argmax, first occurrence)
// =================================================================================================
struct ReduceCase {
  ReduceOp op;
  Shape shape;
  int64_t dim;  // as passed (may be negative)
  bool keepdim;
  DType dtype;
  Layout layout;
  hz::Device dev = hz::Device::cpu();
  std::string tag() const {
    return std::string(hz::reduce_op_name(op)) + "_" + shape_tag(shape) + "_d" +
           (dim < 0 ? "m" + std::to_string(-dim) : std::to_string(dim)) + (keepdim ? "_keep" : "") + "_" +
           dt_tag(dtype) + "_" + hzt::layout_name(layout);
  }
};
void PrintTo(const ReduceCase& c, std::ostream* os) { *os << c.tag(); }

std::vector<ReduceCase> reduce_cases() {
  const Shape shapes[] = {{17}, {3, 65}, {4, 17, 3}, {2, 3, 4, 5}, {300, 257}, {1, 130}, {130, 1}};
  const Layout layouts[] = {Layout::Contig, Layout::Transposed, Layout::Sliced, Layout::Padded};
  std::vector<ReduceCase> v;
  int k = 0;
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max})
    for (const Shape& s : shapes)
      for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d)
        for (bool keep : {false, true}) {
          // alternate dtype / layout; pass the dim negatively every third case
          const int64_t dim = k % 3 == 2 ? d - static_cast<int64_t>(s.size()) : d;
          const DType dt = k % 5 == 4 ? DType::BF16 : k % 2 ? DType::F64 : DType::F32;
          v.push_back({op, s, dim, keep, dt, layouts[k % 4]});
          ++k;
        }
  return v;
}

class ReduceTest : public ::testing::TestWithParam<ReduceCase> {};
TEST_P(ReduceTest, MatchesReference) {
  const ReduceCase& c = GetParam();
  HZT_ON_DEVICE(c.dev);
  const int64_t nd = static_cast<int64_t>(c.shape.size());
  const int64_t dim = c.dim < 0 ? c.dim + nd : c.dim;
  // max: small integers so ties are frequent (argmax must be the first occurrence)
  const std::vector<double> x = c.op == ReduceOp::Max ? hzt::rand_ints(numel_of(c.shape), 61, -3, 3)
                                                      : rand_values(numel_of(c.shape), 61, -1.0, 1.0, c.dtype);
  Tensor xt = make_tensor(x, c.shape, c.dtype, c.layout);
  const hzt::Around g = hzt::around_dim(c.shape, dim);
  const Shape rs = hzt::reduced_shape(c.shape, dim, c.keepdim);
  std::vector<double> want(g.outer * g.inner), mag(want.size()), arg(want.size());
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t i = 0; i < g.inner; ++i) {
      double acc = 0, m = 0, best = -kInf;
      int64_t bi = -1;
      for (int64_t k = 0; k < g.n; ++k) {
        const double v = x[(o * g.n + k) * g.inner + i];
        acc += v;
        m += std::fabs(v);
        if (v > best) { best = v; bi = k; }
      }
      const int64_t j = o * g.inner + i;
      want[j] = c.op == ReduceOp::Sum ? acc : c.op == ReduceOp::Mean ? acc / g.n : best;
      mag[j] = c.op == ReduceOp::Mean ? m / g.n : m;
      arg[j] = static_cast<double>(bi);
    }
  const Tol t = tol_for(c.dtype);
  if (c.op == ReduceOp::Max) {
    hz::MaxResult r = hz::ops::max(xt, c.dim, c.keepdim);
    EXPECT_EQ(r.values.shape(), rs);
    EXPECT_EQ(r.indices.shape(), rs);
    EXPECT_EQ(r.values.dtype(), c.dtype);
    EXPECT_EQ(r.indices.dtype(), DType::I64);
    EXPECT_TRUE(all_equal(r.values, want));
    EXPECT_TRUE(all_equal(r.indices, arg));
  } else {
    Tensor r = c.op == ReduceOp::Sum ? hz::ops::sum(xt, c.dim, c.keepdim) : hz::ops::mean(xt, c.dim, c.keepdim);
    EXPECT_EQ(r.shape(), rs);
    EXPECT_EQ(r.dtype(), c.dtype);
    EXPECT_TRUE(all_close(r, want, t.rtol, t.atol, &mag));
  }
}
INSTANTIATE_TEST_SUITE_P(Ops, ReduceTest, ::testing::ValuesIn(hzt::on_devices(reduce_cases())), CaseName());

struct ReduceAllCase {
  ReduceOp op;
  Shape shape;
  DType dtype;
  Layout layout;
  hz::Device dev = hz::Device::cpu();
  std::string tag() const {
    return std::string(hz::reduce_op_name(op)) + "_all_" + shape_tag(shape) + "_" + dt_tag(dtype) + "_" +
           hzt::layout_name(layout);
  }
};
void PrintTo(const ReduceAllCase& c, std::ostream* os) { *os << c.tag(); }

std::vector<ReduceAllCase> reduce_all_cases() {
  struct SL {
    Shape s;
    DType d;
    Layout l;
  };
  const SL shapes[] = {{{1}, DType::F32, Layout::Contig},        {{17}, DType::F64, Layout::Sliced},
                       {{3, 65}, DType::F32, Layout::Transposed}, {{300, 257}, DType::F32, Layout::Contig},
                       {{300, 257}, DType::F64, Layout::Padded},  {{5000, 17}, DType::F32, Layout::Transposed},
                       {{}, DType::F64, Layout::Contig},          {{2, 3, 4, 5}, DType::F64, Layout::Sliced},
                       {{300, 257}, DType::BF16, Layout::Sliced}};
  std::vector<ReduceAllCase> v;
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max})
    for (const SL& s : shapes) v.push_back({op, s.s, s.d, s.l});
  return v;
}

class ReduceAllTest : public ::testing::TestWithParam<ReduceAllCase> {};
TEST_P(ReduceAllTest, MatchesReference) {
  const ReduceAllCase& c = GetParam();
  HZT_ON_DEVICE(c.dev);
  // offset so the sum does not cancel to ~0
  const std::vector<double> x = rand_values(numel_of(c.shape), 71, -0.5, 1.0, c.dtype);
  Tensor xt = make_tensor(x, c.shape, c.dtype, c.layout);
  double acc = 0, m = 0, best = -kInf;
  for (double v : x) {
    acc += v;
    m += std::fabs(v);
    best = std::max(best, v);
  }
  const double n = static_cast<double>(x.size());
  Tensor r = c.op == ReduceOp::Sum ? hz::ops::sum_all(xt) : c.op == ReduceOp::Mean ? hz::ops::mean_all(xt)
                                                                                    : hz::ops::max_all(xt);
  EXPECT_EQ(r.dim(), 0);
  EXPECT_EQ(r.dtype(), c.dtype);
  const std::vector<double> want{c.op == ReduceOp::Sum ? acc : c.op == ReduceOp::Mean ? acc / n : best};
  const std::vector<double> mag{c.op == ReduceOp::Mean ? m / n : m};
  const Tol t = tol_for(c.dtype);
  if (c.op == ReduceOp::Max) {
    EXPECT_TRUE(all_equal(r, want));
  } else {
    EXPECT_TRUE(all_close(r, want, t.rtol, t.atol, &mag));
  }
}
INSTANTIATE_TEST_SUITE_P(Ops, ReduceAllTest, ::testing::ValuesIn(hzt::on_devices(reduce_all_cases())), CaseName());

// Prefix sums along a dim (FoX's c = cumsum(log f)), forward and reverse (cumsum's backward),
// every layout and dtype, on each device.
struct CumsumCase {
  Shape shape;
  int64_t dim;
  bool reverse;
  DType dtype;
  Layout layout;
  hz::Device dev = hz::Device::cpu();
  std::string tag() const {
    return "cumsum_" + shape_tag(shape) + "_d" + (dim < 0 ? "m" + std::to_string(-dim) : std::to_string(dim)) +
           (reverse ? "_rev" : "") + "_" + dt_tag(dtype) + "_" + hzt::layout_name(layout);
  }
};
void PrintTo(const CumsumCase& c, std::ostream* os) { *os << c.tag(); }

std::vector<CumsumCase> cumsum_cases() {
  const Shape shapes[] = {{17}, {3, 65}, {2, 4, 300}, {4, 17, 3}, {1, 1}};
  const Layout layouts[] = {Layout::Contig, Layout::Transposed, Layout::Sliced, Layout::Padded};
  std::vector<CumsumCase> v;
  int k = 0;
  for (const Shape& s : shapes)
    for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d)
      for (bool rev : {false, true}) {
        const int64_t dim = k % 3 == 2 ? d - static_cast<int64_t>(s.size()) : d;
        const DType dt = k % 5 == 4 ? DType::BF16 : k % 2 ? DType::F64 : DType::F32;
        v.push_back({s, dim, rev, dt, layouts[k % 4]});
        ++k;
      }
  return v;
}

class CumsumTest : public ::testing::TestWithParam<CumsumCase> {};
TEST_P(CumsumTest, MatchesReference) {
  const CumsumCase& c = GetParam();
  HZT_ON_DEVICE(c.dev);
  const int64_t nd = static_cast<int64_t>(c.shape.size());
  const int64_t dim = c.dim < 0 ? c.dim + nd : c.dim;
  const std::vector<double> x = rand_values(numel_of(c.shape), 83, -1.0, 0.2, c.dtype);
  Tensor xt = make_tensor(x, c.shape, c.dtype, c.layout);
  const hzt::Around g = hzt::around_dim(c.shape, dim);
  std::vector<double> want(x.size()), mag(x.size());
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t i = 0; i < g.inner; ++i) {
      double acc = 0, m = 0;
      for (int64_t s = 0; s < g.n; ++s) {
        const int64_t k = c.reverse ? g.n - 1 - s : s, at = (o * g.n + k) * g.inner + i;
        acc += x[at];
        m += std::fabs(x[at]);
        want[at] = acc;
        mag[at] = m;
      }
    }
  const Tensor r = hz::ops::cumsum(xt, c.dim, c.reverse);
  EXPECT_EQ(r.shape(), c.shape);
  EXPECT_EQ(r.dtype(), c.dtype);
  const Tol t = tol_for(c.dtype);
  EXPECT_TRUE(all_close(r, want, t.rtol, t.atol, &mag));
}
INSTANTIATE_TEST_SUITE_P(Ops, CumsumTest, ::testing::ValuesIn(hzt::on_devices(cumsum_cases())), CaseName());

TEST(ReduceErrors, EmptyAndDims) {
  EXPECT_THROW(hz::ops::max(Tensor::zeros({3, 0}), 1), hz::ShapeError);
  EXPECT_THROW(hz::ops::max_all(Tensor::zeros({0})), hz::ShapeError);
  EXPECT_THROW(hz::ops::sum(Tensor::zeros({3, 4}), -3), hz::ShapeError);
  EXPECT_THROW(hz::ops::mean(Tensor::zeros({3, 4}, DType::I32), 0), hz::DTypeError);
  // empty sums are zero
  EXPECT_TRUE(all_equal(hz::ops::sum(Tensor::zeros({3, 0}), 1), {0, 0, 0}));
  EXPECT_TRUE(all_equal(hz::ops::sum_all(Tensor::zeros({0, 2})), {0}));
}

// =================================================================================================
// matmul
// =================================================================================================
struct MatmulCase {
  Shape batch_a, batch_b;
  int64_t M, K, N;
  bool ta, tb;
  double alpha;
  DType dtype;
  Layout la, lb;
  Shape shape_a() const {  // as stored / passed: (..., M, K) or (..., K, M) with ta
    Shape s = batch_a;
    s.push_back(ta ? K : M);
    s.push_back(ta ? M : K);
    return s;
  }
  Shape shape_b() const {
    Shape s = batch_b;
    s.push_back(tb ? N : K);
    s.push_back(tb ? K : N);
    return s;
  }
  hz::Device dev = hz::Device::cpu();
  std::string tag() const {
    return shape_tag(shape_a()) + (ta ? "T" : "") + "_x_" + shape_tag(shape_b()) + (tb ? "T" : "") + "_al" +
           (alpha == 1.0 ? std::string("1") : alpha < 0 ? "m" : "x") + "_" + dt_tag(dtype) + "_" +
           hzt::layout_name(la) + hzt::layout_name(lb);
  }
};
void PrintTo(const MatmulCase& c, std::ostream* os) { *os << c.tag(); }

std::vector<MatmulCase> matmul_cases() {
  struct Dims {
    Shape ba, bb;
    int64_t M, K, N;
  };
  const Dims dims[] = {
      {{}, {}, 17, 33, 9},     // ragged 2-D
      {{}, {}, 1, 5, 7},       // M = 1
      {{}, {}, 6, 1, 4},       // K = 1
      {{}, {}, 5, 7, 1},       // N = 1
      {{}, {}, 1, 1, 1},       // all ones
      {{}, {}, 3, 0, 4},       // K = 0: zeros
      {{}, {}, 300, 257, 65},  // large: threaded BLAS
      {{4}, {4}, 3, 17, 5},    // batched 3-D
      {{2, 3}, {2, 3}, 5, 4, 6},  // batched 4-D
      {{2, 3}, {}, 5, 4, 6},   // 2-D b shared by a batched a
      {{65}, {}, 2, 17, 3},    // 2-D b shared by many batches
      {{}, {3}, 4, 5, 6},      // 2-D a shared by a batched b
      {{2, 1}, {1, 3}, 3, 4, 5},  // batch dims broadcast against each other
      {{2, 3}, {3}, 4, 5, 2},  // batch dims of different rank
      {{130}, {130}, 3, 4, 2},    // many small products (parallel over the batch)
  };
  struct Cfg {
    DType d;
    Layout la, lb;
    double alpha;
  };
  const Cfg cfgs[] = {{DType::F32, Layout::Contig, Layout::Contig, 1.0},
                      {DType::F64, Layout::Transposed, Layout::Sliced, -0.75},
                      {DType::F32, Layout::Sliced, Layout::Transposed, 2.5},
                      {DType::F64, Layout::Padded, Layout::Padded, 1.0},
                      {DType::BF16, Layout::Contig, Layout::Transposed, 1.0},
                      {DType::BF16, Layout::Sliced, Layout::Padded, -0.75}};
  std::vector<MatmulCase> v;
  for (const Dims& d : dims)
    for (int t = 0; t < 4; ++t)
      for (const Cfg& c : cfgs) v.push_back({d.ba, d.bb, d.M, d.K, d.N, (t & 1) != 0, (t & 2) != 0, c.alpha, c.d, c.la, c.lb});
  return v;
}

class MatmulTest : public ::testing::TestWithParam<MatmulCase> {};
TEST_P(MatmulTest, MatchesReference) {
  const MatmulCase& c = GetParam();
  HZT_ON_DEVICE(c.dev);
  const Shape sa = c.shape_a(), sb = c.shape_b();
  const std::vector<double> a = rand_values(numel_of(sa), 81, -1.0, 1.0, c.dtype);
  const std::vector<double> b = rand_values(numel_of(sb), 82, -1.0, 1.0, c.dtype);
  Shape os;
  std::vector<double> mag;
  const std::vector<double> want = hzt::ref_matmul(a, sa, b, sb, c.ta, c.tb, c.alpha, &os, &mag);
  const Tol t = tol_for(c.dtype);
  Tensor ta = make_tensor(a, sa, c.dtype, c.la), tb = make_tensor(b, sb, c.dtype, c.lb);
  Tensor out = hz::ops::matmul(ta, tb, c.ta, c.tb, c.alpha);
  EXPECT_EQ(out.shape(), os);
  EXPECT_EQ(out.dtype(), c.dtype);
  EXPECT_TRUE(all_close(out, want, t.rtol, t.atol, &mag));
  // inputs untouched
  EXPECT_TRUE(all_equal(ta, a));
  EXPECT_TRUE(all_equal(tb, b));

  // A transposed view passed with the opposite flag is the same product.
  if (c.la == Layout::Contig && c.lb == Layout::Contig) {
    Tensor ca = make_tensor(a, sa, c.dtype), cb = make_tensor(b, sb, c.dtype);
    Tensor r1 = hz::ops::matmul(ca.transpose(-1, -2), cb, !c.ta, c.tb, c.alpha);
    Tensor r2 = hz::ops::matmul(ca, cb.transpose(-1, -2), c.ta, !c.tb, c.alpha);
    Tensor r3 = hz::ops::matmul(ca.transpose(-1, -2), cb.transpose(-1, -2), !c.ta, !c.tb, c.alpha);
    const std::vector<double> direct = out.to_vector();  // the contiguous result
    for (const Tensor* r : {&r1, &r2, &r3}) {
      EXPECT_EQ(r->shape(), os);
      EXPECT_TRUE(all_close(*r, want, t.rtol, t.atol, &mag));
      EXPECT_TRUE(all_close(*r, direct, t.rtol, t.atol, &mag));
    }
  }
}
INSTANTIATE_TEST_SUITE_P(Ops, MatmulTest, ::testing::ValuesIn(hzt::on_devices(matmul_cases())), CaseName());

TEST(MatmulErrors, Shapes) {
  EXPECT_THROW(hz::ops::matmul(Tensor::ones({3, 4}), Tensor::ones({5, 2})), hz::ShapeError);
  EXPECT_THROW(hz::ops::matmul(Tensor::ones({3, 4}), Tensor::ones({3, 2}), false, true), hz::ShapeError);
  EXPECT_THROW(hz::ops::matmul(Tensor::ones({4}), Tensor::ones({4, 2})), hz::ShapeError);
  EXPECT_THROW(hz::ops::matmul(Tensor::ones({2, 3, 4}), Tensor::ones({3, 4, 2})), hz::ShapeError);
  EXPECT_THROW(hz::ops::matmul(Tensor::ones({3, 4}), Tensor::ones({4, 2}, DType::F64)), hz::DTypeError);
}

// =================================================================================================
// softmax / log_softmax
// =================================================================================================
enum class Special { None, NegInf, Large };
struct SoftmaxCase {
  Shape shape;
  int64_t dim;
  bool log;
  DType dtype;
  Layout layout;
  Special special;
  hz::Device dev = hz::Device::cpu();
  std::string tag() const {
    return std::string(log ? "logsoftmax_" : "softmax_") + shape_tag(shape) + "_d" +
           (dim < 0 ? "m" + std::to_string(-dim) : std::to_string(dim)) + "_" + dt_tag(dtype) + "_" +
           hzt::layout_name(layout) +
           (special == Special::NegInf ? "_neginf" : special == Special::Large ? "_large" : "");
  }
};
void PrintTo(const SoftmaxCase& c, std::ostream* os) { *os << c.tag(); }

std::vector<SoftmaxCase> softmax_cases() {
  struct SD {
    Shape s;
    int64_t dim;
  };
  const SD sds[] = {{{17}, 0},     {{3, 65}, 1},    {{3, 65}, 0},   {{4, 17, 3}, 1}, {{4, 17, 3}, -1},
                    {{4, 17, 3}, 0}, {{300, 257}, -1}, {{300, 257}, 0}, {{1, 130}, -1}, {{130, 1}, -1}};
  const Layout layouts[] = {Layout::Contig, Layout::Transposed, Layout::Sliced, Layout::Padded};
  std::vector<SoftmaxCase> v;
  int k = 0;
  for (bool log : {false, true})
    for (Special sp : {Special::None, Special::NegInf, Special::Large})
      for (const SD& sd : sds) {
        v.push_back({sd.s, sd.dim, log, k % 5 == 4 ? DType::BF16 : k % 2 ? DType::F64 : DType::F32, layouts[k % 4], sp});
        ++k;
      }
  return v;
}

// x for a softmax case; with NegInf, entries at odd positions k along dim are -inf at random
// (position 0 never is, so every row keeps a finite entry); Large puts logits around +1000.
std::vector<double> softmax_inputs(const SoftmaxCase& c, int64_t dim, uint64_t seed) {
  const int64_t n = numel_of(c.shape);
  std::vector<double> x = c.special == Special::Large ? rand_values(n, seed, 995.0, 1005.0, c.dtype)
                                                      : rand_values(n, seed, -4.0, 4.0, c.dtype);
  if (c.special == Special::NegInf) {
    const std::vector<double> coin = rand_values(n, seed + 1, 0.0, 1.0);
    const hzt::Around g = hzt::around_dim(c.shape, dim);
    for (int64_t o = 0; o < g.outer; ++o)
      for (int64_t k = 1; k < g.n; k += 2)
        for (int64_t i = 0; i < g.inner; ++i) {
          const int64_t j = (o * g.n + k) * g.inner + i;
          if (coin[j] < 0.6) x[j] = -kInf;
        }
  }
  return x;
}

class SoftmaxTest : public ::testing::TestWithParam<SoftmaxCase> {};
TEST_P(SoftmaxTest, MatchesReference) {
  const SoftmaxCase& c = GetParam();
  HZT_ON_DEVICE(c.dev);
  const int64_t dim = c.dim < 0 ? c.dim + static_cast<int64_t>(c.shape.size()) : c.dim;
  const std::vector<double> x = softmax_inputs(c, dim, 91);
  Tensor xt = make_tensor(x, c.shape, c.dtype, c.layout);
  Tensor y = c.log ? hz::ops::log_softmax(xt, c.dim) : hz::ops::softmax(xt, c.dim);
  EXPECT_EQ(y.shape(), c.shape);
  EXPECT_EQ(y.dtype(), c.dtype);
  const hzt::Around g = hzt::around_dim(c.shape, dim);
  std::vector<double> want(x.size());
  double maxabs = 1.0;
  for (double v : x)
    if (std::isfinite(v)) maxabs = std::max(maxabs, std::fabs(v));
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t i = 0; i < g.inner; ++i) {
      auto at = [&](int64_t k) { return (o * g.n + k) * g.inner + i; };
      double m = -kInf;
      for (int64_t k = 0; k < g.n; ++k) m = std::max(m, x[at(k)]);
      double s = 0;
      for (int64_t k = 0; k < g.n; ++k) s += std::exp(x[at(k)] - m);
      for (int64_t k = 0; k < g.n; ++k)
        want[at(k)] = c.log ? x[at(k)] - m - std::log(s) : std::exp(x[at(k)] - m) / s;
    }
  Tol t = tol_for(c.dtype);
  // log_softmax returns x - lse: its absolute error scales with the logits' magnitude
  if (c.log) t.atol = std::max(t.atol, 4 * (c.dtype == DType::F32 ? 1.2e-7 : 2.3e-16) * maxabs);
  EXPECT_TRUE(all_close(y, want, t));
  // probabilities are finite and sum to one along dim
  const std::vector<double> yv = y.to_vector();
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t i = 0; i < g.inner; ++i) {
      double s = 0;
      for (int64_t k = 0; k < g.n; ++k) {
        const double v = yv[(o * g.n + k) * g.inner + i];
        ASSERT_FALSE(std::isnan(v));
        s += c.log ? std::exp(v) : v;
      }
      // (log_softmax: an error d in the row's lse scales the sum by exp(-d))
      const double sum_tol = c.dtype == DType::F32 ? 1e-5 : c.dtype == DType::BF16 ? tol_for(c.dtype).rtol : 1e-12;
      ASSERT_NEAR(s, 1.0, std::max(sum_tol, c.log ? 2 * t.atol : 0.0));
    }
}
INSTANTIATE_TEST_SUITE_P(Ops, SoftmaxTest, ::testing::ValuesIn(hzt::on_devices(softmax_cases())), CaseName());

// Backward: the reference is the explicit Jacobian-vector product, dx_i = sum_j g_j dy_j/dx_i.
struct SoftmaxBwdCase {
  Shape shape;
  int64_t dim;
  bool log;
  DType dtype;
  Layout layout;
  hz::Device dev = hz::Device::cpu();
  std::string tag() const {
    return std::string(log ? "logsoftmax_bwd_" : "softmax_bwd_") + shape_tag(shape) + "_d" +
           (dim < 0 ? "m" + std::to_string(-dim) : std::to_string(dim)) + "_" + dt_tag(dtype) + "_" +
           hzt::layout_name(layout);
  }
};
void PrintTo(const SoftmaxBwdCase& c, std::ostream* os) { *os << c.tag(); }

std::vector<SoftmaxBwdCase> softmax_bwd_cases() {
  struct SD {
    Shape s;
    int64_t dim;
  };
  const SD sds[] = {{{17}, 0},        {{3, 65}, 1},   {{3, 65}, 0},   {{4, 17, 3}, 1},
                    {{4, 17, 3}, -1}, {{300, 257}, -1}, {{257, 130}, 0}, {{130, 1}, -1}};
  const Layout layouts[] = {Layout::Contig, Layout::Transposed, Layout::Sliced, Layout::Padded};
  std::vector<SoftmaxBwdCase> v;
  int k = 0;
  for (bool log : {false, true})
    for (const SD& sd : sds) {
      v.push_back({sd.s, sd.dim, log, k % 5 == 4 ? DType::BF16 : k % 2 ? DType::F64 : DType::F32, layouts[k % 4]});
      ++k;
    }
  return v;
}

class SoftmaxBackwardTest : public ::testing::TestWithParam<SoftmaxBwdCase> {};
TEST_P(SoftmaxBackwardTest, MatchesJacobianProduct) {
  const SoftmaxBwdCase& c = GetParam();
  HZT_ON_DEVICE(c.dev);
  const int64_t dim = c.dim < 0 ? c.dim + static_cast<int64_t>(c.shape.size()) : c.dim;
  const int64_t n = numel_of(c.shape);
  const std::vector<double> x = rand_values(n, 101, -3.0, 3.0);
  const std::vector<double> g = rand_values(n, 102, -1.0, 1.0, c.dtype);
  const hzt::Around ar = hzt::around_dim(c.shape, dim);
  // y = softmax(x) or log_softmax(x) in double, then stored in the test dtype
  std::vector<double> y(n);
  for (int64_t o = 0; o < ar.outer; ++o)
    for (int64_t i = 0; i < ar.inner; ++i) {
      auto at = [&](int64_t k) { return (o * ar.n + k) * ar.inner + i; };
      double s = 0;
      for (int64_t k = 0; k < ar.n; ++k) s += std::exp(x[at(k)]);
      for (int64_t k = 0; k < ar.n; ++k) y[at(k)] = c.log ? x[at(k)] - std::log(s) : std::exp(x[at(k)]) / s;
    }
  y = hzt::round_to(y, c.dtype);
  std::vector<double> want(n, 0.0), mag(n, 0.0);
  for (int64_t o = 0; o < ar.outer; ++o)
    for (int64_t i = 0; i < ar.inner; ++i) {
      auto at = [&](int64_t k) { return (o * ar.n + k) * ar.inner + i; };
      for (int64_t a = 0; a < ar.n; ++a) {       // dx_a
        const double pa = c.log ? std::exp(y[at(a)]) : y[at(a)];
        double acc = 0, sum_abs_g = 0, sum_abs_gy = 0;
        for (int64_t b = 0; b < ar.n; ++b) {     // sum over outputs y_b
          // softmax: dy_b/dx_a = y_b (delta_ab - y_a); log_softmax: delta_ab - p_a
          const double pb = c.log ? 0.0 : y[at(b)];
          const double jac = c.log ? (a == b ? 1.0 : 0.0) - pa : pb * ((a == b ? 1.0 : 0.0) - pa);
          acc += g[at(b)] * jac;
          sum_abs_g += std::fabs(g[at(b)]);
          sum_abs_gy += std::fabs(g[at(b)] * y[at(b)]);
        }
        want[at(a)] = acc;
        // size of the terms that cancel: y_a (|g_a| + sum|g y|) or |g_a| + p_a sum|g|
        mag[at(a)] = c.log ? std::fabs(g[at(a)]) + pa * sum_abs_g : pa * (std::fabs(g[at(a)]) + sum_abs_gy);
      }
    }
  Tensor yt = make_tensor(y, c.shape, c.dtype, c.layout);
  Tensor gt = make_tensor(g, c.shape, c.dtype, c.layout == Layout::Contig ? Layout::Sliced : Layout::Contig);
  Tensor dx = c.log ? hz::ops::log_softmax_backward(yt, gt, c.dim) : hz::ops::softmax_backward(yt, gt, c.dim);
  EXPECT_EQ(dx.shape(), c.shape);
  const Tol t = tol_for(c.dtype);
  EXPECT_TRUE(all_close(dx, want, t.rtol, t.atol, &mag));
}
INSTANTIATE_TEST_SUITE_P(Ops, SoftmaxBackwardTest, ::testing::ValuesIn(hzt::on_devices(softmax_bwd_cases())), CaseName());

// =================================================================================================
// embedding / embedding_backward
// =================================================================================================
struct EmbeddingCase {
  int64_t V, C;
  Shape ids_shape;
  DType wdtype, idtype;
  Layout wlayout;     // layout of the weight (forward) and of gout (backward)
  bool ids_transposed;  // ids passed as a transposed (non-contiguous) view
  hz::Device dev = hz::Device::cpu();
  std::string tag() const {
    return "V" + std::to_string(V) + "_C" + std::to_string(C) + "_ids" + shape_tag(ids_shape) + "_" +
           dt_tag(wdtype) + "_" + dt_tag(idtype) + "_" + hzt::layout_name(wlayout) + (ids_transposed ? "_idsT" : "");
  }
};
void PrintTo(const EmbeddingCase& c, std::ostream* os) { *os << c.tag(); }

std::vector<EmbeddingCase> embedding_cases() {
  return {
      {7, 3, {5}, DType::F32, DType::I64, Layout::Contig, false},
      {5, 17, {4, 10}, DType::F64, DType::I32, Layout::Transposed, true},  // many repeats
      {130, 65, {300}, DType::F32, DType::I32, Layout::Sliced, false},
      {17, 130, {20, 15}, DType::F32, DType::I64, Layout::Padded, true},   // backward n*C > 32768
      {3, 257, {300}, DType::F64, DType::I64, Layout::Contig, false},      // heavy accumulation
      {1, 1, {3}, DType::F64, DType::I64, Layout::Contig, false},
      {17, 1, {2, 3, 4}, DType::F32, DType::I32, Layout::Transposed, false},
      {4, 5, {}, DType::F64, DType::I32, Layout::Sliced, false},           // 0-d ids
      {130, 65, {300}, DType::BF16, DType::I64, Layout::Transposed, false},  // bf16 table
  };
}

// ids in [0, V) with the last id repeated at the front so repeats always occur.
std::vector<double> embedding_ids(const EmbeddingCase& c) {
  std::vector<double> ids = hzt::rand_ints(numel_of(c.ids_shape), 111, 0, c.V - 1);
  if (ids.size() >= 2) ids[0] = ids.back();
  return ids;
}
Tensor ids_tensor(const std::vector<double>& ids, const EmbeddingCase& c) {
  return make_tensor(ids, c.ids_shape, c.idtype, c.ids_transposed ? Layout::Transposed : Layout::Contig);
}

class EmbeddingTest : public ::testing::TestWithParam<EmbeddingCase> {};
TEST_P(EmbeddingTest, ForwardGathersRows) {
  const EmbeddingCase& c = GetParam();
  HZT_ON_DEVICE(c.dev);
  const std::vector<double> ids = embedding_ids(c);
  const std::vector<double> w = rand_values(c.V * c.C, 112, -1.0, 1.0, c.wdtype);
  Tensor out = hz::ops::embedding(make_tensor(w, {c.V, c.C}, c.wdtype, c.wlayout), ids_tensor(ids, c));
  Shape os = c.ids_shape;
  os.push_back(c.C);
  EXPECT_EQ(out.shape(), os);
  EXPECT_EQ(out.dtype(), c.wdtype);
  std::vector<double> want;
  for (double id : ids)
    for (int64_t j = 0; j < c.C; ++j) want.push_back(w[static_cast<int64_t>(id) * c.C + j]);
  EXPECT_TRUE(all_equal(out, want));
}
INSTANTIATE_TEST_SUITE_P(Ops, EmbeddingTest, ::testing::ValuesIn(hzt::on_devices(embedding_cases())), CaseName());

class EmbeddingBackwardTest : public ::testing::TestWithParam<EmbeddingCase> {};
TEST_P(EmbeddingBackwardTest, RepeatedIdsAccumulate) {
  const EmbeddingCase& c = GetParam();
  HZT_ON_DEVICE(c.dev);
  const std::vector<double> ids = embedding_ids(c);
  Shape gs = c.ids_shape;
  gs.push_back(c.C);
  const std::vector<double> g = rand_values(numel_of(gs), 113, -1.0, 1.0, c.wdtype);
  Tensor gw = hz::ops::embedding_backward(make_tensor(g, gs, c.wdtype, c.wlayout), ids_tensor(ids, c), c.V);
  EXPECT_EQ(gw.shape(), (Shape{c.V, c.C}));
  EXPECT_EQ(gw.dtype(), c.wdtype);
  std::vector<double> want(c.V * c.C, 0.0), mag(want.size(), 0.0);
  for (size_t i = 0; i < ids.size(); ++i)
    for (int64_t j = 0; j < c.C; ++j) {
      want[static_cast<int64_t>(ids[i]) * c.C + j] += g[i * c.C + j];
      mag[static_cast<int64_t>(ids[i]) * c.C + j] += std::fabs(g[i * c.C + j]);
    }
  const Tol t = tol_for(c.wdtype);
  EXPECT_TRUE(all_close(gw, want, t.rtol, t.atol, &mag));
  // deterministic: the same call gives the same bits
  Tensor again = hz::ops::embedding_backward(make_tensor(g, gs, c.wdtype, c.wlayout), ids_tensor(ids, c), c.V);
  EXPECT_TRUE(all_equal(again, gw.to_vector()));
}
INSTANTIATE_TEST_SUITE_P(Ops, EmbeddingBackwardTest, ::testing::ValuesIn(hzt::on_devices(embedding_cases())), CaseName());

TEST(EmbeddingErrors, OutOfRangeIdsThrow) {
  Tensor w = Tensor::ones({5, 3});
  for (DType idt : {DType::I32, DType::I64}) {
    SCOPED_TRACE(hz::dtype_name(idt));
    EXPECT_THROW(hz::ops::embedding(w, Tensor::from_vector({0, 5, 1}, {3}, idt)), hz::ValueError);
    EXPECT_THROW(hz::ops::embedding(w, Tensor::from_vector({-1}, {1}, idt)), hz::ValueError);
    EXPECT_THROW(hz::ops::embedding_backward(Tensor::ones({2, 3}), Tensor::from_vector({1, 5}, {2}, idt), 5),
                 hz::ValueError);
    EXPECT_THROW(hz::ops::embedding_backward(Tensor::ones({2, 3}), Tensor::from_vector({-2, 0}, {2}, idt), 5),
                 hz::ValueError);
    EXPECT_NO_THROW(hz::ops::embedding(w, Tensor::from_vector({0, 4}, {2}, idt)));
  }
  EXPECT_THROW(hz::ops::embedding(w, Tensor::zeros({2})), hz::DTypeError);        // float ids
  EXPECT_THROW(hz::ops::embedding(Tensor::ones({5}), Tensor::zeros({2}, DType::I64)), hz::ShapeError);
}

// =================================================================================================
// cross_entropy / cross_entropy_backward / cross_entropy_rows
// =================================================================================================
enum class Ignore { None, Some, All };
struct CECase {
  int64_t N, V;
  DType dtype, tdtype;
  bool weighted;
  Ignore ignore;
  int64_t ignore_index;
  Layout layout;  // of the logits
  double gscale;
  hz::Device dev = hz::Device::cpu();
  std::string tag() const {
    return "N" + std::to_string(N) + "_V" + std::to_string(V) + "_" + dt_tag(dtype) + "_" + dt_tag(tdtype) +
           (weighted ? "_w" : "") +
           (ignore == Ignore::None ? "" : ignore == Ignore::Some ? "_ignsome" : "_ignall") + "_ii" +
           (ignore_index < 0 ? "m" + std::to_string(-ignore_index) : std::to_string(ignore_index)) + "_" +
           hzt::layout_name(layout);
  }
};
void PrintTo(const CECase& c, std::ostream* os) { *os << c.tag(); }

std::vector<CECase> ce_cases() {
  struct NV {
    int64_t N, V;
  };
  const NV nvs[] = {{1, 1}, {3, 5}, {17, 65}, {130, 257}, {65, 3}};
  const Layout layouts[] = {Layout::Contig, Layout::Transposed, Layout::Sliced, Layout::Padded};
  std::vector<CECase> v;
  int k = 0;
  for (const NV& nv : nvs)
    for (bool w : {false, true})
      for (Ignore ig : {Ignore::None, Ignore::Some, Ignore::All}) {
        const int64_t ii = (k % 3 == 1 && nv.V > 2) ? 2 : -100;  // sometimes a valid class id
        const DType dt = k % 7 == 5 ? DType::BF16 : k % 2 ? DType::F64 : DType::F32;
        v.push_back({nv.N, nv.V, dt, k % 3 ? DType::I64 : DType::I32, w, ig, ii,
                     layouts[k % 4], k % 2 ? 1.0 : 0.37});
        ++k;
      }
  return v;
}

class CrossEntropyTest : public ::testing::TestWithParam<CECase> {};
TEST_P(CrossEntropyTest, LossRowsAndBackward) {
  const CECase& c = GetParam();
  HZT_ON_DEVICE(c.dev);
  const std::vector<double> logits = rand_values(c.N * c.V, 121, -3.0, 3.0, c.dtype);
  std::vector<double> targets = hzt::rand_ints(c.N, 122, 0, c.V - 1);
  std::vector<bool> ignored(c.N, false);
  for (int64_t r = 0; r < c.N; ++r) {
    if (c.ignore == Ignore::All || (c.ignore == Ignore::Some && r % 3 == 1)) targets[r] = static_cast<double>(c.ignore_index);
    ignored[r] = static_cast<int64_t>(targets[r]) == c.ignore_index;  // also a target that happens to equal it
  }
  const std::vector<double> w = c.weighted ? rand_values(c.N, 123, 0.1, 2.0, c.dtype) : std::vector<double>(c.N, 1.0);

  // reference: per-row lse, nll; loss = sum w nll / sum w over non-ignored rows (0 if none)
  std::vector<double> lse(c.N), nll(c.N, 0.0), grad(c.N * c.V, 0.0), gmag(c.N * c.V, 0.0);
  double num = 0, den = 0;
  for (int64_t r = 0; r < c.N; ++r) {
    double m = -kInf;
    for (int64_t v = 0; v < c.V; ++v) m = std::max(m, logits[r * c.V + v]);
    double s = 0;
    for (int64_t v = 0; v < c.V; ++v) s += std::exp(logits[r * c.V + v] - m);
    lse[r] = m + std::log(s);
    if (ignored[r]) continue;
    nll[r] = lse[r] - logits[r * c.V + static_cast<int64_t>(targets[r])];
    num += w[r] * nll[r];
    den += w[r];
  }
  const double loss = den > 0 ? num / den : 0.0;
  for (int64_t r = 0; r < c.N; ++r) {
    if (ignored[r] || den <= 0) continue;
    const double scale = w[r] / den * c.gscale;
    for (int64_t v = 0; v < c.V; ++v) {
      const double p = std::exp(logits[r * c.V + v] - lse[r]);
      const double onehot = v == static_cast<int64_t>(targets[r]) ? 1.0 : 0.0;
      grad[r * c.V + v] = (p - onehot) * scale;
      gmag[r * c.V + v] = (p + onehot) * std::fabs(scale);
    }
  }

  Tensor lt = make_tensor(logits, {c.N, c.V}, c.dtype, c.layout);
  Tensor tt = make_tensor(targets, {c.N}, c.tdtype);
  Tensor wt = c.weighted ? make_tensor(w, {c.N}, c.dtype, Layout::Sliced) : Tensor();
  const Tol t = tol_for(c.dtype);
  // loss, lse and per-row NLL come in the compute dtype (f32 for bf16 logits), from exact inputs
  const DType adt = hz::acc_dtype(c.dtype);
  const Tol ta = tol_for(adt);

  hz::CrossEntropyResult res = hz::ops::cross_entropy(lt, tt, wt, c.ignore_index);
  EXPECT_EQ(res.loss.dim(), 0);
  EXPECT_EQ(res.loss.dtype(), adt);
  EXPECT_TRUE(all_close(res.loss, {loss}, ta));
  EXPECT_NEAR(res.weight_sum, den, 1e-12 * std::max(1.0, den));
  EXPECT_EQ(res.lse.shape(), (Shape{c.N}));
  EXPECT_EQ(res.lse.dtype(), adt);
  EXPECT_TRUE(all_close(res.lse, lse, ta));
  if (c.ignore == Ignore::All) {
    EXPECT_EQ(res.loss.item(), 0.0);
  }

  Tensor rows = hz::ops::cross_entropy_rows(lt, tt, c.ignore_index);
  EXPECT_EQ(rows.shape(), (Shape{c.N}));
  EXPECT_EQ(rows.dtype(), DType::F64);  // the values cross_entropy sums, unrounded
  EXPECT_TRUE(all_close(rows, nll, ta));
  {  // their weighted mean in row order is the loss, bitwise (what the chunked LM-head loss relies on)
    const std::vector<double> r = rows.to_vector(), tv = tt.to_vector();
    const std::vector<double> wv = wt.defined() ? wt.to_vector() : std::vector<double>(c.N, 1.0);
    double num = 0, d = 0;
    for (int64_t i = 0; i < c.N; ++i) {
      if (static_cast<int64_t>(tv[i]) == c.ignore_index) continue;
      num += wv[i] * r[i];
      d += wv[i];
    }
    EXPECT_EQ(Tensor::full({}, d > 0 ? num / d : 0.0, adt).item(), res.loss.item());
  }

  Tensor gl = hz::ops::cross_entropy_backward(lt, tt, wt, res.lse, res.weight_sum, c.ignore_index, c.gscale);
  EXPECT_EQ(gl.shape(), (Shape{c.N, c.V}));
  EXPECT_EQ(gl.dtype(), c.dtype);
  EXPECT_TRUE(all_close(gl, grad, t.rtol, t.atol, &gmag));
}
INSTANTIATE_TEST_SUITE_P(Ops, CrossEntropyTest, ::testing::ValuesIn(hzt::on_devices(ce_cases())), CaseName());

TEST(CrossEntropyErrors, TargetsOutOfRange) {
  Tensor logits = Tensor::zeros({3, 4});
  for (DType tdt : {DType::I32, DType::I64}) {
    SCOPED_TRACE(hz::dtype_name(tdt));
    Tensor hi = Tensor::from_vector({0, 4, 1}, {3}, tdt);
    Tensor lo = Tensor::from_vector({0, -1, 1}, {3}, tdt);
    EXPECT_THROW(hz::ops::cross_entropy(logits, hi), hz::ValueError);
    EXPECT_THROW(hz::ops::cross_entropy(logits, lo), hz::ValueError);
    EXPECT_THROW(hz::ops::cross_entropy_rows(logits, hi), hz::ValueError);
    EXPECT_THROW(hz::ops::cross_entropy_rows(logits, lo), hz::ValueError);
    // -1 is fine when it is the ignore index
    EXPECT_NO_THROW(hz::ops::cross_entropy(logits, lo, Tensor(), -1));
  }
  EXPECT_THROW(hz::ops::cross_entropy(Tensor::zeros({3, 4}), Tensor::zeros({2}, DType::I64)), hz::ShapeError);
  EXPECT_THROW(hz::ops::cross_entropy(Tensor::zeros({3, 4}), Tensor::zeros({3})), hz::DTypeError);
  EXPECT_THROW(hz::ops::cross_entropy(Tensor::zeros({12}), Tensor::zeros({12}, DType::I64)), hz::ShapeError);
  EXPECT_THROW(hz::ops::cross_entropy(Tensor::zeros({3, 4}), Tensor::zeros({3}, DType::I64), Tensor::ones({4})),
               hz::ShapeError);
}

// =================================================================================================
// rms_norm / rms_norm_backward
// =================================================================================================
struct RmsCase {
  Shape shape;
  DType dtype;
  bool weighted;
  Layout layout;
  double eps;
  hz::Device dev = hz::Device::cpu();
  std::string tag() const {
    return shape_tag(shape) + "_" + dt_tag(dtype) + (weighted ? "_w" : "_now") + "_" + hzt::layout_name(layout) +
           "_eps" + std::to_string(static_cast<int>(-std::log10(eps)));
  }
};
void PrintTo(const RmsCase& c, std::ostream* os) { *os << c.tag(); }

std::vector<RmsCase> rms_cases() {
  const Shape shapes[] = {{17}, {3, 65}, {4, 17, 3}, {300, 257}, {2, 3, 130}, {1, 1}, {5, 1}};
  const Layout layouts[] = {Layout::Contig, Layout::Transposed, Layout::Sliced, Layout::Padded};
  const double epss[] = {1e-6, 1e-5, 0.1};
  std::vector<RmsCase> v;
  int k = 0;
  for (const Shape& s : shapes)
    for (bool w : {false, true})
      for (DType d : {DType::F32, DType::F64, DType::BF16}) {
        v.push_back({s, d, w, layouts[k % 4], epss[k % 3]});
        ++k;
      }
  return v;
}

class RmsNormTest : public ::testing::TestWithParam<RmsCase> {};
TEST_P(RmsNormTest, ForwardAndBackward) {
  const RmsCase& c = GetParam();
  HZT_ON_DEVICE(c.dev);
  const int64_t C = c.shape.back(), R = numel_of(c.shape) / C;
  const std::vector<double> x = rand_values(R * C, 131, -2.0, 2.0, c.dtype);
  const std::vector<double> w = c.weighted ? rand_values(C, 132, 0.5, 1.5, c.dtype) : std::vector<double>(C, 1.0);
  const std::vector<double> g = rand_values(R * C, 133, -1.0, 1.0, c.dtype);

  // forward: r = 1 / sqrt(mean(x^2) + eps), y = x * r * w
  std::vector<double> rstd(R), y(R * C);
  for (int64_t r = 0; r < R; ++r) {
    double ss = 0;
    for (int64_t j = 0; j < C; ++j) ss += x[r * C + j] * x[r * C + j];
    rstd[r] = 1.0 / std::sqrt(ss / C + c.eps);
    for (int64_t j = 0; j < C; ++j) y[r * C + j] = x[r * C + j] * rstd[r] * w[j];
  }
  // backward: dy_j/dx_i = w_j (delta_ij r - r^3 x_i x_j / C), so
  // gx_i = r g_i w_i - r^3 x_i / C * sum_j g_j w_j x_j ;  gw_j = sum_rows g_j x_j r
  std::vector<double> gx(R * C), gxmag(R * C), gw(C, 0.0), gwmag(C, 0.0);
  for (int64_t r = 0; r < R; ++r) {
    const double rs = rstd[r];
    double dot = 0, dotmag = 0;
    for (int64_t j = 0; j < C; ++j) {
      dot += g[r * C + j] * w[j] * x[r * C + j];
      dotmag += std::fabs(g[r * C + j] * w[j] * x[r * C + j]);
    }
    for (int64_t i = 0; i < C; ++i) {
      const double xi = x[r * C + i];
      gx[r * C + i] = rs * g[r * C + i] * w[i] - rs * rs * rs * xi / C * dot;
      gxmag[r * C + i] = rs * std::fabs(g[r * C + i] * w[i]) + rs * rs * rs * std::fabs(xi) / C * dotmag;
      gw[i] += g[r * C + i] * xi * rs;
      gwmag[i] += std::fabs(g[r * C + i] * xi * rs);
    }
  }

  Tensor xt = make_tensor(x, c.shape, c.dtype, c.layout);
  Tensor wt = c.weighted ? make_tensor(w, {C}, c.dtype, Layout::Sliced) : Tensor();
  const Tol t = tol_for(c.dtype);
  hz::ops::RmsNormResult fwd = hz::ops::rms_norm(xt, wt, c.eps);
  EXPECT_EQ(fwd.y.shape(), c.shape);
  EXPECT_EQ(fwd.rstd.shape(), Shape(c.shape.begin(), c.shape.end() - 1));
  EXPECT_TRUE(all_close(fwd.y, y, t));
  EXPECT_TRUE(all_close(fwd.rstd, rstd, t));

  Tensor gt = make_tensor(g, c.shape, c.dtype, c.layout == Layout::Contig ? Layout::Transposed : Layout::Contig);
  hz::ops::RmsNormGrads grads = hz::ops::rms_norm_backward(xt, wt, fwd.rstd, gt, true, true);
  EXPECT_EQ(grads.gx.shape(), c.shape);
  EXPECT_TRUE(all_close(grads.gx, gx, t.rtol, t.atol, &gxmag));
  if (c.weighted) {
    EXPECT_EQ(grads.gw.shape(), (Shape{C}));
    EXPECT_TRUE(all_close(grads.gw, gw, t.rtol, t.atol, &gwmag));
  } else {
    EXPECT_FALSE(grads.gw.defined());
  }
  // the need_* flags
  hz::ops::RmsNormGrads only_w = hz::ops::rms_norm_backward(xt, wt, fwd.rstd, gt, false, true);
  EXPECT_FALSE(only_w.gx.defined());
  if (c.weighted) {
    EXPECT_TRUE(all_close(only_w.gw, gw, t.rtol, t.atol, &gwmag));
  }
  hz::ops::RmsNormGrads only_x = hz::ops::rms_norm_backward(xt, wt, fwd.rstd, gt, true, false);
  EXPECT_FALSE(only_x.gw.defined());
  EXPECT_TRUE(all_close(only_x.gx, gx, t.rtol, t.atol, &gxmag));
}

// The residual forms are the fused twins of two ops each: the forward's residual is ops::add followed
// by the norm, the backward's gres is ops::add of it and the norm's gradient. Same bits, on every
// device, every layout (the residual and gres given strided too), with a gain of x's dtype or an
// f32 gain on bf16 activations.
TEST_P(RmsNormTest, ResidualFormsAreTheAddAndTheNormBitForBit) {
  const RmsCase& c = GetParam();
  HZT_ON_DEVICE(c.dev);
  const int64_t C = c.shape.back(), R = numel_of(c.shape) / C;
  auto values = [](const Tensor& t) { return t.to(hz::Device::cpu()).to(DType::F64).to_vector(); };
  const Layout other = c.layout == Layout::Contig ? Layout::Transposed : Layout::Contig;
  const Tensor x = make_tensor(rand_values(R * C, 141, -2.0, 2.0, c.dtype), c.shape, c.dtype, c.layout);
  const Tensor r = make_tensor(rand_values(R * C, 142, -2.0, 2.0, c.dtype), c.shape, c.dtype, other);
  const Tensor g = make_tensor(rand_values(R * C, 143, -1.0, 1.0, c.dtype), c.shape, c.dtype, c.layout);
  const Tensor gres = make_tensor(rand_values(R * C, 144, -1.0, 1.0, c.dtype), c.shape, c.dtype, other);
  std::vector<DType> gains{c.dtype};
  if (c.dtype == DType::BF16) gains.push_back(DType::F32);
  for (DType gd : gains) {
    SCOPED_TRACE(std::string("gain ") + hz::dtype_name(gd));
    const Tensor w = c.weighted ? make_tensor(rand_values(C, 145, 0.5, 1.5, gd), {C}, gd, Layout::Contig) : Tensor();
    const hz::ops::RmsNormResult fused = hz::ops::rms_norm(x, w, c.eps, r);
    const Tensor sum = hz::ops::add(x, r);
    const hz::ops::RmsNormResult plain = hz::ops::rms_norm(sum, w, c.eps);
    ASSERT_TRUE(fused.sum.defined());
    EXPECT_EQ(fused.sum.dtype(), c.dtype);
    EXPECT_EQ(values(fused.sum), values(sum));
    EXPECT_EQ(values(fused.y), values(plain.y));
    EXPECT_EQ(values(fused.rstd), values(plain.rstd));
    EXPECT_FALSE(plain.sum.defined());

    const hz::ops::RmsNormGrads d = hz::ops::rms_norm_backward(sum, w, plain.rstd, g, true, true);
    const hz::ops::RmsNormGrads folded = hz::ops::rms_norm_backward(sum, w, plain.rstd, g, true, true, gres);
    EXPECT_EQ(values(folded.gx), values(hz::ops::add(gres, d.gx)));
    if (c.weighted) {
      EXPECT_EQ(values(folded.gw), values(d.gw));  // gres does not reach the gain
    }
    // without gx wanted, gres is not read
    EXPECT_FALSE(hz::ops::rms_norm_backward(sum, w, plain.rstd, g, false, true, gres).gx.defined());
  }
}
INSTANTIATE_TEST_SUITE_P(Ops, RmsNormTest, ::testing::ValuesIn(hzt::on_devices(rms_cases())), CaseName());

// SwiGLU's gate is the fused twin of silu then mul, forward and backward (mul's and silu's backwards
// composed): the same bits on every device, for f32, f64 and bf16, strided inputs included.
class SwiGluTest : public ::testing::TestWithParam<RmsCase> {};
TEST_P(SwiGluTest, IsSiluThenMulBitForBit) {
  const RmsCase& c = GetParam();
  HZT_ON_DEVICE(c.dev);
  const int64_t n = numel_of(c.shape);
  auto values = [](const Tensor& t) { return t.to(hz::Device::cpu()).to(DType::F64).to_vector(); };
  const Layout other = c.layout == Layout::Contig ? Layout::Transposed : Layout::Contig;
  const Tensor a = make_tensor(rand_values(n, 151, -6.0, 6.0, c.dtype), c.shape, c.dtype, c.layout);
  const Tensor b = make_tensor(rand_values(n, 152, -2.0, 2.0, c.dtype), c.shape, c.dtype, other);
  const Tensor g = make_tensor(rand_values(n, 153, -1.0, 1.0, c.dtype), c.shape, c.dtype, c.layout);
  const Tensor s = hz::ops::unary(hz::UnaryOp::Silu, a);
  EXPECT_EQ(values(hz::ops::swiglu(a, b)), values(hz::ops::mul(s, b)));
  const hz::ops::SwiGluGrads d = hz::ops::swiglu_backward(a, b, g, true, true);
  EXPECT_EQ(values(d.da), values(hz::ops::unary_backward(hz::UnaryOp::Silu, a, hz::ops::mul(g, b))));
  EXPECT_EQ(values(d.db), values(hz::ops::mul(g, s)));
  EXPECT_FALSE(hz::ops::swiglu_backward(a, b, g, false, true).da.defined());
  EXPECT_FALSE(hz::ops::swiglu_backward(a, b, g, true, false).db.defined());
  // the gradients are not trivially zero (a check that can fail)
  double mag = 0;
  for (double v : values(d.da)) mag += std::fabs(v);
  EXPECT_GT(mag, 0.0);
}
INSTANTIATE_TEST_SUITE_P(Ops, SwiGluTest, ::testing::ValuesIn(hzt::on_devices(rms_cases())), CaseName());

TEST(SwiGluErrors, ShapesAndDtypes) {
  EXPECT_THROW(hz::ops::swiglu(Tensor::ones({3, 4}), Tensor::ones({4})), hz::ShapeError);
  EXPECT_THROW(hz::ops::swiglu(Tensor::ones({3, 4}), Tensor::ones({3, 4}, DType::F64)), hz::DTypeError);
  EXPECT_THROW(hz::ops::swiglu(Tensor::ones({3}, DType::I64), Tensor::ones({3}, DType::I64)), hz::DTypeError);
}

TEST(RmsNormErrors, ResidualOfAnotherShapeOrDtype) {
  const Tensor x = Tensor::ones({3, 4});
  EXPECT_THROW(hz::ops::rms_norm(x, Tensor(), 1e-5, Tensor::ones({3, 1})), hz::ShapeError);
  EXPECT_THROW(hz::ops::rms_norm(x, Tensor(), 1e-5, Tensor::ones({3, 4}, DType::F64)), hz::ShapeError);
  const hz::ops::RmsNormResult n = hz::ops::rms_norm(x, Tensor(), 1e-5);
  EXPECT_THROW(hz::ops::rms_norm_backward(x, Tensor(), n.rstd, x, true, false, Tensor::ones({4})), hz::ShapeError);
}

TEST(RmsNormErrors, WeightShape) {
  EXPECT_THROW(hz::ops::rms_norm(Tensor::ones({3, 4}), Tensor::ones({3}), 1e-5), hz::ShapeError);
  EXPECT_THROW(hz::ops::rms_norm(Tensor::ones({3, 4}), Tensor::ones({1, 4}), 1e-5), hz::ShapeError);
  EXPECT_THROW(hz::ops::rms_norm(Tensor::ones({3, 4}), Tensor::ones({4}, DType::F64), 1e-5), hz::DTypeError);
}

}  // namespace

// A row with no finite logit has no probability mass: softmax 0, log-softmax -inf (no NaN).
TEST(SoftmaxEdge, AllMinusInfRow) {
  const double ninf = -std::numeric_limits<double>::infinity();
  const hz::Tensor x = hz::Tensor::from_vector({ninf, ninf, 0.0, 1.0}, {2, 2}, hz::DType::F32);
  const hz::Tensor s = hz::ops::softmax(x, -1), l = hz::ops::log_softmax(x, -1);
  EXPECT_EQ(s.at({0, 0}), 0.0);
  EXPECT_EQ(s.at({0, 1}), 0.0);
  EXPECT_TRUE(std::isinf(l.at({0, 0})) && l.at({0, 0}) < 0);
  EXPECT_NEAR(s.at({1, 1}), 1.0 / (1.0 + std::exp(-1.0)), 1e-7);
}

// cross_entropy_backward validates targets like the forward (no out-of-bounds write).
TEST(CrossEntropyEdge, BackwardRefusesOutOfRangeTarget) {
  const hz::Tensor logits = hz::Tensor::zeros({2, 3});
  const hz::Tensor bad = hz::Tensor::from_vector({0, 7}, {2}, hz::DType::I64);
  const hz::Tensor lse = hz::Tensor::zeros({2});
  EXPECT_THROW(hz::ops::cross_entropy_backward(logits, bad, hz::Tensor(), lse, 2.0, -100, 1.0), hz::ValueError);
}

TEST(BinaryEdge, MaximumMinimumPropagateNaNFromEitherSide) {
  const double nan = std::nan("");
  const Tensor a = Tensor::from_vector({nan, 1.0, 2.0, nan, -0.5}, {5}), b = Tensor::from_vector({1.0, nan, 1.0, nan, 0.5}, {5});
  const std::vector<double> mx = hz::ops::binary(BinaryOp::Maximum, a, b).to_vector();
  const std::vector<double> mn = hz::ops::binary(BinaryOp::Minimum, a, b).to_vector();
  for (int i : {0, 1, 3}) {
    EXPECT_TRUE(std::isnan(mx[i])) << i;
    EXPECT_TRUE(std::isnan(mn[i])) << i;
  }
  EXPECT_EQ(mx[2], 2.0);
  EXPECT_EQ(mn[2], 1.0);
  EXPECT_EQ(mx[4], 0.5);
  EXPECT_EQ(mn[4], -0.5);
}

TEST(BackendTable, AMissingEntryNamesTheOpAndTheDevice) {
  try {
    hz::detail::missing_entry("rotary", hz::Device::cpu());
    FAIL();
  } catch (const hz::NotImplementedError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'rotary'"), std::string::npos) << m;
    EXPECT_NE(m.find("cpu"), std::string::npos) << m;
  }
  // every entry of the CPU table is filled
  const hz::Backend& b = hz::cpu_backend();
  const void* const* slots = reinterpret_cast<const void* const*>(&b);
  for (size_t i = 1; i < sizeof(hz::Backend) / sizeof(void*); ++i)
    if (i != 3 && i != 4) {  // (upload/download: host memory)
      EXPECT_NE(slots[i], nullptr) << "entry " << i;
    }
  EXPECT_THROW(HZ_BACKEND(hz::Device::cpu(), upload), hz::NotImplementedError);
}

// The rotation reads the heads' view of a projection ((B, T, H, D) transposed to (B, H, T, D): rows
// unit-stride, the rest strided) in place: the same bits as on its contiguous copy, per-sequence
// positions included; a view whose rows are strided goes through a copy.
TEST(Rotary, AHeadsViewIsReadInPlaceWithTheCopysBits) {
  const int64_t B = 2, T = 5, H = 3, D = 8;
  hz::Generator gen(61);
  const Tensor proj = gen.normal({B, T, H, D}, 0, 1, DType::F32);
  const Tensor heads = proj.transpose(1, 2);  // (B, H, T, D) view
  ASSERT_FALSE(heads.is_contiguous());
  hz::RotaryParams p;
  for (int64_t m = 0; m < D / 2; ++m) p.inv_freq.push_back(std::pow(10000.0, -2.0 * m / D));
  auto values = [](const Tensor& t) { return t.to(DType::F64).to_vector(); };
  const Tensor pos = Tensor::from_vector({3, 1, 4, 1, 5, 9, 2, 6, 5, 3}, {B, T}, DType::I64);
  for (const Tensor& positions : {Tensor::arange(0, T, 1, DType::I64), pos}) {
    EXPECT_EQ(values(hz::ops::rotary(heads, positions, p)), values(hz::ops::rotary(heads.contiguous(), positions, p)));
    const Tensor strided_rows = gen.normal({B, H, T, 2 * D}, 0, 1, DType::F32).slice(3, 0, 2 * D, 2);
    EXPECT_EQ(values(hz::ops::rotary(strided_rows, positions, p)),
              values(hz::ops::rotary(strided_rows.contiguous(), positions, p)));
  }
}
