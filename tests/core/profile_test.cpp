// The per-op profile (core/device.h) and the backend call counter: every call through the backend
// tables is counted; while a profile is taken each is timed once, a call inside a timed scope is the
// scope's time, and the rows add up to no more than the wall time profiled.
#include <gtest/gtest.h>

#include <chrono>
#include <map>

#include "core/device.h"
#include "core/ops.h"

using namespace hz;

TEST(Profile, EveryBackendCallIsCountedAndTimedOnce) {
  const Tensor a = Tensor::ones({64, 64}), b = Tensor::ones({64, 64});
  const uint64_t before = backend_calls();
  (void)ops::matmul(a, b);
  EXPECT_EQ(backend_calls() - before, 2u);  // the output's allocation and the product
  EXPECT_FALSE(profiling());

  const auto t0 = std::chrono::steady_clock::now();
  profile_begin();
  EXPECT_TRUE(profiling());
  (void)ops::matmul(a, b);
  (void)ops::add(a, b);
  (void)ops::add(a, b);
  {
    ProfileScope outer("outer scope", Device::cpu());
    (void)ops::matmul(a, b);  // inside the scope: the scope's time, not a matmul row
    ProfileScope inner("inner scope", Device::cpu());
  }
  const std::vector<ProfileRow> rows = profile_end();
  const double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(profiling());
  std::map<std::string, ProfileRow> by;
  double total = 0;
  for (const auto& r : rows) {
    by[r.name] = r;
    total += r.ms;
    EXPECT_EQ(r.device, "cpu");
    EXPECT_GE(r.ms, 0.0);
  }
  ASSERT_TRUE(by.count("matmul") && by.count("binary") && by.count("outer scope"));
  EXPECT_EQ(by["matmul"].calls, 1);
  EXPECT_EQ(by["binary"].calls, 2);
  EXPECT_EQ(by["outer scope"].calls, 1);
  EXPECT_EQ(by.count("inner scope"), 0u);
  EXPECT_LE(total, wall);
  for (size_t k = 1; k < rows.size(); ++k) EXPECT_GE(rows[k - 1].ms, rows[k].ms);  // longest first

  // after the profile, calls are counted but not recorded
  (void)ops::add(a, b);
  profile_begin();
  EXPECT_TRUE(profile_end().empty());
}
