// eval/probe: the ridge position probe recovers a linearly encoded position on held-out
// positions (R^2 ~ 1), finds nothing in features that carry no position (R^2 <= ~0), and runs on
// a model's layers.
#include <gtest/gtest.h>

#include <cmath>

#include "data/sampling.h"
#include "eval/probe.h"

using namespace hz;
using namespace hz::eval;

TEST(Probe, LinearPositionIsRecoveredNoiseIsNot) {
  const int64_t L = 60, S = 8, C = 6;
  Generator g(3, 0);
  std::vector<double> lin, noise;
  for (int64_t s = 0; s < S; ++s)
    for (int64_t t = 0; t < L; ++t)
      for (int64_t c = 0; c < C; ++c) {
        const double u = data::uniform01(g) - 0.5;
        // feature 0 = 0.3 t + noise, the others noise; the noise features carry nothing
        lin.push_back(c == 0 ? 0.3 * static_cast<double>(t) + 0.2 * u : u);
        noise.push_back(u + 0.01 * static_cast<double>(s));
      }
  const auto r = fit_position_probes({lin, noise}, C, L, 1);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_GT(r[0].r2_heldout, 0.99);
  EXPECT_LT(r[1].r2_heldout, 0.1);
  EXPECT_GT(r[1].lambda, r[0].lambda);  // noise is fitted with a stronger penalty
  // a nonlinear code (|t - L/2|) is only partly linear: R^2 well below 1
  std::vector<double> vee;
  for (int64_t s = 0; s < S; ++s)
    for (int64_t t = 0; t < L; ++t)
      for (int64_t c = 0; c < C; ++c) vee.push_back(c == 0 ? std::abs(static_cast<double>(t) - L / 2.0) : 0.001 * c * s);
  EXPECT_LT(fit_position_probes({vee}, C, L, 1)[0].r2_heldout, 0.3);
}
