// Horizon: Philox4x32-10 (Salmon et al. 2011) and the value transforms of the random fills, the
// same code on the host and the CUDA device, so a fill gives the same numbers on every device.
#pragma once
#include <math.h>

#include <cstdint>

#include "core/hd.h"

namespace hz::philox {

struct Block {
  uint32_t w[4];
};

// One Philox4x32-10 block: counter (4 words) under key (2 words) -> 4 random words.
HZ_HD Block philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;  // multipliers
  constexpr uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;  // Weyl key increments
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += W0;
      k1 += W1;
    }
    const uint64_t p0 = static_cast<uint64_t>(M0) * c0, p1 = static_cast<uint64_t>(M1) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  return Block{{c0, c1, c2, c3}};
}

// Word `w` (absolute index) of the stream (seed, stream): block w / 4, lane w % 4.
HZ_HD uint32_t word(uint64_t seed, uint64_t stream, uint64_t w) {
  const uint64_t block = w >> 2;
  const Block b = philox4x32_10(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                                static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32),
                                static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return b.w[w & 3];
}

// Box-Muller from two words, in double: u1 in (0, 1], u2 in [0, 1).
HZ_HD double normal(uint32_t a, uint32_t b, double mean, double stddev) {
  const double two_pi = 6.283185307179586476925286766559;
  const double u1 = (static_cast<double>(a) + 1.0) * (1.0 / 4294967296.0);
  const double u2 = static_cast<double>(b) * (1.0 / 4294967296.0);
  return mean + stddev * ::sqrt(-2.0 * ::log(u1)) * ::cos(two_pi * u2);
}

// Uniform in [low, high) from 53 bits of two words; for f32 storage a value that would round up
// to `high` is moved to the largest float below it.
HZ_HD double uniform(uint32_t a, uint32_t b, double low, double high, bool f32) {
  const double u = static_cast<double>((static_cast<uint64_t>(a) << 21) | (b >> 11)) *
                   (1.0 / 9007199254740992.0);
  double x = low + (high - low) * u;
  if (f32 && static_cast<float>(x) >= static_cast<float>(high))
    x = ::nextafterf(static_cast<float>(high), static_cast<float>(low));
  return x;
}

// Words a fill of n elements consumes (2 per element, rounded up to whole blocks).
HZ_HD uint64_t words_used(int64_t n) { return (static_cast<uint64_t>(2 * n) + 3) / 4 * 4; }

}  // namespace hz::philox
