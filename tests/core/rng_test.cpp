// Horizon core tests: Philox4x32-10 and the Generator.
#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "tests/core/test_util.h"

namespace {

using hz::DType;
using hz::Generator;
using hz::Shape;
using hz::Tensor;

// ---- Philox4x32-10 known answers (Random123 tests/kat_vectors, "philox4x32 10" lines) ----------
TEST(Philox, KnownAnswerZero) {
  const std::array<uint32_t, 4> want{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u};
  EXPECT_EQ(hz::philox4x32_10({0, 0, 0, 0}, {0, 0}), want);
}
TEST(Philox, KnownAnswerAllOnes) {
  const std::array<uint32_t, 4> want{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu};
  EXPECT_EQ(hz::philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
            want);
}
TEST(Philox, KnownAnswerPiDigits) {
  // Random123 kat_vectors: "philox4x32 10 243f6a88 85a308d3 13198a2e 03707344 a4093822 299f31d0
  // d16cfe09 94fdcceb 5001e420 24126ea1". (The brief for these tests quoted the last three words
  // as 94fdcb5a 16dfa8ee e20e85d8; that was a misremembered vector: the reference file and every
  // independent implementation give the words below.)
  const std::array<uint32_t, 4> want{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u};
  EXPECT_EQ(hz::philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
            want);
}
TEST(Philox, SensitiveToEveryInputWord) {
  const auto base = hz::philox4x32_10({1, 2, 3, 4}, {5, 6});
  for (int w = 0; w < 6; ++w) {
    std::array<uint32_t, 4> c{1, 2, 3, 4};
    std::array<uint32_t, 2> k{5, 6};
    if (w < 4) c[w] ^= 1u;
    else k[w - 4] ^= 1u;
    const auto r = hz::philox4x32_10(c, k);
    int same = 0;
    for (int i = 0; i < 4; ++i) same += r[i] == base[i];
    EXPECT_EQ(same, 0) << "flipping one bit of input word " << w;
  }
}

// ---- Generator ------------------------------------------------------------------------------
std::vector<uint32_t> bits_of(const Tensor& t) {  // f32 bit patterns, for bitwise comparison
  std::vector<uint32_t> b;
  for (double v : t.to_vector()) b.push_back(hzt::float_to_bits(static_cast<float>(v)));
  return b;
}

TEST(Generator, SameSeedAndStreamSameValues) {
  for (DType dt : {DType::F32, DType::F64}) {
    Generator a(7, 3), b(7, 3);
    const std::vector<double> na = a.normal({1000}, 0.0, 1.0, dt).to_vector();
    const std::vector<double> nb = b.normal({1000}, 0.0, 1.0, dt).to_vector();
    EXPECT_EQ(na, nb);
    const std::vector<double> ua = a.uniform({257}, -2.0, 5.0, dt).to_vector();
    const std::vector<double> ub = b.uniform({257}, -2.0, 5.0, dt).to_vector();
    EXPECT_EQ(ua, ub);
    EXPECT_EQ(a.offset(), b.offset());
  }
  Generator g(9);
  EXPECT_EQ(g.word(5), Generator(9).word(5));
  EXPECT_EQ(g.seed(), 9u);
  EXPECT_EQ(g.stream(), 0u);
}

int count_equal(const std::vector<double>& a, const std::vector<double>& b) {
  int n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i] == b[i];
  return n;
}

TEST(Generator, DifferentSeedOrStreamDiffers) {
  const std::vector<double> base = Generator(7, 3).normal({1000}, 0, 1, DType::F64).to_vector();
  const std::vector<double> other_stream = Generator(7, 4).normal({1000}, 0, 1, DType::F64).to_vector();
  const std::vector<double> other_seed = Generator(8, 3).normal({1000}, 0, 1, DType::F64).to_vector();
  const std::vector<double> high_seed = Generator(7 + (uint64_t{1} << 32), 3).normal({1000}, 0, 1, DType::F64).to_vector();
  const std::vector<double> high_stream = Generator(7, 3 + (uint64_t{1} << 32)).normal({1000}, 0, 1, DType::F64).to_vector();
  EXPECT_EQ(count_equal(base, other_stream), 0);
  EXPECT_EQ(count_equal(base, other_seed), 0);
  EXPECT_EQ(count_equal(base, high_seed), 0);     // the seed's high 32 bits matter
  EXPECT_EQ(count_equal(base, high_stream), 0);   // the stream's high 32 bits matter
  // words, too
  int same = 0;
  for (uint64_t i = 0; i < 256; ++i) same += Generator(1, 0).word(i) == Generator(1, 1).word(i);
  EXPECT_LE(same, 2);
}

TEST(Generator, WordsArePureFunctionOfOffsetPlusIndex) {
  Generator g(123, 5);
  std::vector<uint32_t> w;
  for (uint64_t i = 0; i < 64; ++i) w.push_back(g.word(i));
  for (uint64_t off : {1u, 2u, 3u, 4u, 13u}) {
    Generator h(123, 5);
    h.set_offset(off);
    EXPECT_EQ(h.offset(), off);
    for (uint64_t i = 0; i + off < 64; ++i) EXPECT_EQ(h.word(i), w[i + off]) << "offset " << off << " i " << i;
  }
  // word() does not change the state
  EXPECT_EQ(g.offset(), 0u);
  // words across a 2^32 block boundary of the counter are distinct (the counter's high half is used)
  Generator lo(1), hi(1);
  hi.set_offset(uint64_t{1} << 34);  // block 2^32
  int same = 0;
  for (uint64_t i = 0; i < 64; ++i) same += lo.word(i) == hi.word(i);
  EXPECT_LE(same, 1);
}

// rng.cpp's documented layout: element i of a fill uses words (2i, 2i+1) from the current
// offset; a fill of n elements advances the offset by 2n rounded up to a multiple of 4.
uint64_t words_for(int64_t n) { return (2 * static_cast<uint64_t>(n) + 3) / 4 * 4; }

TEST(Generator, OffsetAdvances) {
  for (int64_t n : {0, 1, 2, 3, 4, 5, 7, 8, 17}) {
    SCOPED_TRACE(n);
    Generator g(1);
    g.normal({n});
    EXPECT_EQ(g.offset(), words_for(n));
    g.uniform({n, 1});
    EXPECT_EQ(g.offset(), 2 * words_for(n));
    Tensor t = Tensor::empty({n}, DType::F64);
    g.normal_(t, 1.0, 2.0);
    EXPECT_EQ(g.offset(), 3 * words_for(n));
  }
}

TEST(Generator, ConsecutiveFillsVersusOneBigFill) {
  for (int64_t n1 : {1, 2, 3, 4, 5, 6, 17}) {
    SCOPED_TRACE(n1);
    const int64_t n2 = 9;
    for (bool use_normal : {true, false}) {
      Generator one(99, 2), two(99, 2);
      auto fill = [&](Generator& g, int64_t n) {
        return (use_normal ? g.normal({n}, 0, 1, DType::F64) : g.uniform({n}, 0, 1, DType::F64)).to_vector();
      };
      const std::vector<double> big = fill(one, n1 + n2 + 1);
      const std::vector<double> a = fill(two, n1);
      const std::vector<double> b = fill(two, n2);
      // the first fill is always a prefix of the big fill
      EXPECT_EQ(a, std::vector<double>(big.begin(), big.begin() + n1));
      // the second starts at word roundup4(2 n1): element n1 when n1 is even, n1 + 1 when odd
      const int64_t start = static_cast<int64_t>(words_for(n1) / 2);
      EXPECT_EQ(start, n1 % 2 == 0 ? n1 : n1 + 1);
      EXPECT_EQ(b, std::vector<double>(big.begin() + start, big.begin() + start + n2));
      if (n1 % 2 == 1) {  // odd: one element of the big fill is skipped
        EXPECT_NE(b[0], big[n1]);
      }
    }
  }
}

TEST(Generator, FillsNonContiguousTensorsInLogicalOrder) {
  const std::vector<double> want = Generator(5).normal({3, 4}, 0, 1, DType::F64).to_vector();
  Tensor buf = Tensor::zeros({4, 3}, DType::F64);
  Tensor view = buf.transpose(0, 1);  // logical (3, 4)
  Generator g(5);
  g.normal_(view);
  EXPECT_EQ(view.to_vector(), want);
  EXPECT_EQ(g.offset(), words_for(12));
}

struct Moments {
  double mean, std, frac_within_1sd, min, max;
};
Moments moments(const std::vector<double>& v, double mu, double sd) {
  double s = 0, s2 = 0, mn = INFINITY, mx = -INFINITY;
  int64_t within = 0;
  for (double x : v) {
    s += x;
    s2 += x * x;
    mn = std::min(mn, x);
    mx = std::max(mx, x);
    within += std::fabs(x - mu) <= sd;
  }
  const double n = static_cast<double>(v.size());
  const double mean = s / n;
  return {mean, std::sqrt(s2 / n - mean * mean), within / n, mn, mx};
}

TEST(Generator, NormalStatistics) {
  const int64_t n = 100000;
  struct Case {
    double mu, sd;
    DType dt;
    uint64_t seed;
  };
  for (const Case& c : {Case{0, 1, DType::F32, 42}, Case{3, 2, DType::F64, 7}, Case{-1, 0.5, DType::F32, 1}}) {
    SCOPED_TRACE(c.mu);
    Generator g(c.seed);
    const Moments m = moments(g.normal({n}, c.mu, c.sd, c.dt).to_vector(), c.mu, c.sd);
    // 5-sigma bounds: sd(mean) = sd/sqrt(n); sd(sample std) ~ sd/sqrt(2n); sd(fraction) ~ 0.0015
    EXPECT_NEAR(m.mean, c.mu, 5 * c.sd / std::sqrt(static_cast<double>(n)));
    EXPECT_NEAR(m.std, c.sd, 5 * c.sd / std::sqrt(2.0 * n));
    EXPECT_NEAR(m.frac_within_1sd, 0.682689, 5 * 0.0015);
    // tails exist but are not absurd
    EXPECT_LT(m.min, c.mu - 3.5 * c.sd);
    EXPECT_GT(m.max, c.mu + 3.5 * c.sd);
    EXPECT_GT(m.min, c.mu - 7 * c.sd);
    EXPECT_LT(m.max, c.mu + 7 * c.sd);
  }
}

TEST(Generator, UniformWithinBounds) {
  const int64_t n = 100000;
  struct Case {
    double lo, hi;
    DType dt;
  };
  for (const Case& c : {Case{0, 1, DType::F32}, Case{-2, 5, DType::F64}, Case{1, 1.0000001, DType::F32},
                        Case{-1e-3, 1e-3, DType::F64}, Case{100, 100.5, DType::F32}}) {
    SCOPED_TRACE(c.lo);
    Generator g(11);
    const std::vector<double> v = g.uniform({n}, c.lo, c.hi, c.dt).to_vector();
    const double lo = hzt::round_to(c.lo, c.dt), hi = hzt::round_to(c.hi, c.dt);
    for (double x : v) {
      ASSERT_GE(x, lo);
      ASSERT_LT(x, hi);
    }
    const Moments m = moments(v, 0, 1);
    const double w = c.hi - c.lo;
    EXPECT_NEAR(m.mean, (c.lo + c.hi) / 2, 5 * w / std::sqrt(12.0 * n) + 1e-7 * std::fabs(c.lo));
    if (w > 1e-5) {  // spread over the whole interval
      EXPECT_LT(m.min, c.lo + 0.001 * w);
      EXPECT_GT(m.max, c.hi - 0.001 * w);
      EXPECT_NEAR(m.std, w / std::sqrt(12.0), 0.01 * w);
    }
  }
  Generator g(1);
  EXPECT_THROW(g.uniform({3}, 1.0, 1.0), hz::ValueError);
  EXPECT_THROW(g.uniform({3}, 2.0, 1.0), hz::ValueError);
  Tensor i = Tensor::zeros({3}, DType::I32);
  EXPECT_THROW(g.normal_(i), hz::DTypeError);
  EXPECT_THROW(g.uniform_(i), hz::DTypeError);
}

TEST(Generator, IndependentOfThreadCount) {
  const int saved = omp_get_max_threads();
  auto draw = [](int threads) {
    omp_set_num_threads(threads);
    Generator g(2024, 17);
    std::vector<uint32_t> out = bits_of(g.normal({100003}));
    const std::vector<uint32_t> u = bits_of(g.uniform({4099}, -1, 1));
    out.insert(out.end(), u.begin(), u.end());
    const std::vector<double> d = g.normal({5001}, 0, 1, DType::F64).to_vector();
    for (double x : d) {
      uint64_t b;
      std::memcpy(&b, &x, 8);
      out.push_back(static_cast<uint32_t>(b));
      out.push_back(static_cast<uint32_t>(b >> 32));
    }
    return out;
  };
  const std::vector<uint32_t> one = draw(1);
  const std::vector<uint32_t> two = draw(2);
  const std::vector<uint32_t> three = draw(3);
  omp_set_num_threads(saved);
  EXPECT_TRUE(one == two) << "1 vs 2 threads differ";
  EXPECT_TRUE(one == three) << "1 vs 3 threads differ";
}

TEST(Generator, PinnedRegressionValues) {
  // Pinned regression values: Generator(42).normal({4}) in f32, recorded from this implementation
  // (hex float literals). A change here means every seeded run changes: update deliberately.
  const float pinned[4] = {-0x1.f0bcb8p-1f, -0x1.3c51a4p+0f, -0x1.2bc06p-4f, -0x1.1b4e66p+0f};
  // = -0.97018981, -1.23562074, -0.07318151, -1.10666502
  Generator g(42);
  Tensor t = g.normal({4});
  ASSERT_EQ(t.dtype(), DType::F32);
  const float* p = t.data<float>();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(hzt::float_to_bits(p[i]), hzt::float_to_bits(pinned[i])) << "element " << i;
}

}  // namespace
