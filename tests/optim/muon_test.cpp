// Muon and its Newton-Schulz orthogonalisation against plain-loop double references.
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

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

TEST(JacobiHelper, KnownSingularValues) {
  Mat m(3, 2);
  // rows (3, 0), (0, 4), (0, 0) rotated by a 2x2 rotation on the right: singular values 3 and 4
  const double c = std::cos(0.3), s = std::sin(0.3);
  m(0, 0) = 3 * c; m(0, 1) = -3 * s;
  m(1, 0) = 4 * s; m(1, 1) = 4 * c;
  auto sv = singular_values(m);
  ASSERT_EQ(sv.size(), 2u);
  EXPECT_NEAR(sv[0], 3.0, 1e-12);
  EXPECT_NEAR(sv[1], 4.0, 1e-12);
}

// Singular values of NS(G) for Gaussian G: the quintic with (3.4445, -4.7750, 2.0315) leaves
// them in about [0.68, 1.13] after 5 steps (measured: mean 0.83 for 20x50, 0.85 for 50x20 with
// these seeds). A classic cubic iteration (1.5, -0.5, 0) stays below 1; c = 2.0 gives mean 0.79;
// small typos in b or c blow up; no normalisation gives 0.
struct NsBandCase { int64_t rows, cols; DType dt; };
class NewtonSchulzBand : public ::testing::TestWithParam<NsBandCase> {};

TEST_P(NewtonSchulzBand, SingularValuesInQuinticBand) {
  const auto p = GetParam();
  Generator gen(1);
  Tensor G = gen.normal({p.rows, p.cols}, 0.0, 1.0, p.dt);
  Tensor X = newton_schulz(G, 5);
  ASSERT_EQ(X.shape(), G.shape());
  ASSERT_EQ(X.dtype(), p.dt);
  const auto in = singular_values(from_tensor(G));
  EXPECT_GT(in.back() / in.front(), 3.0);  // the input is far from orthogonal
  const auto sv = singular_values(from_tensor(X));
  ASSERT_EQ(static_cast<int64_t>(sv.size()), std::min(p.rows, p.cols));
  double mean = 0.0;
  for (double s : sv) mean += s;
  mean /= static_cast<double>(sv.size());
  EXPECT_GE(sv.front(), 0.6);
  EXPECT_GE(sv.back(), 1.05);
  EXPECT_LE(sv.back(), 1.2);
  EXPECT_GE(mean, 0.8);
  EXPECT_LE(mean, 0.9);
}

INSTANTIATE_TEST_SUITE_P(Shapes, NewtonSchulzBand,
                         ::testing::Values(NsBandCase{20, 50, DType::F64}, NsBandCase{50, 20, DType::F64},
                                           NsBandCase{20, 50, DType::F32}, NsBandCase{50, 20, DType::F32}));

// The library's transpose-flag formulation equals the literal iteration of docs/methods.md (explicit transposes).
TEST(NewtonSchulz, MatchesLiteralReference) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{7, 3}, {3, 7}, {5, 5}, {1, 4}, {4, 1}, {20, 50}, {50, 20}};
  for (const auto& [r, c] : shapes)
    for (int steps : {0, 1, 5}) {
      Generator gen(r * 100 + c);
      Tensor G = gen.normal({r, c}, 0.0, 2.0, DType::F64);
      Mat ref = ref_newton_schulz(from_tensor(G), steps);
      EXPECT_LT(max_abs_diff(newton_schulz(G, steps).to_vector(), ref.v), 1e-12)
          << r << "x" << c << " steps " << steps;
      // f32: within f32 rounding of the double reference
      Tensor G32 = G.to(DType::F32);
      Mat ref32 = ref_newton_schulz(from_tensor(G32), steps);
      EXPECT_LT(max_abs_diff(newton_schulz(G32, steps).to_vector(), ref32.v), 1e-5)
          << r << "x" << c << " steps " << steps << " f32";
    }
}

TEST(NewtonSchulz, ZeroMatrixStaysZeroAndInputUntouched) {
  Tensor Z = Tensor::zeros({3, 4}, DType::F64);
  for (double v : newton_schulz(Z).to_vector()) EXPECT_EQ(v, 0.0);
  Tensor G = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, DType::F64);
  auto before = G.to_vector();
  newton_schulz(G);
  EXPECT_EQ(G.to_vector(), before);
}

TEST(NewtonSchulz, RejectsBadInput) {
  EXPECT_THROW(newton_schulz(Tensor::zeros({2, 3, 4}, DType::F32)), ShapeError);
  EXPECT_THROW(newton_schulz(Tensor::zeros({4}, DType::F32)), ShapeError);
  EXPECT_THROW(newton_schulz(Tensor::zeros({2, 2}, DType::I64)), DTypeError);
  EXPECT_THROW(newton_schulz(Tensor::zeros({2, 2}, DType::F32), -1), ValueError);
}

// ---- Muon vs an independent double reference ------------------------------------------------

struct RefMuon {
  Mat W, B;
  double mu;
  bool nesterov;
  void step(const Mat& G, double lr, double wd) {
    for (size_t i = 0; i < B.v.size(); ++i) B.v[i] = mu * B.v[i] + (1 - mu) * G.v[i];
    Mat U = B;
    if (nesterov)
      for (size_t i = 0; i < U.v.size(); ++i) U.v[i] = (1 - mu) * G.v[i] + mu * B.v[i];
    Mat O = ref_newton_schulz(U, 5);
    const double sc = std::sqrt(std::max(1.0, static_cast<double>(W.r) / static_cast<double>(W.c)));
    for (size_t i = 0; i < W.v.size(); ++i) {
      W.v[i] *= 1 - lr * wd;  // decay first (documented order)
      W.v[i] -= lr * sc * O.v[i];
    }
  }
};

struct MuonCase { bool nesterov; double momentum; DType dt; double tol; };
class MuonVsReference : public ::testing::TestWithParam<MuonCase> {};

TEST_P(MuonVsReference, ThreeStepsTallAndWide) {
  const auto pc = GetParam();
  // tall (rows > cols: scale sqrt(6/4)), wide, and square, in two groups with their own lr / wd
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{6, 4}, {3, 5}, {4, 4}};
  std::vector<ag::Variable> vars;
  std::vector<RefMuon> refs;
  for (size_t k = 0; k < shapes.size(); ++k) {
    const auto [r, c] = shapes[k];
    auto w0 = noise(r * c, 10 + k, 0, 0.5);
    vars.push_back(make_param(w0, {r, c}, pc.dt));
    RefMuon ref{from_tensor(vars.back().value()), Mat(r, c), pc.momentum, pc.nesterov};
    refs.push_back(ref);
  }
  ParamGroup g0{"decay", {{"layers.0.attn.wq.weight", &vars[0]}, {"layers.0.mlp.w1.weight", &vars[1]}}, 0.02, 0.1};
  ParamGroup g1{"no_decay", {{"layers.0.mlp.w2.weight", &vars[2]}}, 0.05, 0.0};
  Muon opt({g0, g1}, MuonOptions{pc.momentum, pc.nesterov, 5});
  const double lr_mult[3] = {1.0, 0.5, 0.25};
  const double lrs[3] = {0.02, 0.02, 0.05}, wds[3] = {0.1, 0.1, 0.0};
  for (int s = 0; s < 3; ++s) {
    for (size_t k = 0; k < vars.size(); ++k) {
      auto g = noise(vars[k].numel(), 20 + k, s + 1);
      set_grad(vars[k], g);
      Mat gm(shapes[k].first, shapes[k].second);
      gm.v = vars[k].grad().to_vector();  // the grad as stored (f32-rounded in f32 runs)
      refs[k].step(gm, lrs[k] * lr_mult[s], wds[k]);
    }
    opt.step(lr_mult[s]);
    EXPECT_EQ(opt.step_count(), s + 1);
    for (size_t k = 0; k < vars.size(); ++k)
      EXPECT_LT(max_abs_diff(vars[k].value().to_vector(), refs[k].W.v), pc.tol)
          << "param " << k << " step " << s;
  }
  // the momentum buffer is in the state dict and matches the reference's
  std::map<std::string, Tensor> sd;
  opt.state_dict(sd);
  EXPECT_LT(max_abs_diff(sd.at("muon/layers.0.attn.wq.weight/momentum_buffer").to_vector(), refs[0].B.v),
            pc.tol);
  EXPECT_EQ(sd.at("muon/step").item(), 3.0);
}

INSTANTIATE_TEST_SUITE_P(
    Variants, MuonVsReference,
    ::testing::Values(MuonCase{true, 0.95, DType::F64, 1e-12}, MuonCase{false, 0.95, DType::F64, 1e-12},
                      MuonCase{true, 0.5, DType::F64, 1e-12}, MuonCase{true, 0.95, DType::F32, 2e-6}));

TEST(Muon, FirstStepClosedForm) {
  // One step from B = 0: B = (1-mu) G, U = (1-mu) G + mu (1-mu) G = (1-mu^2) G, so
  // W1 = W0 (1 - lr wd) - lr sqrt(max(1, r/c)) NS((1-mu^2) G). (NS is scale invariant only up to
  // the 1e-7 in its normaliser: NS(G) itself differs at the 1e-8 level here.)
  for (auto [r, c] : std::vector<std::pair<int64_t, int64_t>>{{8, 2}, {2, 8}}) {
    auto w0 = noise(r * c, 1, 0);
    ag::Variable w = make_param(w0, {r, c});
    set_grad(w, noise(r * c, 2, 0));
    Muon opt({ParamGroup{"g", {{"w", &w}}, 0.1, 0.5}});
    opt.step();
    Mat u = from_tensor(w.grad());
    for (double& e : u.v) e *= 1 - 0.95 * 0.95;
    Mat ns = ref_newton_schulz(u);
    const double sc = r > c ? 2.0 : 1.0;  // sqrt(8/2)
    auto w1 = w.value().to_vector();
    for (size_t i = 0; i < w1.size(); ++i)
      EXPECT_NEAR(w1[i], w0[i] * (1 - 0.1 * 0.5) - 0.1 * sc * ns.v[i], 1e-13);
  }
}

TEST(Muon, RejectsNon2DParamsNamingAdamW) {
  ag::Variable gain = make_param({1, 1, 1}, {3});
  ag::Variable w = make_param({1, 2, 3, 4}, {2, 2});
  try {
    Muon({ParamGroup{"g", {{"w", &w}, {"norm.weight", &gain}}}});
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("norm.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("AdamW"), std::string::npos) << msg;
  }
  EXPECT_THROW(Muon({ParamGroup{"g", {{"w", &w}}}}, MuonOptions{1.0, true, 5}), ValueError);
  EXPECT_THROW(Muon({ParamGroup{"g", {{"w", &w}}}}, MuonOptions{0.9, true, -1}), ValueError);
}

TEST(Muon, SkipsParamsWithoutGrad) {
  ag::Variable a = make_param(noise(6, 1, 0), {2, 3});
  ag::Variable b = make_param(noise(6, 2, 0), {3, 2});
  const auto b0 = b.value().to_vector();
  const auto a0 = a.value().to_vector();
  set_grad(a, noise(6, 3, 0));
  Muon opt({ParamGroup{"g", {{"a", &a}, {"b", &b}}, 0.1, 0.1}});
  opt.step();
  EXPECT_EQ(b.value().to_vector(), b0);  // bitwise: no decay either
  EXPECT_TRUE(hzt::differs(a.value().to_vector(), a0, hzt::kValuesDiffer));
  std::map<std::string, Tensor> sd;
  opt.state_dict(sd);
  for (double v : sd.at("muon/b/momentum_buffer").to_vector()) EXPECT_EQ(v, 0.0);
}

}  // namespace
