// Horizon data: scalar draws from a counter-based hz::Generator.
//
// Each draw reads the generator's next 32-bit words (Generator::word(0), word(1), ...) and then
// advances its offset by the words consumed, so a draw sequence is a pure function of
// (seed, stream, offset) like every other use of hz::Generator. Used by the corpus split, the
// loader's epoch shuffles and the synthetic tasks; changing these functions changes every split,
// shuffle and synthetic example, so they are fixed here once.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/rng.h"

namespace hz::data {

// 64 random bits (two words: high word first).
inline uint64_t next_u64(Generator& g) {
  const uint64_t hi = g.word(0), lo = g.word(1);
  g.set_offset(g.offset() + 2);
  return (hi << 32) | lo;
}

// Uniform integer in [0, n), n >= 1. 64 bits reduced modulo n: the bias is below n / 2^64.
inline int64_t uniform_int(Generator& g, int64_t n) {
  HZ_CHECK(n >= 1, ValueError, "uniform_int: n must be >= 1, got ", n);
  return static_cast<int64_t>(next_u64(g) % static_cast<uint64_t>(n));
}

// Uniform double in [0, 1) with 53 random bits.
inline double uniform01(Generator& g) {
  return static_cast<double>(next_u64(g) >> 11) * (1.0 / 9007199254740992.0);
}

// Fisher-Yates shuffle in place: for i = n-1 .. 1, swap v[i] with v[uniform_int(i + 1)].
template <class T>
void shuffle_in_place(std::vector<T>& v, Generator& g) {
  for (int64_t i = static_cast<int64_t>(v.size()) - 1; i > 0; --i) {
    const int64_t j = uniform_int(g, i + 1);
    std::swap(v[static_cast<size_t>(i)], v[static_cast<size_t>(j)]);
  }
}

}  // namespace hz::data
