// LR schedules at their boundary steps, names, validation.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "optim/schedule.h"

using namespace hz;
using namespace hz::optim;

namespace {

ScheduleConfig cfg(ScheduleKind k, int64_t warmup, int64_t total, double min_ratio = 0.1,
                   double decay_fraction = 0.2) {
  ScheduleConfig c;
  c.kind = k;
  c.warmup_steps = warmup;
  c.total_steps = total;
  c.min_ratio = min_ratio;
  c.decay_fraction = decay_fraction;
  return c;
}

TEST(Schedule, NamesRoundTrip) {
  for (int i = 0; i < static_cast<int>(ScheduleKind::Count); ++i) {
    const auto k = static_cast<ScheduleKind>(i);
    EXPECT_EQ(parse_schedule(name(k)), k);
  }
  EXPECT_STREQ(name(ScheduleKind::Constant), "constant");
  EXPECT_STREQ(name(ScheduleKind::Cosine), "cosine");
  EXPECT_STREQ(name(ScheduleKind::WSD), "wsd");
  try {
    parse_schedule("linear");
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("linear"), std::string::npos);
    EXPECT_NE(msg.find("cosine"), std::string::npos);  // lists the accepted names
  }
}

TEST(Schedule, WarmupIsLinearFromOneOverW) {
  for (auto k : {ScheduleKind::Constant, ScheduleKind::Cosine, ScheduleKind::WSD}) {
    const auto c = cfg(k, 10, 100);
    EXPECT_DOUBLE_EQ(lr_multiplier(c, 0), 0.1) << name(k);
    EXPECT_DOUBLE_EQ(lr_multiplier(c, 4), 0.5) << name(k);
    EXPECT_DOUBLE_EQ(lr_multiplier(c, 9), 1.0) << name(k);  // last warmup step
    EXPECT_DOUBLE_EQ(lr_multiplier(c, 10), 1.0) << name(k); // first step after warmup
  }
  // no warmup: full lr from step 0
  EXPECT_DOUBLE_EQ(lr_multiplier(cfg(ScheduleKind::Cosine, 0, 100), 0), 1.0);
  EXPECT_DOUBLE_EQ(lr_multiplier(cfg(ScheduleKind::Constant, 0, 100), 0), 1.0);
}

TEST(Schedule, Constant) {
  const auto c = cfg(ScheduleKind::Constant, 5, 50, 0.1);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 5), 1.0);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 49), 1.0);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 50), 1.0);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 5000), 1.0);
}

TEST(Schedule, CosineBoundaries) {
  const auto c = cfg(ScheduleKind::Cosine, 10, 110, 0.1);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 10), 1.0);
  EXPECT_NEAR(lr_multiplier(c, 60), 0.55, 1e-15);  // halfway: (1 + min) / 2
  EXPECT_NEAR(lr_multiplier(c, 35), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.25)), 1e-15);
  EXPECT_NEAR(lr_multiplier(c, 109), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.99)), 1e-15);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 110), 0.1);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 1000), 0.1);  // clamped after total
  double prev = 2.0;
  for (int64_t s = 10; s <= 110; ++s) {  // monotone non-increasing after warmup
    const double m = lr_multiplier(c, s);
    EXPECT_LE(m, prev) << s;
    prev = m;
  }
  // min_ratio 0 reaches exactly 0; warmup == total is all warmup then min
  EXPECT_DOUBLE_EQ(lr_multiplier(cfg(ScheduleKind::Cosine, 0, 10, 0.0), 10), 0.0);
  const auto w = cfg(ScheduleKind::Cosine, 10, 10, 0.3);
  EXPECT_DOUBLE_EQ(lr_multiplier(w, 9), 1.0);
  EXPECT_DOUBLE_EQ(lr_multiplier(w, 10), 0.3);
}

TEST(Schedule, WsdBoundaries) {
  // total 1000, decay_fraction 0.2: stable until step 799, cooldown over steps 800..1000
  const auto c = cfg(ScheduleKind::WSD, 50, 1000, 0.1, 0.2);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 49), 1.0);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 50), 1.0);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 799), 1.0);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 800), 1.0);  // cooldown starts at 1
  EXPECT_NEAR(lr_multiplier(c, 900), 0.55, 1e-15);
  EXPECT_NEAR(lr_multiplier(c, 999), 1.0 - 0.9 * 199.0 / 200.0, 1e-15);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 1000), 0.1);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 1500), 0.1);
  // decay_fraction 0: stable to the end, then min
  const auto z = cfg(ScheduleKind::WSD, 0, 100, 0.1, 0.0);
  EXPECT_DOUBLE_EQ(lr_multiplier(z, 99), 1.0);
  EXPECT_DOUBLE_EQ(lr_multiplier(z, 100), 0.1);
  // decay_fraction 1 and no warmup: a linear decay from step 0
  const auto l = cfg(ScheduleKind::WSD, 0, 10, 0.0, 1.0);
  EXPECT_DOUBLE_EQ(lr_multiplier(l, 0), 1.0);
  EXPECT_NEAR(lr_multiplier(l, 5), 0.5, 1e-15);
}

TEST(Schedule, Validation) {
  EXPECT_THROW(lr_multiplier(cfg(ScheduleKind::Cosine, 11, 10), 0), ValueError);  // warmup > total
  EXPECT_THROW(lr_multiplier(cfg(ScheduleKind::Cosine, 0, 10, -0.1), 0), ValueError);
  EXPECT_THROW(lr_multiplier(cfg(ScheduleKind::Cosine, 0, 10, 1.5), 0), ValueError);
  EXPECT_THROW(lr_multiplier(cfg(ScheduleKind::Cosine, 0, 0), 0), ValueError);
  EXPECT_THROW(lr_multiplier(cfg(ScheduleKind::Cosine, -1, 10), 0), ValueError);
  EXPECT_THROW(lr_multiplier(cfg(ScheduleKind::WSD, 0, 10, 0.1, 1.2), 0), ValueError);
  EXPECT_THROW(lr_multiplier(cfg(ScheduleKind::WSD, 9, 10, 0.1, 0.5), 0), ValueError);  // warmup in cooldown
  EXPECT_THROW(lr_multiplier(cfg(ScheduleKind::Cosine, 0, 10), -1), ValueError);
  EXPECT_NO_THROW(validate(cfg(ScheduleKind::WSD, 5, 10, 0.1, 0.5)));
  EXPECT_NO_THROW(validate(cfg(ScheduleKind::Constant, 10, 10, 1.0)));
}

}  // namespace
