// Horizon core tests: bfloat16 conversion (core/bf16.h) and bf16 tensors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/bf16.h"
#include "core/tensor.h"
#include "tests/core/test_util.h"

namespace {

using hz::bf16_bits_to_f32;
using hz::DType;
using hz::f32_to_bf16_bits;
using hz::Tensor;
using hzt::bits_to_float;
using hzt::float_to_bits;

uint16_t to_bf16(uint32_t f32_bits) { return f32_to_bf16_bits(bits_to_float(f32_bits)); }
bool bf16_is_nan(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x007fu) != 0; }

TEST(BF16, ExactValuesUnchanged) {
  for (uint32_t b : {0x3f800000u, 0xbf800000u, 0x40490000u, 0x00010000u, 0x7f7f0000u, 0x80800000u}) {
    EXPECT_EQ(to_bf16(b), static_cast<uint16_t>(b >> 16)) << std::hex << b;
  }
}

TEST(BF16, TiesRoundToEven) {
  // exactly halfway: lower bf16 mantissa even -> round down; odd -> round up
  EXPECT_EQ(to_bf16(0x3f808000u), 0x3f80u);  // 1.00390625, between 0x3f80 (even) and 0x3f81
  EXPECT_EQ(to_bf16(0x3f818000u), 0x3f82u);  // between 0x3f81 (odd) and 0x3f82
  EXPECT_EQ(to_bf16(0xbf808000u), 0xbf80u);  // negative: same rule on the magnitude
  EXPECT_EQ(to_bf16(0xbf818000u), 0xbf82u);
  EXPECT_EQ(to_bf16(0x00008000u), 0x0000u);  // subnormal halfway to the smallest bf16 subnormal
  EXPECT_EQ(to_bf16(0x00018000u), 0x0002u);
  EXPECT_EQ(to_bf16(0x3fff8000u), 0x4000u);  // carry into the exponent
  EXPECT_EQ(to_bf16(0x7f7f8000u), 0x7f80u);  // halfway above the max finite bf16 (odd): Inf
  EXPECT_EQ(to_bf16(0x7f7e8000u), 0x7f7eu);  // halfway below it, even: stays finite
}

TEST(BF16, JustAboveAndBelowHalfway) {
  EXPECT_EQ(to_bf16(0x3f808001u), 0x3f81u);  // above halfway: up, although 0x3f80 is even
  EXPECT_EQ(to_bf16(0x3f807fffu), 0x3f80u);  // below halfway: down
  EXPECT_EQ(to_bf16(0x3f818001u), 0x3f82u);
  EXPECT_EQ(to_bf16(0x3f817fffu), 0x3f81u);  // below halfway: down, although 0x3f81 is odd
  EXPECT_EQ(to_bf16(0xc0a08001u), 0xc0a1u);
  EXPECT_EQ(to_bf16(0xc0a07fffu), 0xc0a0u);
  EXPECT_EQ(to_bf16(0x3f80ffffu), 0x3f81u);
  EXPECT_EQ(to_bf16(0x3f800001u), 0x3f80u);
}

TEST(BF16, NaNStaysNaN) {
  for (uint32_t b : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7f80ffffu, 0x7f808000u, 0x7fffffffu,
                     0x7fbfffffu, 0xffffffffu}) {
    const uint16_t r = to_bf16(b);
    EXPECT_TRUE(bf16_is_nan(r)) << std::hex << b << " -> " << r;
    EXPECT_TRUE(std::isnan(bf16_bits_to_f32(r)));
    EXPECT_EQ(r & 0x8000u, (b >> 16) & 0x8000u) << "sign kept";
  }
  EXPECT_TRUE(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(BF16, InfinitiesZerosAndOverflow) {
  EXPECT_EQ(to_bf16(0x7f800000u), 0x7f80u);  // +Inf
  EXPECT_EQ(to_bf16(0xff800000u), 0xff80u);  // -Inf
  EXPECT_EQ(to_bf16(0x00000000u), 0x0000u);  // +0
  EXPECT_EQ(to_bf16(0x80000000u), 0x8000u);  // -0
  EXPECT_EQ(f32_to_bf16_bits(std::numeric_limits<float>::max()), 0x7f80u);    // max finite f32 -> Inf
  EXPECT_EQ(f32_to_bf16_bits(std::numeric_limits<float>::lowest()), 0xff80u);
  EXPECT_EQ(to_bf16(0x7f7fffffu), 0x7f80u);
  EXPECT_EQ(to_bf16(0x7f7f7fffu), 0x7f7fu);  // just below the rounding threshold: max finite bf16
  EXPECT_EQ(to_bf16(0x00000001u), 0x0000u);  // tiny subnormal -> 0
  EXPECT_EQ(to_bf16(0x80000001u), 0x8000u);  // -> -0
  EXPECT_TRUE(std::isinf(bf16_bits_to_f32(0x7f80u)));
  EXPECT_EQ(bf16_bits_to_f32(0x8000u), 0.0f);
  EXPECT_TRUE(std::signbit(bf16_bits_to_f32(0x8000u)));
}

TEST(BF16, EveryBF16RoundTripsExactly) {
  int nans = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const float f = bf16_bits_to_f32(h);
    ASSERT_EQ(float_to_bits(f), b << 16);  // widening is exact
    const uint16_t back = f32_to_bf16_bits(f);
    if (bf16_is_nan(h)) {
      ++nans;
      ASSERT_TRUE(std::isnan(bf16_bits_to_f32(back))) << std::hex << b;
    } else {
      ASSERT_EQ(back, h) << std::hex << b;
    }
  }
  EXPECT_EQ(nans, 2 * 127);
}

TEST(BF16, MatchesDistanceBasedReference) {
  // sweep f32 bit patterns (finite, both signs) with an odd stride plus every low-16-bit pattern
  // around a few representative high halves; the reference decides by comparing distances.
  int64_t checked = 0;
  auto check = [&](uint32_t u) {
    const float f = bits_to_float(u);
    if (!std::isfinite(f)) return;
    ASSERT_EQ(f32_to_bf16_bits(f), hzt::ref_bf16_bits(f)) << std::hex << u;
    ++checked;
  };
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 65521) check(static_cast<uint32_t>(u));
  for (uint32_t hi : {0x3f80u, 0x3f81u, 0x0000u, 0x8001u, 0x7f7fu, 0xc2f7u})
    for (uint32_t lo = 0; lo < 65536; ++lo) check((hi << 16) | lo);
  EXPECT_GT(checked, 400000);
}

TEST(BF16, TensorConversion) {
  std::vector<double> v = hzt::rand_values(4099, 5, -1000.0, 1000.0, DType::F32);
  v[0] = 1.00390625;  // 0x3f808000: tie, rounds down to 1
  v[1] = 1.01171875;  // 0x3f818000: tie, rounds up to 1.015625
  v[2] = 0.0;
  v[3] = -0.0;
  v[4] = 3.0e38;      // large but finite in bf16
  std::vector<double> want(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    want[i] = bf16_bits_to_f32(hzt::ref_bf16_bits(static_cast<float>(v[i])));
  EXPECT_EQ(want[0], 1.0);
  EXPECT_EQ(want[1], 1.015625);

  Tensor f = Tensor::from_vector(v, {4099}, DType::F32);
  Tensor b = f.to(DType::BF16);
  EXPECT_EQ(b.dtype(), DType::BF16);
  EXPECT_EQ(b.shape(), f.shape());
  Tensor back = b.to(DType::F32);
  EXPECT_EQ(back.dtype(), DType::F32);
  EXPECT_TRUE(hzt::all_equal(back, want));
  EXPECT_TRUE(hzt::all_equal(b.to(DType::F64), want));
  // bf16 -> bf16 round trip through f32 is the identity
  EXPECT_TRUE(hzt::all_equal(back.to(DType::BF16), want));
  // non-contiguous source and destination
  Tensor m = Tensor::from_vector(std::vector<double>(v.begin(), v.begin() + 12), {3, 4}, DType::F32);
  Tensor dst = Tensor::zeros({4, 3}, DType::BF16);
  Tensor dview = dst.transpose(0, 1);
  dview.copy_(m);
  EXPECT_TRUE(hzt::all_equal(dview, std::vector<double>(want.begin(), want.begin() + 12)));
  // f64 values that are exact in f32 convert the same way
  EXPECT_TRUE(hzt::all_equal(Tensor::from_vector(v, {4099}, DType::F64).to(DType::BF16), want));
}

}  // namespace

// f64 -> bf16 rounds once: a double just above a bf16 tie must round up even though its float
// rounding lands exactly on the tie.
TEST(Bf16Conversion, DoubleRoundsOnceNotTwice) {
  const double above_tie = 1.0039062509313226;  // 1 + 2^-8 + ~1e-9: nearest bf16 is 1.0078125
  const Tensor t = Tensor::from_vector({above_tie, -above_tie, 1.00390625}, {3}, DType::F64);
  const Tensor b = t.to(DType::BF16).to(DType::F32);
  EXPECT_EQ(b.at({0}), 1.0078125);
  EXPECT_EQ(b.at({1}), -1.0078125);
  EXPECT_EQ(b.at({2}), 1.0);  // an exact tie goes to even
}
