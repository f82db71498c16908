// AdamW against a double-precision reference written out by hand (bias correction, decoupled
// decay applied before the update), lr_mult, groups, params without grads, validation.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "optim/optimizer.h"
#include "tests/core/test_util.h"
#include "tests/optim/optim_test_util.h"

using namespace hz;
using namespace hz::optim;
using namespace hz::optim::testing;

namespace {

// Closed form for one scalar over three steps with grads g1, g2, g3 (b1, b2, eps, lr_t, wd):
//   m_t = (1-b1) sum_k b1^(t-k) g_k,  v_t = (1-b2) sum_k b2^(t-k) g_k^2
//   p_t = p_{t-1} (1 - lr_t wd) - lr_t (m_t / (1 - b1^t)) / (sqrt(v_t / (1 - b2^t)) + eps)
double closed_form(double p0, const double g[3], const double lr[3], double wd, double b1, double b2,
                   double eps) {
  const double m1 = (1 - b1) * g[0];
  const double m2 = (1 - b1) * (b1 * g[0] + g[1]);
  const double m3 = (1 - b1) * (b1 * b1 * g[0] + b1 * g[1] + g[2]);
  const double v1 = (1 - b2) * g[0] * g[0];
  const double v2 = (1 - b2) * (b2 * g[0] * g[0] + g[1] * g[1]);
  const double v3 = (1 - b2) * (b2 * b2 * g[0] * g[0] + b2 * g[1] * g[1] + g[2] * g[2]);
  double p = p0;
  p = p * (1 - lr[0] * wd) - lr[0] * (m1 / (1 - b1)) / (std::sqrt(v1 / (1 - b2)) + eps);
  p = p * (1 - lr[1] * wd) - lr[1] * (m2 / (1 - b1 * b1)) / (std::sqrt(v2 / (1 - b2 * b2)) + eps);
  p = p * (1 - lr[2] * wd) - lr[2] * (m3 / (1 - b1 * b1 * b1)) / (std::sqrt(v3 / (1 - b2 * b2 * b2)) + eps);
  return p;
}

struct AdamCase { DType dt; double tol; };
class AdamWVsClosedForm : public ::testing::TestWithParam<AdamCase> {};

TEST_P(AdamWVsClosedForm, ThreeStepsScalarsAndMatrix) {
  const auto pc = GetParam();
  // scalar params (shape () and (1)), a 2x3 matrix; two groups with different lr and decay
  ag::Variable s0 = make_param({0.5}, {}, pc.dt);
  ag::Variable s1 = make_param({-1.25}, {1}, pc.dt);
  const std::vector<double> w0 = {0.3, -0.7, 1.1, 0.0, 2.5, -0.05};
  ag::Variable w = make_param(w0, {2, 3}, pc.dt);
  const double lr_a = 0.01, wd_a = 0.1, lr_b = 0.003, wd_b = 0.0;
  AdamW opt({ParamGroup{"a", {{"s0", &s0}, {"w", &w}}, lr_a, wd_a}, ParamGroup{"b", {{"s1", &s1}}, lr_b, wd_b}},
            AdamWOptions{0.9, 0.95, 1e-8});
  EXPECT_EQ(opt.name(), "adamw");
  const double mult[3] = {1.0, 0.5, 2.0};  // lr_mult honoured
  const double gs0[3] = {0.1, -0.2, 0.3}, gs1[3] = {1e-3, 1e-3, -5.0};
  double gw[6][3];
  for (int i = 0; i < 6; ++i)
    for (int s = 0; s < 3; ++s) gw[i][s] = std::sin(1.0 + i * 0.7 + s * 1.3) * (i + 1);
  for (int s = 0; s < 3; ++s) {
    set_grad(s0, {gs0[s]});
    set_grad(s1, {gs1[s]});
    std::vector<double> g(6);
    for (int i = 0; i < 6; ++i) g[i] = gw[i][s];
    set_grad(w, g);
    opt.step(mult[s]);
  }
  EXPECT_EQ(opt.step_count(), 3);
  auto rd = [&](double v) { return pc.dt == DType::F32 ? static_cast<double>(static_cast<float>(v)) : v; };
  const double la[3] = {lr_a * mult[0], lr_a * mult[1], lr_a * mult[2]};
  const double lb[3] = {lr_b * mult[0], lr_b * mult[1], lr_b * mult[2]};
  const double g0r[3] = {rd(gs0[0]), rd(gs0[1]), rd(gs0[2])}, g1r[3] = {rd(gs1[0]), rd(gs1[1]), rd(gs1[2])};
  EXPECT_NEAR(s0.item(), closed_form(rd(0.5), g0r, la, wd_a, 0.9, 0.95, 1e-8), pc.tol);
  EXPECT_NEAR(s1.item(), closed_form(rd(-1.25), g1r, lb, wd_b, 0.9, 0.95, 1e-8), pc.tol);
  auto wv = w.value().to_vector();
  for (int i = 0; i < 6; ++i) {
    const double gi[3] = {rd(gw[i][0]), rd(gw[i][1]), rd(gw[i][2])};
    EXPECT_NEAR(wv[i], closed_form(rd(w0[i]), gi, la, wd_a, 0.9, 0.95, 1e-8), pc.tol) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, AdamWVsClosedForm,
                         ::testing::Values(AdamCase{DType::F64, 1e-14}, AdamCase{DType::F32, 1e-6}));

TEST(AdamW, FirstStepIsSignStep) {
  // t = 1: m/(1-b1) = g and v/(1-b2) = g^2, so the update is lr * g / (|g| + eps).
  ag::Variable p = make_param({1.0, -2.0, 3.0}, {3});
  set_grad(p, {0.5, -4.0, 0.0});
  AdamW opt({ParamGroup{"g", {{"p", &p}}, 0.1, 0.2}});
  opt.step();
  auto v = p.value().to_vector();
  EXPECT_NEAR(v[0], 1.0 * (1 - 0.02) - 0.1 * 0.5 / (0.5 + 1e-8), 1e-15);
  EXPECT_NEAR(v[1], -2.0 * (1 - 0.02) + 0.1 * 4.0 / (4.0 + 1e-8), 1e-15);
  EXPECT_NEAR(v[2], 3.0 * (1 - 0.02), 1e-15);  // zero grad: only the decay
}

TEST(AdamW, DecayIsAppliedBeforeTheUpdate) {
  // With a huge decay the two orders differ visibly: decay-then-update gives p(1 - lr wd) - lr u.
  ag::Variable p = make_param({2.0}, {1});
  set_grad(p, {1.0});
  AdamW opt({ParamGroup{"g", {{"p", &p}}, 0.5, 1.0}});
  opt.step();
  const double u = 1.0 / (1.0 + 1e-8);
  EXPECT_NEAR(p.item(), 2.0 * 0.5 - 0.5 * u, 1e-14);      // decay first: 0.5
  EXPECT_GT(std::abs(p.item() - (2.0 - 0.5 * u) * 0.5), 0.2);  // update first would give 0.75
}

TEST(AdamW, ParamsWithoutGradUntouched) {
  ag::Variable a = make_param({1.0, 2.0}, {2}, DType::F32);
  ag::Variable b = make_param({3.0, 4.0}, {2}, DType::F32);
  set_grad(a, {0.1, 0.1});
  AdamW opt({ParamGroup{"g", {{"a", &a}, {"b", &b}}, 0.1, 0.5}});
  const auto b0 = b.value().to_vector();
  opt.step();
  opt.step();
  EXPECT_EQ(b.value().to_vector(), b0);  // bitwise: not even decayed
  EXPECT_TRUE(hzt::differs(a.value().to_vector(), {1.0, 2.0}, hzt::kValuesDiffer));
  std::map<std::string, Tensor> sd;
  opt.state_dict(sd);
  for (double v : sd.at("adamw/b/exp_avg").to_vector()) EXPECT_EQ(v, 0.0);
  for (double v : sd.at("adamw/b/exp_avg_sq").to_vector()) EXPECT_EQ(v, 0.0);
  EXPECT_GT(sd.at("adamw/a/exp_avg_sq").to_vector()[0], 0.0);
  EXPECT_EQ(sd.at("adamw/step").dtype(), DType::I64);
  EXPECT_EQ(sd.at("adamw/step").dim(), 0);
  EXPECT_EQ(sd.at("adamw/step").item(), 2.0);
}

TEST(AdamW, ZeroLrMultChangesNothingButState) {
  ag::Variable p = make_param({1.0, -1.0}, {2});
  set_grad(p, {0.3, 0.4});
  AdamW opt({ParamGroup{"g", {{"p", &p}}, 0.1, 0.1}});
  opt.step(0.0);
  EXPECT_EQ(p.value().to_vector(), std::vector<double>({1.0, -1.0}));
  EXPECT_EQ(opt.step_count(), 1);
  EXPECT_THROW(opt.step(-1.0), ValueError);
  EXPECT_THROW(opt.step(std::nan("")), ValueError);
}

TEST(AdamW, NonContiguousGradIsReadCorrectly) {
  // a transposed (strided) gradient must be read by logical index
  ag::Variable p = make_param({0, 0, 0, 0, 0, 0}, {2, 3});
  p.grad() = Tensor::from_vector({1, -2, 3, -4, 5, -6}, {3, 2}, DType::F64).transpose(0, 1);
  ASSERT_FALSE(p.grad().is_contiguous());
  AdamW opt({ParamGroup{"g", {{"p", &p}}, 1.0, 0.0}});
  opt.step();
  // first step: -lr * sign(g); g as (2,3) = [[1,3,5],[-2,-4,-6]]
  const std::vector<double> want = {-1, -1, -1, 1, 1, 1};
  auto got = p.value().to_vector();
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(got[i], want[i], 1e-7);
}

TEST(AdamW, Validation) {
  ag::Variable a = make_param({1.0}, {1});
  ag::Variable bf = ag::Variable(Tensor::zeros({2}, DType::BF16), true);
  EXPECT_THROW(AdamW({ParamGroup{"g", {{"a", &a}, {"a", &a}}}}), ValueError);    // repeated name
  ag::Variable b = make_param({1.0}, {1});
  EXPECT_THROW(AdamW({ParamGroup{"g", {{"a", &a}}}, ParamGroup{"h", {{"a", &b}}}}), ValueError);  // across groups
  EXPECT_THROW(AdamW({ParamGroup{"g", {{"a", &a}, {"a2", &a}}}}), ValueError);   // same Variable twice
  EXPECT_THROW(AdamW({ParamGroup{"g", {{"", &a}}}}), ValueError);
  EXPECT_THROW(AdamW({ParamGroup{"g", {{"a", nullptr}}}}), ValueError);
  EXPECT_THROW(AdamW({ParamGroup{"g", {{"bf", &bf}}}}), DTypeError);
  EXPECT_THROW(AdamW({ParamGroup{"g", {{"a", &a}}, -1.0}}), ValueError);
  EXPECT_THROW(AdamW({ParamGroup{"g", {{"a", &a}}, 1e-3, -0.1}}), ValueError);
  EXPECT_THROW(AdamW({ParamGroup{"g", {{"a", &a}}}}, AdamWOptions{1.0, 0.95, 1e-8}), ValueError);
  EXPECT_THROW(AdamW({ParamGroup{"g", {{"a", &a}}}}, AdamWOptions{0.9, 0.95, 0.0}), ValueError);
  // a grad of the wrong shape is refused at step time, naming the parameter
  AdamW ok({ParamGroup{"g", {{"a", &a}}}});
  a.grad() = Tensor::zeros({2}, DType::F64);
  try {
    ok.step();
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("'a'"), std::string::npos) << e.what();
  }
}

TEST(Optimizer, ZeroGradDropsGrads) {
  ag::Variable a = make_param({1.0}, {1});
  set_grad(a, {1.0});
  AdamW opt({ParamGroup{"g", {{"a", &a}}}});
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
}

}  // namespace
