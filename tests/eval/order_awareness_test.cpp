// eval/order_awareness: the windows of each scheme, exactness against explicit matrix products,
// the overflow guard, and SCOPE's stated finding (the SCOPE paper, appendix A.3): at T = 512 with
// H = 10 heads SCOPE reaches r ~ 1 within 10 layers, NoPE does not.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "data/sampling.h"
#include "eval/order_awareness.h"

using namespace hz;
using namespace hz::eval;

TEST(OrderAwareness, Windows) {
  EXPECT_EQ(oa_windows(OaScheme::Scope, 512, 10), (std::vector<int64_t>{2, 4, 8, 16, 32, 64, 128, 256, 512, 512}));
  EXPECT_EQ(oa_windows(OaScheme::NoPE, 512, 3), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(oa_windows(OaScheme::NoPE1, 512, 3), (std::vector<int64_t>{0, 0, 1}));
  EXPECT_EQ(oa_windows(OaScheme::Uniform, 10, 4), (std::vector<int64_t>{10, 5, 4, 3}));
  EXPECT_EQ(parse_oa_scheme("nope1"), OaScheme::NoPE1);
  EXPECT_THROW(parse_oa_scheme("alibi"), ValueError);
}

// The same draws multiplied out as explicit T x T matrices (small enough to be exact in double).
TEST(OrderAwareness, EqualsExplicitMatrixProduct) {
  const int64_t T = 24, layers = 5;
  const std::vector<int64_t> w{0, 3, 7};
  const uint64_t seed = 11;
  std::vector<double> v(T, 0.0);
  v[T - 1] = 1;
  std::vector<double> expect;
  for (int64_t l = 0; l < layers; ++l) {
    Generator g(seed, static_cast<uint64_t>(l));
    std::vector<double> M(T * T, 0.0);
    for (int64_t i = 0; i < T; ++i) {
      M[i * T + i] += 1;
      for (int64_t wh : w) {
        const int64_t lo = wh > 0 ? std::max<int64_t>(0, i - wh + 1) : 0;
        M[i * T + lo + data::uniform_int(g, i - lo + 1)] += 1;
      }
    }
    std::vector<double> nv(T, 0.0);
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j) nv[j] += v[i] * M[i * T + j];
    v = nv;
    expect.push_back(static_cast<double>(std::set<double>(v.begin(), v.end()).size()) / T);
  }
  EXPECT_EQ(order_awareness(w, T, layers, 1, seed), expect);
}

TEST(OrderAwareness, OverflowIsDetected) {
  // 64 unbounded heads: the path count grows ~65x per layer and passes 2^128 after ~22 layers
  EXPECT_THROW(order_awareness(std::vector<int64_t>(64, 0), 64, 40, 1, 0), Error);
  EXPECT_NO_THROW(order_awareness(std::vector<int64_t>(64, 0), 64, 15, 1, 0));
}

TEST(OrderAwareness, ScopeReachesOneWithinTenLayersNoPEDoesNot) {
  const int64_t T = 512, H = 10, L = 10, trials = 3;
  const auto scope = order_awareness(oa_windows(OaScheme::Scope, T, H), T, L, trials, 0);
  const auto nope = order_awareness(oa_windows(OaScheme::NoPE, T, H), T, L, trials, 0);
  // reference (one Python trial): SCOPE .006 .01 .035 .146 .604 .934 .996 1 1 1,
  //                               NoPE  .004 .008 .047 .197 .381 .541 .635 .711 .764 .816
  EXPECT_LT(scope[0], 0.02);
  EXPECT_GT(scope[6], 0.97);
  EXPECT_GT(scope[9], 0.995);
  EXPECT_LT(nope[9], 0.9);
  EXPECT_GT(nope[9], 0.6);
  for (int64_t l = 5; l < L; ++l) EXPECT_GT(scope[l], nope[l]) << "layers " << l + 1;
}
