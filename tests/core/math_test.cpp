// The branch-free f32 functions of core/math.h that replace libm calls so loops vectorize: exp_
// and the normal CDF behind GELU, against the double-precision library functions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "core/math.h"

namespace {

TEST(MathF32, ExpMatchesLibraryToFloatPrecision) {
  double worst = 0;
  for (double x = -87.0; x <= 88.0; x += 0.0137) {
    const double want = std::exp(static_cast<double>(static_cast<float>(x)));
    worst = std::max(worst, std::abs(hz::math::exp_(static_cast<float>(x)) - want) / want);
  }
  EXPECT_LT(worst, 4e-7);
  EXPECT_EQ(hz::math::exp_(-INFINITY), 0.0f);
  EXPECT_EQ(hz::math::exp_(-100.0f), 0.0f);
}

// Phi(x) = (1 + erf(x / sqrt 2)) / 2: relative error small in both tails (erfc form), not only
// absolute error near 1 as 1 + erff(x) gives.
TEST(MathF32, NormalCdfMatchesErfInBothTails) {
  double worst_rel = 0, worst_abs = 0;
  for (double x = -12.0; x <= 12.0; x += 0.001) {
    const float xf = static_cast<float>(x);
    const double want = 0.5 * std::erfc(-static_cast<double>(xf) / std::sqrt(2.0));
    const double got = hz::math::normal_cdf(xf);
    worst_abs = std::max(worst_abs, std::abs(got - want));
    if (x > -9.0) worst_rel = std::max(worst_rel, std::abs(got - want) / want);  // Phi(-9) ~ 1e-19
  }
  std::printf("  normal_cdf f32: max abs error %.3g, max rel error %.3g (x > -9)\n", worst_abs, worst_rel);
  EXPECT_LT(worst_abs, 1e-7);  // under 2 ulp of values near 1, with or without FMA
  EXPECT_LT(worst_rel, 1e-5);    // includes the tail x < 0, where z^2 in float limits the argument of exp
  EXPECT_EQ(hz::math::normal_cdf(0.0f), 0.5f);
  EXPECT_EQ(hz::math::normal_cdf(INFINITY), 1.0f);
  EXPECT_EQ(hz::math::normal_cdf(-INFINITY), 0.0f);
  EXPECT_TRUE(std::isnan(hz::math::normal_cdf(NAN)));
  // f64 keeps the library erf
  EXPECT_EQ(hz::math::normal_cdf(1.25), 0.5 * (1.0 + std::erf(1.25 * 0.70710678118654752440)));
}

}  // namespace
