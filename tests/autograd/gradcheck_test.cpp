// Every differentiable op against central finite differences in double precision.
// One parameterised table (op x shapes x layout); ragged sizes, broadcasting and non-contiguous
// (transposed / sliced) inputs are fields of the cases.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "autograd/functions.h"
#include "autograd/gradcheck.h"
#include "core/rng.h"

using namespace hz;
using namespace hz::ag;

namespace {

struct Case {
  std::string name;
  std::vector<Shape> shapes;  // one per differentiable input (f64, normal(0,1) unless positive)
  TestFn f;
  bool positive = false;      // inputs in [0.5, 2] (log, sqrt, div denominators)
  bool transposed = false;    // pass inputs as transposed views of contiguous data
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

class GradcheckOp : public ::testing::TestWithParam<Case> {};

TEST_P(GradcheckOp, MatchesFiniteDifferences) {
  const Case& c = GetParam();
  Generator gen(7, 1);
  std::vector<Tensor> inputs;
  for (const Shape& s : c.shapes) {
    Tensor t = c.positive ? gen.uniform(s, 0.5, 2.0, DType::F64) : gen.normal(s, 0, 1, DType::F64);
    inputs.push_back(t);
  }
  TestFn f = c.f;
  if (c.transposed) {
    // the op sees non-contiguous views: each input is stored transposed and viewed back
    f = [fn = c.f](const std::vector<Variable>& xs) {
      std::vector<Variable> v;
      for (const auto& x : xs) {
        Variable stored = contiguous(transpose(x, -1, -2));  // data laid out transposed
        v.push_back(transpose(stored, -1, -2));              // same values, strided view
        EXPECT_FALSE(v.back().value().is_contiguous() && x.size(-1) > 1 && x.size(-2) > 1);
      }
      return fn(v);
    };
  }
  GradcheckResult r = gradcheck(f, inputs);
  EXPECT_TRUE(r.ok) << c.name << ": " << r.message;
  EXPECT_GT(r.checked, 0);
}

std::vector<Case> cases() {
  std::vector<Case> v;
  auto un = [&](UnaryOp op, bool pos) {
    v.push_back({std::string("unary_") + unary_op_name(op), {{3, 5}},
                 [op](const std::vector<Variable>& x) { return unary(op, x[0]); }, pos});
  };
  for (int i = 0; i < static_cast<int>(UnaryOp::Count); ++i) {
    const UnaryOp op = static_cast<UnaryOp>(i);
    const bool pos = op == UnaryOp::Log || op == UnaryOp::Sqrt || op == UnaryOp::Rsqrt ||
                     op == UnaryOp::Abs || op == UnaryOp::Relu || op == UnaryOp::Relu2;
    un(op, pos);
  }
  // relu/relu2/abs at negative inputs too (away from the kink at 0)
  v.push_back({"relu2_negative", {{4, 3}}, [](const std::vector<Variable>& x) {
                 return relu2(add_scalar(x[0], -3.0));
               }, true});
  v.push_back({"abs_negative", {{4, 3}}, [](const std::vector<Variable>& x) {
                 return unary(UnaryOp::Abs, neg(x[0]));
               }, true});
  using Fn2 = std::function<Variable(const Variable&, const Variable&)>;
  const std::vector<std::pair<std::string, Fn2>> bins = {
      {"add", [](auto& a, auto& b) { return a + b; }},
      {"sub", [](auto& a, auto& b) { return a - b; }},
      {"mul", [](auto& a, auto& b) { return a * b; }},
      {"div", [](auto& a, auto& b) { return a / b; }}};
  const std::vector<std::pair<Shape, Shape>> bshapes = {
      {{3, 4}, {3, 4}}, {{3, 1, 5}, {4, 5}}, {{1}, {7, 3}}, {{2, 3, 1}, {1, 3, 4}}};
  for (const auto& [name, fn] : bins)
    for (const auto& [sa, sb] : bshapes)
      v.push_back({"binary_" + name + "_" + shape_str(sa) + shape_str(sb), {sa, sb},
                   [fn = fn](const std::vector<Variable>& x) { return fn(x[0], x[1]); },
                   name == "div"});
  v.push_back({"mul_same_input_twice", {{5}}, [](const std::vector<Variable>& x) { return x[0] * x[0]; }});
  v.push_back({"add_scalar", {{2, 3}}, [](const std::vector<Variable>& x) { return add_scalar(x[0], 2.5); }});
  v.push_back({"mul_scalar", {{2, 3}}, [](const std::vector<Variable>& x) { return mul_scalar(x[0], -1.5); }});
  v.push_back({"pow_scalar", {{2, 3}}, [](const std::vector<Variable>& x) { return pow_scalar(x[0], 2.7); }, true});
  // views
  v.push_back({"reshape", {{2, 3, 4}}, [](const std::vector<Variable>& x) { return reshape(x[0], {4, -1}); }});
  v.push_back({"transpose", {{2, 3, 4}}, [](const std::vector<Variable>& x) { return transpose(x[0], 0, 2); }});
  v.push_back({"permute", {{2, 3, 4}}, [](const std::vector<Variable>& x) { return permute(x[0], {1, 2, 0}); }});
  v.push_back({"narrow", {{5, 3}}, [](const std::vector<Variable>& x) { return narrow(x[0], 0, 1, 3); }});
  v.push_back({"slice_step", {{3, 7}}, [](const std::vector<Variable>& x) { return slice(x[0], 1, 1, 7, 2); }});
  v.push_back({"expand", {{3, 1}}, [](const std::vector<Variable>& x) { return expand(x[0], {2, 3, 4}); }});
  v.push_back({"unsqueeze_squeeze", {{3, 4}}, [](const std::vector<Variable>& x) {
                 return squeeze(mul(unsqueeze(x[0], 1), unsqueeze(x[0], 1)), 1);
               }});
  v.push_back({"cat", {{2, 3}, {4, 3}}, [](const std::vector<Variable>& x) { return cat({x[0], x[1], x[0]}, 0); }});
  // reductions
  for (int64_t d = 0; d < 3; ++d) {
    for (bool keep : {false, true}) {
      const std::string s = std::to_string(d) + (keep ? "_keep" : "");
      v.push_back({"sum_dim" + s, {{3, 4, 5}}, [d, keep](const std::vector<Variable>& x) { return sum(x[0], d, keep); }});
      v.push_back({"mean_dim" + s, {{3, 4, 5}}, [d, keep](const std::vector<Variable>& x) { return mean(x[0], d, keep); }});
      v.push_back({"max_dim" + s, {{3, 4, 5}}, [d, keep](const std::vector<Variable>& x) { return max(x[0], d, keep); }});
    }
    v.push_back({"cumsum_dim" + std::to_string(d), {{3, 4, 5}},
                 [d](const std::vector<Variable>& x) { return cumsum(x[0], d); }});
  }
  v.push_back({"sum_all", {{3, 5}}, [](const std::vector<Variable>& x) { return sum_all(x[0]); }});
  v.push_back({"mean_all", {{3, 5}}, [](const std::vector<Variable>& x) { return mean_all(x[0]); }});
  v.push_back({"softmax_last", {{3, 7}}, [](const std::vector<Variable>& x) { return softmax(x[0], -1); }});
  v.push_back({"softmax_dim0", {{4, 3, 2}}, [](const std::vector<Variable>& x) { return softmax(x[0], 0); }});
  v.push_back({"log_softmax_last", {{3, 7}}, [](const std::vector<Variable>& x) { return log_softmax(x[0], -1); }});
  v.push_back({"log_softmax_dim1", {{2, 5, 3}}, [](const std::vector<Variable>& x) { return log_softmax(x[0], 1); }});
  // matmul: every transpose combination, batched, broadcast, ragged
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Shape sa = ta ? Shape{5, 3} : Shape{3, 5}, sb = tb ? Shape{4, 5} : Shape{5, 4};
      const std::string n = std::string("matmul_2d_") + (ta ? "T" : "N") + (tb ? "T" : "N");
      v.push_back({n, {sa, sb}, [ta, tb](const std::vector<Variable>& x) { return matmul(x[0], x[1], ta, tb, 0.7); }});
      Shape ba = sa, bb = sb;
      ba.insert(ba.begin(), 2);
      bb.insert(bb.begin(), 2);
      v.push_back({n + "_batched", {ba, bb}, [ta, tb](const std::vector<Variable>& x) { return matmul(x[0], x[1], ta, tb); }});
      v.push_back({n + "_broadcast_b", {ba, sb}, [ta, tb](const std::vector<Variable>& x) { return matmul(x[0], x[1], ta, tb); }});
      v.push_back({n + "_broadcast_a", {sa, bb}, [ta, tb](const std::vector<Variable>& x) { return matmul(x[0], x[1], ta, tb); }});
    }
  v.push_back({"matmul_4d_ragged", {{2, 3, 5, 7}, {2, 3, 7, 1}}, [](const std::vector<Variable>& x) { return matmul(x[0], x[1]); }});
  v.push_back({"linear_bias", {{2, 3, 5}, {4, 5}, {4}}, [](const std::vector<Variable>& x) { return linear(x[0], x[1], x[2]); }});
  v.push_back({"linear_nobias", {{7, 5}, {3, 5}}, [](const std::vector<Variable>& x) { return linear(x[0], x[1]); }});
  // nn
  v.push_back({"rms_norm_weight", {{3, 7}, {7}}, [](const std::vector<Variable>& x) { return rms_norm(x[0], x[1], 1e-5); }});
  v.push_back({"rms_norm_noweight", {{2, 2, 5}}, [](const std::vector<Variable>& x) { return rms_norm(x[0], Variable(), 1e-5); }});
  v.push_back({"swiglu", {{3, 7}, {3, 7}}, [](const std::vector<Variable>& x) { return swiglu(x[0], x[1]); }, false, true});
  // the fused residual norm: both outputs reach the loss (the sum through another op, so the norm's
  // backward adds a pending gradient)
  v.push_back({"add_rms_norm", {{2, 3, 6}, {2, 3, 6}, {6}}, [](const std::vector<Variable>& x) {
                 const ResidualNorm r = add_rms_norm(x[0], x[1], x[2], 1e-5);
                 return add(mul(r.sum, r.sum), r.normed);
               }});
  v.push_back({"embedding", {{6, 3}}, [](const std::vector<Variable>& x) {
                 return embedding(x[0], Tensor::from_vector({0, 2, 2, 5, 1, 2}, {2, 3}, DType::I64));
               }});
  v.push_back({"cross_entropy", {{5, 7}}, [](const std::vector<Variable>& x) {
                 return cross_entropy(x[0], Tensor::from_vector({0, 6, 3, 3, 1}, {5}, DType::I32));
               }});
  v.push_back({"cross_entropy_weights_ignore", {{5, 7}}, [](const std::vector<Variable>& x) {
                 return cross_entropy(x[0], Tensor::from_vector({0, -100, 3, 3, 1}, {5}, DType::I64),
                                      Tensor::from_vector({1.0, 1.0, 0.5, 0.0, 2.0}, {5}, DType::F32));
               }});
  v.push_back({"composite_mlp", {{4, 6}, {5, 6}, {3, 5}}, [](const std::vector<Variable>& x) {
                 Variable h = silu(linear(x[0], x[1]));
                 return log_softmax(linear(rms_norm(h, Variable()), x[2]), -1);
               }});
  return v;
}

std::vector<Case> transposed_cases() {
  std::vector<Case> v;
  for (const Case& c : cases()) {
    bool all2d = true;
    for (const auto& s : c.shapes) all2d &= s.size() >= 2;
    if (!all2d) continue;
    Case t = c;
    t.name = c.name + "_noncontiguous";
    t.transposed = true;
    v.push_back(t);
  }
  return v;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string s = info.param.name;
  for (char& ch : s)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Ops, GradcheckOp, ::testing::ValuesIn(cases()), case_name);
INSTANTIATE_TEST_SUITE_P(NonContiguous, GradcheckOp, ::testing::ValuesIn(transposed_cases()), case_name);

// The checker itself must be able to fail: an op whose backward is off by 1% is caught.
TEST(Gradcheck, DetectsAWrongGradient) {
  TestFn wrong = [](const std::vector<Variable>& x) {
    Tensor y = ops::mul(x[0].value(), x[0].value());
    Tensor xv = x[0].value();
    return make_result(y, {x[0]}, "bad_square", [=] {
      return [=](const Tensor& g, Grads& gr) { gr.set(0, ops::mul(g, ops::mul_scalar(xv, 2.02))); };
    });
  };
  Generator gen(3);
  GradcheckResult r = gradcheck(wrong, {gen.normal({4, 3}, 0, 1, DType::F64)});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("analytic"), std::string::npos);
}

TEST(Gradcheck, RefusesSinglePrecisionInputs) {
  TestFn f = [](const std::vector<Variable>& x) { return x[0]; };
  EXPECT_THROW(gradcheck(f, {Tensor::ones({2}, DType::F32)}), DTypeError);
}
