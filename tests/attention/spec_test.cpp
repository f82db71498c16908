// docs/methods.md test vectors and properties: scale-invariant tables, RoPE scalings (PI, NTK, YaRN,
// p-RoPE), SCOPE scopes, ALiBi slopes, temperatures; AttentionSpec validation messages.
#include <gtest/gtest.h>

#include <cmath>

#include "attention/rope.h"
#include "attention/spec.h"
#include "autograd/gradcheck.h"
#include "core/rng.h"

using namespace hz;
using namespace hz::attn;

TEST(SpecVectors, ScaleInvariantTables) {
  std::vector<double> a, m;
  scale_invariant_tables(10.0, 1001, a, m);
  const struct { int t; double a, m; } v[] = {{0, 1.0, 0.0}, {1, 1.0912, -0.1906}, {10, 1.5448, -1.3863},
                                              {100, 2.4074, -4.7958}, {1000, 3.1985, -9.2302}};
  for (const auto& e : v) {
    EXPECT_NEAR(a[e.t], e.a, 5e-5) << "a_" << e.t;
    EXPECT_NEAR(m[e.t], e.m, 5e-5) << "m_" << e.t;
  }
}

TEST(SpecVectors, ScopeScopes) {
  EXPECT_EQ(scope_windows(4, 16), (std::vector<int64_t>{2, 4, 8, 16}));
  EXPECT_EQ(scope_windows(10, 1024), (std::vector<int64_t>{2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}));
  EXPECT_EQ(scope_windows(3, 100), (std::vector<int64_t>{5, 22, 100}));
  EXPECT_EQ(scope_windows(4, 16, 0.0, 4), (std::vector<int64_t>{4, 4, 8, 16}));
  const auto s32 = scope_windows(32, 4096);  // gamma = 2^(12/32)
  EXPECT_EQ(s32.front(), 2);
  EXPECT_EQ(s32.back(), 4096);  // one head is global: S_H = T
  for (int h = 1; h <= 32; ++h) EXPECT_EQ(s32[h - 1], static_cast<int64_t>(std::ceil(std::pow(2.0, 0.375 * h) - 1e-9))) << h;
  EXPECT_EQ(scope_windows(4, 16, 3.0), (std::vector<int64_t>{3, 9, 16, 16}));  // gamma override, max = T
  // S_max follows the current T unless frozen
  AttentionSpec s;
  s.mask.kind = MaskKind::Scope;
  EXPECT_EQ(s.windows(4, 64).back(), 64);
  s.mask.freeze_scopes = true;
  s.mask.scope_train_len = 16;
  EXPECT_EQ(s.windows(4, 64), (std::vector<int64_t>{2, 4, 8, 16}));
}

TEST(SpecVectors, AlibiSlopes) {
  const auto m8 = alibi_slopes(8);
  for (int h = 1; h <= 8; ++h) EXPECT_DOUBLE_EQ(m8[h - 1], std::pow(2.0, -h));
  const auto m4 = alibi_slopes(4);
  EXPECT_DOUBLE_EQ(m4[0], 0.25);
  EXPECT_DOUBLE_EQ(m4[3], std::pow(2.0, -8));
}

TEST(SpecVectors, Temperatures) {
  EXPECT_NEAR(temperature_beta(0.412, 4.0), 1.0 + 0.412 * std::log(4.0), 1e-15);
  EXPECT_EQ(temperature_beta(0.412, 1.0), 1.0);
  EXPECT_EQ(temperature_beta(0.412, 0.5), 1.0);
  EXPECT_EQ(swan_row_scale(362.0, 0), 1.0);
  EXPECT_NEAR(swan_row_scale(362.0, 1000), std::log(1362.0) / std::log(362.0), 1e-15);
}

TEST(RopeFrequencies, PlainRope) {
  PositionSpec p;
  const RopeFreqs f = rope_frequencies(p, 8, 16);
  for (int m = 0; m < 4; ++m) EXPECT_NEAR(f.inv_freq[m], std::pow(10000.0, -2.0 * m / 8), 1e-15);
  EXPECT_EQ(f.mscale, 1.0);
}

TEST(RopeFrequencies, PositionInterpolationDividesEveryFrequency) {
  PositionSpec p;
  p.scaling = RopeScaling::PI;
  p.factor = 4;
  const RopeFreqs f = rope_frequencies(p, 8, 64), g = rope_frequencies(PositionSpec{}, 8, 64);
  for (int m = 0; m < 4; ++m) EXPECT_NEAR(f.inv_freq[m], g.inv_freq[m] / 4, 1e-15);
}

TEST(RopeFrequencies, NtkKeepsFastestAndInterpolatesSlowest) {
  PositionSpec p;
  p.scaling = RopeScaling::NTK;
  p.factor = 8;
  const int D = 64;
  const RopeFreqs f = rope_frequencies(p, D, 128), g = rope_frequencies(PositionSpec{}, D, 128);
  EXPECT_DOUBLE_EQ(f.inv_freq[0], 1.0);
  // base' = base s^(D/(D-2)): the lowest pair's frequency becomes exactly w / s
  EXPECT_NEAR(f.inv_freq[D / 2 - 1], g.inv_freq[D / 2 - 1] / 8, 1e-15);
  const double base2 = 10000.0 * std::pow(8.0, 64.0 / 62.0);
  for (int m = 0; m < D / 2; ++m) EXPECT_NEAR(f.inv_freq[m], std::pow(base2, -2.0 * m / D), 1e-14);
}

TEST(RopeFrequencies, DynamicNtkFollowsCurrentLength) {
  PositionSpec p;
  p.scaling = RopeScaling::DynamicNTK;
  p.original_context = 100;
  const RopeFreqs at_train = rope_frequencies(p, 16, 100), longer = rope_frequencies(p, 16, 400);
  const RopeFreqs plain = rope_frequencies(PositionSpec{}, 16, 100);
  for (int m = 0; m < 8; ++m) EXPECT_DOUBLE_EQ(at_train.inv_freq[m], plain.inv_freq[m]);  // s <= 1
  EXPECT_NEAR(longer.inv_freq[7], plain.inv_freq[7] / 4, 1e-15);
}

TEST(RopeFrequencies, YarnRampsAndTemperature) {
  PositionSpec p;
  p.scaling = RopeScaling::YaRN;
  p.factor = 4;
  p.original_context = 1024;
  const int D = 64;
  const RopeFreqs f = rope_frequencies(p, D, 4096), g = rope_frequencies(PositionSpec{}, D, 4096);
  const double two_pi = 2 * M_PI;
  int fast = 0, slow = 0, mid = 0;
  for (int m = 0; m < D / 2; ++m) {
    const double r = 1024 * g.inv_freq[m] / two_pi;  // rotations over the training length
    if (r >= 32) { EXPECT_DOUBLE_EQ(f.inv_freq[m], g.inv_freq[m]); ++fast; }
    else if (r <= 1) { EXPECT_NEAR(f.inv_freq[m], g.inv_freq[m] / 4, 1e-18); ++slow; }
    else {
      const double ramp = (r - 1) / 31;
      EXPECT_NEAR(f.inv_freq[m], (1 - ramp) * g.inv_freq[m] / 4 + ramp * g.inv_freq[m], 1e-15);
      ++mid;
    }
  }
  EXPECT_GT(fast, 0);
  EXPECT_GT(slow, 0);
  EXPECT_GT(mid, 0);
  EXPECT_NEAR(f.mscale, 0.1 * std::log(4.0) + 1, 1e-15);
  // s <= 1: identity
  p.factor = 1;
  const RopeFreqs id = rope_frequencies(p, D, 1024);
  EXPECT_EQ(id.mscale, 1.0);
  for (int m = 0; m < D / 2; ++m) EXPECT_DOUBLE_EQ(id.inv_freq[m], g.inv_freq[m]);
}

TEST(RopeFrequencies, PartialRope) {
  PositionSpec p;
  p.kind = PosKind::PRope;
  p.prope_fraction = 0.5;
  p.prope_base_eff = 1024;
  const RopeFreqs f = rope_frequencies(p, 32, 64);  // 16 pairs, 8 rotate
  EXPECT_DOUBLE_EQ(f.inv_freq[0], 1.0);
  EXPECT_NEAR(f.inv_freq[7], 1.0 / 1024, 1e-15);
  for (int m = 1; m < 8; ++m) EXPECT_NEAR(f.inv_freq[m] / f.inv_freq[m - 1], std::pow(1024.0, -1.0 / 7), 1e-12);
  for (int m = 8; m < 16; ++m) EXPECT_EQ(f.inv_freq[m], 0.0);
}

// Per-dimension RoPE control: which pairs rotate, at the frequencies they had; the others are
// exact NoPE dimensions (rotating a vector leaves them untouched).
TEST(RopeFrequencies, ChosenPairsRotateTheRestAreNoPE) {
  PositionSpec p;
  p.rope_base = 100.0;
  const RopeFreqs all = rope_frequencies(p, 16, 32);
  auto rotating = [&](const PositionSpec& s) {
    const RopeFreqs f = rope_frequencies(s, 16, 32);
    std::vector<int64_t> on;
    for (int64_t m = 0; m < 8; ++m) {
      if (f.inv_freq[m] != 0.0) {
        EXPECT_EQ(f.inv_freq[m], all.inv_freq[m]) << "pair " << m;
        on.push_back(m);
      }
    }
    return on;
  };
  p.rope_fraction = 0.25;
  EXPECT_EQ(rotating(p), (std::vector<int64_t>{0, 1}));  // high: HoPE's fastest pairs
  p.rope_select = RopeSelect::Low;
  EXPECT_EQ(rotating(p), (std::vector<int64_t>{6, 7}));
  p.rope_select = RopeSelect::Uniform;
  p.rope_fraction = 0.5;
  EXPECT_EQ(rotating(p), (std::vector<int64_t>{0, 2, 4, 6}));
  p.rope_fraction = 0.0;
  EXPECT_TRUE(rotating(p).empty());
  p.rope_pairs = {7, 3};  // an explicit list wins over the fraction
  EXPECT_EQ(rotating(p), (std::vector<int64_t>{3, 7}));
  // YaRN-scaled frequencies keep their scaling on the pairs that rotate
  PositionSpec y;
  y.scaling = RopeScaling::YaRN;
  y.factor = 4;
  y.original_context = 16;
  const RopeFreqs ya = rope_frequencies(y, 16, 64);
  y.rope_fraction = 0.5;
  const RopeFreqs yp = rope_frequencies(y, 16, 64);
  for (int64_t m = 0; m < 8; ++m) EXPECT_EQ(yp.inv_freq[m], m < 4 ? ya.inv_freq[m] : 0.0);
  // rotating x: the dimensions of non-rotating pairs (m and m + D/2) come back unchanged
  PositionSpec h;
  h.rope_pairs = {1, 5};
  const RopeFreqs f = rope_frequencies(h, 16, 32);
  Generator g(3);
  const Tensor x = g.normal({1, 1, 6, 16}, 0, 1, DType::F64);
  const std::vector<double> a = x.to_vector(), b = rope_rotate(x, Tensor::arange(10, 16), f, false).to_vector();
  int changed = 0;
  for (int64_t t = 0; t < 6; ++t)
    for (int64_t d = 0; d < 16; ++d) {
      const int64_t m = d % 8;
      if (m == 1 || m == 5) changed += a[t * 16 + d] != b[t * 16 + d];
      else EXPECT_EQ(a[t * 16 + d], b[t * 16 + d]) << "t " << t << " d " << d;
    }
  EXPECT_EQ(changed, 6 * 4);
  // validation names the field
  AttentionSpec s;
  s.pos.rope_pairs = {8};
  EXPECT_THROW(s.validate(4, 4, 16, 32), ValueError);
  s.pos.rope_pairs = {};
  s.pos.rope_fraction = 1.5;
  EXPECT_THROW(s.validate(4, 4, 16, 32), ValueError);
}

// Per-pair frequency factors (issue 38): w_m <- w_m * m_m after every scaling and pair selection.
TEST(RopeFrequencies, PerPairFactorsMultiplyEachFrequency) {
  PositionSpec p;
  p.rope_base = 500.0;
  const RopeFreqs plain = rope_frequencies(p, 16, 32);
  p.rope_freq_factors = {1.0, 0.5, 0.25, 1.0, 2.0, 0.0, 1.0, 0.125};
  const RopeFreqs f = rope_frequencies(p, 16, 32);
  for (int64_t m = 0; m < 8; ++m) EXPECT_EQ(f.inv_freq[m], plain.inv_freq[m] * p.rope_freq_factors[m]) << m;
  EXPECT_EQ(f.inv_freq[5], 0.0);  // a factor 0 stops the pair: it acts as a NoPE dimension
  // 1/s everywhere is position interpolation, to rounding
  PositionSpec pi, by_factors;
  pi.scaling = RopeScaling::PI;
  pi.factor = 4;
  by_factors.rope_freq_factors.assign(8, 0.25);
  const RopeFreqs a = rope_frequencies(pi, 16, 64), b = rope_frequencies(by_factors, 16, 64);
  for (int64_t m = 0; m < 8; ++m) EXPECT_NEAR(b.inv_freq[m], a.inv_freq[m], 1e-16 * std::abs(a.inv_freq[m]) + 1e-300) << m;
  // after a scaling and a pair selection: the factors multiply what they leave
  PositionSpec y;
  y.scaling = RopeScaling::YaRN;
  y.factor = 4;
  y.original_context = 16;
  y.rope_fraction = 0.5;
  const RopeFreqs ya = rope_frequencies(y, 16, 64);
  y.rope_freq_factors.assign(8, 3.0);
  const RopeFreqs yf = rope_frequencies(y, 16, 64);
  for (int64_t m = 0; m < 8; ++m) EXPECT_EQ(yf.inv_freq[m], ya.inv_freq[m] * 3.0) << m;
  EXPECT_EQ(yf.mscale, ya.mscale);
  // validation: one factor per pair, finite, >= 0, on a RoPE layer
  AttentionSpec s;
  s.pos.rope_freq_factors = {1, 1, 1};
  EXPECT_THROW(s.validate(4, 4, 16, 32), ValueError);
  s.pos.rope_freq_factors.assign(8, 1.0);
  EXPECT_NO_THROW(s.validate(4, 4, 16, 32));
  s.pos.rope_freq_factors[2] = -1;
  EXPECT_THROW(s.validate(4, 4, 16, 32), ValueError);
  s.pos.rope_freq_factors[2] = NAN;
  EXPECT_THROW(s.validate(4, 4, 16, 32), ValueError);
  s.pos.rope_freq_factors[2] = 1;
  s.pos.kind = PosKind::None;
  EXPECT_THROW(s.validate(4, 4, 16, 32), ValueError);
}

TEST(Rope, DotProductDependsOnlyOnRelativePosition) {
  Generator g(3);
  const Tensor q = g.normal({1, 1, 1, 16}, 0, 1, DType::F64), k = g.normal({1, 1, 1, 16}, 0, 1, DType::F64);
  const RopeFreqs f = rope_frequencies(PositionSpec{}, 16, 64);
  auto dot = [&](int64_t pq, int64_t pk) {
    const Tensor a = rope_rotate(q, Tensor::from_vector({double(pq)}, {1}, DType::I64), f, false);
    const Tensor b = rope_rotate(k, Tensor::from_vector({double(pk)}, {1}, DType::I64), f, false);
    double s = 0;
    for (int d = 0; d < 16; ++d) s += a.at({0, 0, 0, d}) * b.at({0, 0, 0, d});
    return s;
  };
  EXPECT_NEAR(dot(10, 3), dot(107, 100), 1e-10);
  EXPECT_NEAR(dot(5, 5), dot(0, 0), 1e-12);
  EXPECT_GT(std::abs(dot(10, 3) - dot(10, 4)), 1e-6);
}

// Float positions: integral ones rotate exactly as the integer ids; others by p w_m, pair by pair.
TEST(Rope, FloatPositionsRotateBetweenTheIntegerAngles) {
  Generator g(5);
  const Tensor x = g.normal({2, 1, 3, 8}, 0, 1, DType::F64);
  const RopeFreqs f = rope_frequencies(PositionSpec{}, 8, 64);
  const std::vector<double> ids{0, 7, 3, 40, 2, 9};
  const Tensor a = rope_rotate(x, Tensor::from_vector(ids, {2, 3}, DType::I64), f, false);
  const Tensor b = rope_rotate(x, Tensor::from_vector(ids, {2, 3}, DType::F64), f, false);
  EXPECT_EQ(a.to_vector(), b.to_vector());
  const std::vector<double> real{0.5, 7.25, 3.125, 40.75, 2.0, 9.9};
  const Tensor r = rope_rotate(x, Tensor::from_vector(real, {2, 3}, DType::F64), f, false);
  for (int64_t b2 = 0; b2 < 2; ++b2)
    for (int64_t t = 0; t < 3; ++t)
      for (int64_t m = 0; m < 4; ++m) {
        const double ang = real[b2 * 3 + t] * f.inv_freq[m], x1 = x.at({b2, 0, t, m}), x2 = x.at({b2, 0, t, m + 4});
        EXPECT_NEAR(r.at({b2, 0, t, m}), x1 * std::cos(ang) - x2 * std::sin(ang), 1e-14);
        EXPECT_NEAR(r.at({b2, 0, t, m + 4}), x1 * std::sin(ang) + x2 * std::cos(ang), 1e-14);
      }
  // and the inverse rotation undoes it (the backward)
  const Tensor back = rope_rotate(r, Tensor::from_vector(real, {2, 3}, DType::F64), f, true);
  for (size_t i = 0; i < back.to_vector().size(); ++i) EXPECT_NEAR(back.to_vector()[i], x.to_vector()[i], 1e-14);
}

TEST(Rope, DropIsExactIdentityAndYarnScalesLogitsBySquare) {
  Generator g(4);
  const Tensor x = g.normal({1, 2, 5, 8}, 0, 1, DType::F64);
  PositionSpec none;
  none.kind = PosKind::None;
  const Tensor same = rope_rotate(x, Tensor::arange(0, 5), rope_frequencies(none, 8, 5), false);
  EXPECT_EQ(same.to_vector(), x.to_vector());
  PositionSpec y;
  y.scaling = RopeScaling::YaRN;
  y.factor = 8;
  y.original_context = 4;
  const RopeFreqs f = rope_frequencies(y, 8, 32);
  const Tensor r = rope_rotate(x, Tensor::arange(0, 5), f, false);
  // same position for q and k: rotation cancels, logits scale by mscale^2
  double a = 0, b = 0;
  for (int d = 0; d < 8; ++d) {
    a += r.at({0, 0, 3, d}) * r.at({0, 1, 3, d});
    b += x.at({0, 0, 3, d}) * x.at({0, 1, 3, d});
  }
  EXPECT_NEAR(a, b * f.mscale * f.mscale, 1e-12);
}

TEST(Rope, Gradcheck) {
  PositionSpec p;
  p.rope_base = 30;
  const RopeFreqs f = rope_frequencies(p, 6, 7);
  const Tensor pos = Tensor::from_vector({3, 0, 9, 1, 1, 20, 5}, {7}, DType::I64);
  Generator g(5);
  auto r = ag::gradcheck([&](const std::vector<ag::Variable>& x) { return apply_rope(x[0], pos, f); },
                         {g.normal({2, 2, 7, 6}, 0, 1, DType::F64)});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(SpecValidate, RefusesImpossibleConfigsWithAdvice) {
  AttentionSpec s;
  auto msg = [&](int64_t H, int64_t Hkv, int64_t D, int64_t T) {
    try {
      s.validate(H, Hkv, D, T);
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(msg(8, 2, 64, 128), "");
  EXPECT_NE(msg(8, 3, 64, 128).find("divisible"), std::string::npos);
  EXPECT_NE(msg(8, 8, 63, 128).find("even"), std::string::npos);
  s.mask.kind = MaskKind::Window;
  s.mask.window = 256;
  EXPECT_NE(msg(8, 8, 64, 128).find("exceeds the context"), std::string::npos);
  s.mask.window = 0;
  EXPECT_NE(msg(8, 8, 64, 128).find("positive"), std::string::npos);
  s.mask = MaskSpec{};
  s.mask.kind = MaskKind::Scope;
  s.mask.scopes = {1, 2, 3};
  EXPECT_NE(msg(4, 4, 64, 128).find("one per head"), std::string::npos);
  s.mask = MaskSpec{};
  s.pos.scaling = RopeScaling::YaRN;
  s.pos.kind = PosKind::Alibi;
  EXPECT_NE(msg(4, 4, 64, 128).find("needs position encoding 'rope'"), std::string::npos);
  EXPECT_THROW(parse_mask("sliding"), ValueError);
  EXPECT_EQ(parse_logit("scale_invariant"), LogitKind::ScaleInvariant);
  EXPECT_EQ(parse_scaling("yarn"), RopeScaling::YaRN);
}
