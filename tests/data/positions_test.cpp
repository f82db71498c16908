// data/positions.h: PoSE's skip-wise positions and randomized positions, checked against their
// definitions row by row (range, order, chunk structure), for determinism in (seed, counter, row),
// and for the spread they are drawn to give (relative distances up to position_max - 1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "data/positions.h"

using namespace hz;
using namespace hz::data;

namespace {

std::vector<int64_t> row_of(const Tensor& p, int64_t b) {
  const int64_t T = p.size(1);
  std::vector<int64_t> r(T);
  for (int64_t t = 0; t < T; ++t) r[t] = static_cast<int64_t>(p.data<int64_t>()[b * T + t]);
  return r;
}

}  // namespace

TEST(Positions, IndexIsTheTokenIndex) {
  const Tensor p = make_positions({}, 2, 5, 1, 0, 0);
  EXPECT_EQ(row_of(p, 1), (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(Positions, PoseShiftsChunksBySortedSkips) {
  PositionOptions o;
  o.scheme = PositionScheme::PoSE;
  o.max = 200;
  const int64_t T = 32;
  int64_t widest = 0;
  std::set<int64_t> first_positions;
  for (int64_t chunks : {1, 2, 3, 5}) {
    o.chunks = chunks;
    const Tensor p = make_positions(o, 64, T, 7, 3, 0);
    for (int64_t b = 0; b < 64; ++b) {
      const auto r = row_of(p, b);
      int64_t jumps = 0, skip = r[0];  // skip of chunk 0 = its first position
      EXPECT_GE(r[0], 0);
      EXPECT_LE(r.back(), o.max - 1) << "row " << b;
      for (int64_t t = 1; t < T; ++t) {
        ASSERT_GT(r[t], r[t - 1]) << "row " << b;  // chunks keep their order and never overlap
        if (r[t] != r[t - 1] + 1) {
          ++jumps;
          EXPECT_GE(r[t] - t, skip);  // the skips never decrease
          skip = r[t] - t;
        }
        EXPECT_LE(r[t] - t, o.max - T);  // st_i + u_i with u_i <= L - T
      }
      EXPECT_LE(jumps, chunks - 1) << "row " << b;
      widest = std::max(widest, r.back() - r[0]);
      first_positions.insert(r[0]);
    }
  }
  EXPECT_GT(widest, 150);                 // relative distances reach far beyond T = 32
  EXPECT_GT(first_positions.size(), 20u);  // u_0 is drawn, not 0
}

TEST(Positions, RandomizedAreSortedDistinctSamples) {
  PositionOptions o;
  o.scheme = PositionScheme::Randomized;
  o.max = 1000;
  const Tensor p = make_positions(o, 200, 50, 11, 0, 0);
  double mean = 0;
  for (int64_t b = 0; b < 200; ++b) {
    const auto r = row_of(p, b);
    for (int64_t t = 0; t < 50; ++t) {
      ASSERT_TRUE(r[t] >= 0 && r[t] < 1000);
      if (t) ASSERT_GT(r[t], r[t - 1]) << "row " << b;  // sorted and distinct
      mean += static_cast<double>(r[t]) / (200 * 50);
    }
  }
  EXPECT_NEAR(mean, 499.5, 15.0);  // uniform over [0, 1000): sd of the mean ~ 4
}

TEST(Positions, ContinuousAreSortedRealSamples) {
  PositionOptions o;
  o.scheme = PositionScheme::Continuous;
  o.max = 1000;
  const Tensor p = make_positions(o, 200, 50, 13, 2, 0);
  ASSERT_EQ(p.dtype(), DType::F64);
  const std::vector<double> v = p.to_vector();
  double mean = 0;
  int64_t fractional = 0;
  for (int64_t b = 0; b < 200; ++b)
    for (int64_t t = 0; t < 50; ++t) {
      const double x = v[b * 50 + t];
      ASSERT_TRUE(x >= 0 && x < 1000);
      if (t) ASSERT_GE(x, v[b * 50 + t - 1]);
      mean += x / (200 * 50);
      fractional += x != std::floor(x);
    }
  EXPECT_NEAR(mean, 500.0, 15.0);
  EXPECT_GT(fractional, 9900);  // reals, not ids
}

TEST(Positions, DeterministicInSeedCounterAndRow) {
  PositionOptions o;
  o.scheme = PositionScheme::PoSE;
  o.max = 100;
  const Tensor a = make_positions(o, 4, 16, 5, 9, 8), b = make_positions(o, 4, 16, 5, 9, 8);
  EXPECT_EQ(a.to_vector(), b.to_vector());
  // row r of a batch starting at row0 is row r - row0's of the same micro-batch: ranks draw disjoint rows
  const Tensor wide = make_positions(o, 12, 16, 5, 9, 0);
  for (int64_t r = 0; r < 4; ++r) EXPECT_EQ(row_of(a, r), row_of(wide, 8 + r));
  EXPECT_NE(make_positions(o, 4, 16, 5, 10, 8).to_vector(), a.to_vector());  // the next micro-batch
  EXPECT_NE(make_positions(o, 4, 16, 6, 9, 8).to_vector(), a.to_vector());   // another seed
}

TEST(Positions, RefusesWhatCannotBeDrawn) {
  PositionOptions o;
  o.scheme = PositionScheme::Randomized;
  o.max = 16;
  EXPECT_THROW(make_positions(o, 1, 16, 1, 0, 0), ValueError);  // L must exceed T
  o.scheme = PositionScheme::PoSE;
  o.max = 64;
  o.chunks = 17;
  EXPECT_THROW(make_positions(o, 1, 16, 1, 0, 0), ValueError);
  EXPECT_THROW(parse_position_scheme("skip"), ValueError);
}
