// attn::rotate_by_angles, the op of learned and accumulated RoPE angles: against a slow twin composed
// of autograd ops (cos, sin, mul, narrow, cat; cos and sin as elementwise nodes written here), its
// finite-difference gradients in float64 (x and the angles, forward and inverse, angles per sequence
// or shared over the batch, grouped over the heads), RoPE's own op at position angles, and on CUDA
// the CPU op (skipped without a GPU).
#include <gtest/gtest.h>

#include <cmath>

#include "attention/rope.h"
#include "autograd/functions.h"
#include "autograd/gradcheck.h"
#include "core/device.h"
#include "core/ops.h"
#include "core/rng.h"

using namespace hz;
using namespace hz::attn;

namespace {

// cos or sin of a CPU f64 variable, elementwise, with its derivative (-sin or cos)
ag::Variable trig(const ag::Variable& x, bool sine) {
  const std::vector<double> v = x.value().to_vector();
  std::vector<double> y(v.size()), d(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    y[i] = sine ? std::sin(v[i]) : std::cos(v[i]);
    d[i] = sine ? std::cos(v[i]) : -std::sin(v[i]);
  }
  const Shape s = x.shape();
  const Tensor dt = Tensor::from_vector(d, s, DType::F64);
  return ag::make_result(Tensor::from_vector(y, s, DType::F64), {x}, sine ? "sin" : "cos", [&] {
    return [=](const Tensor& g, ag::Grads& gr) { gr.set(0, ops::mul(g, dt)); };
  });
}

// The twin: angles (Ba, G, T, half) repeated over each group's heads, then
// (a, b) -> mscale (a cos - b sin, a sin + b cos), the angle negated for the inverse.
ag::Variable twin(const ag::Variable& x, const ag::Variable& angles, double mscale, bool inverse) {
  const int64_t H = x.size(1), T = x.size(2), half = x.size(3) / 2;
  const int64_t Ba = angles.size(0), G = angles.size(1);
  ag::Variable a = ag::reshape(
      ag::expand(ag::reshape(angles, {Ba, G, 1, T, half}), {Ba, G, H / G, T, half}), {Ba, H, T, half});
  if (inverse) a = ag::neg(a);
  const ag::Variable c = ag::mul_scalar(trig(a, false), mscale), s = ag::mul_scalar(trig(a, true), mscale);
  const ag::Variable x1 = ag::narrow(x, 3, 0, half), x2 = ag::narrow(x, 3, half, half);
  return ag::cat({ag::sub(ag::mul(x1, c), ag::mul(x2, s)), ag::add(ag::mul(x1, s), ag::mul(x2, c))}, 3);
}

double max_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  EXPECT_EQ(x.size(), y.size());
  double m = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

struct Shape4 {
  int64_t B, H, T, D, Ba, G;
};
const Shape4 kShapes[] = {{2, 4, 5, 6, 2, 2}, {2, 4, 5, 6, 1, 1}, {1, 3, 7, 4, 1, 3}, {3, 2, 3, 8, 3, 1}};

}  // namespace

TEST(RotateByAngles, EqualsTheComposedTwinWithItsGradients) {
  for (const Shape4& s : kShapes)
    for (bool inverse : {false, true}) {
      SCOPED_TRACE(testing::Message() << "B " << s.B << " H " << s.H << " G " << s.G << " Ba " << s.Ba
                                      << (inverse ? " inverse" : ""));
      Generator g(11);
      const Tensor x = g.normal({s.B, s.H, s.T, s.D}, 0, 1, DType::F64);
      const Tensor ang = g.uniform({s.Ba, s.G, s.T, s.D / 2}, -7, 7, DType::F64);
      const Tensor r = g.normal({s.B, s.H, s.T, s.D}, 0, 1, DType::F64);
      auto run = [&](bool op) {
        ag::Variable xv(x.clone(), true), av(ang.clone(), true);
        const ag::Variable y = op ? rotate_by_angles(xv, av, 1.3, inverse) : twin(xv, av, 1.3, inverse);
        ag::sum_all(ag::mul(y, ag::Variable(r))).backward();
        return std::array<Tensor, 3>{y.value(), xv.grad(), av.grad()};
      };
      const auto a = run(true), b = run(false);
      EXPECT_LT(max_diff(a[0], b[0]), 1e-13);
      EXPECT_LT(max_diff(a[1], b[1]), 1e-13);
      EXPECT_LT(max_diff(a[2], b[2]), 1e-12);
      EXPECT_EQ(a[2].dtype(), DType::F64);
    }
}

TEST(RotateByAngles, FiniteDifferenceGradientsInFloat64) {
  for (const Shape4& s : kShapes)
    for (bool inverse : {false, true}) {
      Generator g(12);
      const Tensor x = g.normal({s.B, s.H, s.T, s.D}, 0, 1, DType::F64);
      const Tensor ang = g.uniform({s.Ba, s.G, s.T, s.D / 2}, -4, 4, DType::F64);
      const ag::GradcheckResult res = ag::gradcheck(
          [&](const std::vector<ag::Variable>& in) { return rotate_by_angles(in[0], in[1], 0.8, inverse); }, {x, ang});
      EXPECT_TRUE(res.ok) << res.message;
      EXPECT_EQ(res.checked, x.numel() + ang.numel());
    }
}

TEST(RotateByAngles, PositionAnglesAreRopeAndTheInverseUndoesIt) {
  PositionSpec p;
  p.rope_base = 100;
  p.rope_fraction = 0.5;  // pairs that do not rotate: angle 0
  const int64_t B = 2, H = 4, T = 9, D = 8;
  const RopeFreqs f = rope_frequencies(p, D, T);
  for (DType dt : {DType::F64, DType::F32, DType::BF16}) {
    Generator g(13);
    const Tensor x = g.normal({B, H, T, D}, 0, 1, dt);
    std::vector<double> pos(B * T), ang(B * T * D / 2);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        pos[b * T + t] = static_cast<double>(3 * b + t);
        for (int64_t m = 0; m < D / 2; ++m) ang[(b * T + t) * D / 2 + m] = pos[b * T + t] * f.inv_freq[m];
      }
    const Tensor positions = Tensor::from_vector(pos, {B, T}, DType::I64);
    const Tensor angles = Tensor::from_vector(ang, {B, 1, T, D / 2}, DType::F64);
    const Tensor want = apply_rope(ag::Variable(x), positions, f).value();
    const Tensor got = rotate_by_angles(ag::Variable(x), ag::Variable(angles), f.mscale).value();
    const double tol = dt == DType::F64 ? 1e-14 : dt == DType::F32 ? 1e-6 : 2e-2;
    EXPECT_LT(max_diff(got, want), tol) << dtype_name(dt);
    const Tensor back =
        rotate_by_angles(ag::Variable(got), ag::Variable(angles), 1.0 / f.mscale, /*inverse=*/true).value();
    EXPECT_LT(max_diff(back, x), dt == DType::BF16 ? 5e-2 : tol * 4) << dtype_name(dt);
  }
}

TEST(RotateByAngles, RefusesShapesThatDoNotFit) {
  const Tensor x = Tensor::zeros({2, 4, 5, 6}, DType::F32);
  EXPECT_THROW(ops::rotate_angles(x, Tensor::zeros({2, 3, 5, 3}, DType::F32), 1.0, false), ShapeError);  // 4 % 3
  EXPECT_THROW(ops::rotate_angles(x, Tensor::zeros({2, 2, 4, 3}, DType::F32), 1.0, false), ShapeError);  // T
  EXPECT_THROW(ops::rotate_angles(x, Tensor::zeros({2, 2, 5, 2}, DType::F32), 1.0, false), ShapeError);  // D/2
  EXPECT_THROW(ops::rotate_angles(x, Tensor::zeros({3, 2, 5, 3}, DType::F32), 1.0, false), ShapeError);  // B
  EXPECT_THROW(ops::rotate_angles(x, Tensor::zeros({2, 2, 5, 3}, DType::I64), 1.0, false), DTypeError);
}

TEST(RotateByAnglesCuda, MatchesTheCpuOp) {
  if (!cuda::available())
    GTEST_SKIP() << "no usable CUDA device (" << (cuda::compiled() ? "no GPU/driver visible" : "HZ_CUDA=OFF build")
                 << "); scripts/gpu/gpu_check.sh runs this on a GPU machine";
  for (const Shape4& s : kShapes)
    for (DType dt : {DType::F64, DType::F32, DType::BF16})
      for (bool inverse : {false, true}) {
        SCOPED_TRACE(testing::Message() << dtype_name(dt) << " G " << s.G << " Ba " << s.Ba << (inverse ? " inverse" : ""));
        Generator g(14);
        const DType adt = dt == DType::F64 ? DType::F64 : DType::F32;
        const Tensor x = g.normal({s.B, s.H, s.T, s.D}, 0, 1, dt);
        const Tensor ang = g.uniform({s.Ba, s.G, s.T, s.D / 2}, -7, 7, adt);
        const Tensor r = g.normal({s.B, s.H, s.T, s.D}, 0, 1, dt);
        auto run = [&](Device d) {
          ag::Variable xv(x.to(d), true), av(ang.to(d), true);
          const ag::Variable y = rotate_by_angles(xv, av, 1.1, inverse);
          ag::sum_all(ag::cast(ag::mul(y, ag::Variable(r.to(d))), adt)).backward();
          return std::array<Tensor, 3>{y.value().to(Device::cpu()), xv.grad().to(Device::cpu()),
                                       av.grad().to(Device::cpu())};
        };
        const auto c = run(Device::cpu()), u = run(Device::cuda(0));
        // the same double cos/sin on both; f32/bf16 products round alike up to FMA contraction
        const double tol = dt == DType::F64 ? 1e-12 : dt == DType::F32 ? 1e-5 : 3e-2;
        EXPECT_LT(max_diff(c[0], u[0]), tol);
        EXPECT_LT(max_diff(c[1], u[1]), tol);
        EXPECT_LT(max_diff(c[2], u[2]), tol * 10);
        // deterministic: no atomics in the angles' reduction
        EXPECT_EQ(max_diff(u[2], run(Device::cuda(0))[2]), 0.0);
      }
}
