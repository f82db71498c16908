// The RoPE base bounds (attention/rope_bounds.h): each bound, solved for the base, puts the slowest
// pair of rope_frequencies exactly on the condition it names.
#include "attention/rope_bounds.h"

#include <gtest/gtest.h>

#include <cmath>

namespace hz::attn {
namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;

double slowest_at_base(double base, int64_t D, int64_t L) {
  PositionSpec p;
  p.rope_base = base;
  return slowest_frequency(rope_frequencies(p, D, L));
}

TEST(RopeBaseBounds, EachBoundPutsTheSlowestPairOnItsCondition) {
  for (int64_t D : {16, 64, 128})
    for (int64_t L : {256, 8192, 131072})
      for (int64_t N : {1, 4, 32}) {
        const double eps = 0.01, eps_mach = std::ldexp(1.0, -23);
        const RopeBaseBounds b = rope_base_bounds(L, D, N, eps, eps_mach);
        // aliasing: the slowest pair turns exactly once over L
        EXPECT_NEAR(L * slowest_at_base(b.aliasing, D, L) / kTwoPi, 1.0, 1e-12) << D << " " << L;
        // stability: its phase's cosine, compounded over N layers, is exactly eps at L
        EXPECT_NEAR(std::pow(std::cos(L * slowest_at_base(b.stability, D, L)), static_cast<double>(N)), eps, 1e-10);
        // precision: one position's phase step is exactly the phase's machine epsilon
        EXPECT_NEAR(slowest_at_base(b.precision, D, L) / eps_mach, 1.0, 1e-12);
        EXPECT_GT(b.stability, b.aliasing);  // arccos(.) <= pi/2 < 2 pi: stability binds
        EXPECT_EQ(b.lower(), b.stability);
      }
}

TEST(RopeBaseBounds, DepthAndLengthTightenTheLowerBound) {
  const double m = std::ldexp(1.0, -23);
  EXPECT_GT(rope_base_bounds(4096, 64, 32, 0.01, m).stability, rope_base_bounds(4096, 64, 4, 0.01, m).stability);
  EXPECT_GT(rope_base_bounds(8192, 64, 4, 0.01, m).stability, rope_base_bounds(4096, 64, 4, 0.01, m).stability);
  EXPECT_GT(rope_base_bounds(4096, 64, 4, 0.5, m).stability, rope_base_bounds(4096, 64, 4, 0.01, m).stability);
  EXPECT_THROW(rope_base_bounds(4096, 64, 0, 0.01, m), ValueError);
  EXPECT_THROW(rope_base_bounds(4096, 64, 4, 1.0, m), ValueError);
  EXPECT_THROW(rope_base_bounds(4096, 63, 4, 0.01, m), ValueError);
}

TEST(RopeBaseBounds, ScaledFrequenciesAreJudgedByTheirEffectiveBase) {
  const int64_t D = 64;
  PositionSpec p;
  EXPECT_NEAR(effective_base(slowest_frequency(rope_frequencies(p, D, 256)), D) / 10000.0, 1.0, 1e-12);
  p.scaling = RopeScaling::PI;  // w / s: the base that gives w_min / s is base * s^(D/(D-2))
  p.factor = 4.0;
  p.original_context = 256;
  EXPECT_NEAR(effective_base(slowest_frequency(rope_frequencies(p, D, 1024)), D) / (10000.0 * std::pow(4.0, 64.0 / 62.0)),
              1.0, 1e-12);
  PositionSpec none;
  none.kind = PosKind::None;
  EXPECT_EQ(slowest_frequency(RopeFreqs{std::vector<double>(8, 0.0)}), 0.0);
}

TEST(RopeBaseBounds, TheTableJudgesEveryRotatingKindAtEachLength) {
  AttentionSpec rope, nope, big;
  nope.pos.kind = PosKind::None;
  big.pos.rope_base = 1e9;
  const double m = std::ldexp(1.0, -23);
  const auto rows = rope_bounds_table({{"rope", rope}, {"nope", nope}, {"big", big}}, 64, 8, 8192, {8192, 65536}, 0.01, m);
  ASSERT_EQ(rows.size(), 4u);  // nope skipped; the training length once
  EXPECT_EQ(rows[0].kind, "rope");
  EXPECT_TRUE(rows[0].training);
  EXPECT_EQ(rows[0].L, 8192);
  EXPECT_EQ(rows[0].verdict, "below the stability bound");  // 10000 < (8192 / arccos(0.01^(1/8)))^(64/62) = 11,262
  EXPECT_EQ(rows[1].L, 65536);
  EXPECT_FALSE(rows[1].training);
  EXPECT_EQ(rows[1].verdict, "below the aliasing bound");
  EXPECT_EQ(rows[2].kind, "big");
  EXPECT_EQ(rows[2].verdict, "above the precision bound");
  EXPECT_EQ(rope_bounds_verdict(1e5, rope_base_bounds(4096, 64, 8, 0.01, m)), "");
}

}  // namespace
}  // namespace hz::attn
