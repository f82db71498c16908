#include "data/positions.h"

#include <algorithm>
#include <unordered_set>
#include <vector>

#include "core/hash.h"
#include "core/names.h"
#include "core/rng.h"

namespace hz::data {

namespace {

const char* const kSchemes[] = {"index", "pose", "randomized", "continuous"};
static_assert(sizeof(kSchemes) / sizeof(*kSchemes) == static_cast<size_t>(PositionScheme::Count));

// Uniform integers from one row's Philox stream (word by word; 64 bits per draw, so the modulo's
// bias is below 2^-30 for any range here).
struct Draws {
  Generator g;
  uint64_t next = 0;
  int64_t uniform(int64_t lo, int64_t hi) {  // in [lo, hi]
    const uint64_t w = (static_cast<uint64_t>(g.word(next)) << 32) | g.word(next + 1);
    next += 2;
    return lo + static_cast<int64_t>(w % static_cast<uint64_t>(hi - lo + 1));
  }
  // k distinct integers of [0, n), sorted (Floyd's algorithm)
  std::vector<int64_t> distinct(int64_t k, int64_t n) {
    std::unordered_set<int64_t> s;
    std::vector<int64_t> out;
    for (int64_t j = n - k; j < n; ++j) {
      const int64_t t = uniform(0, j);
      const int64_t pick = s.count(t) ? j : t;
      s.insert(pick);
      out.push_back(pick);
    }
    std::sort(out.begin(), out.end());
    return out;
  }
};

}  // namespace

const char* name(PositionScheme s) { return kSchemes[static_cast<int>(s)]; }
PositionScheme parse_position_scheme(const std::string& s) {
  return parse_name<PositionScheme>(s, kSchemes, "position scheme");
}

Tensor make_positions(const PositionOptions& o, int64_t B, int64_t T, uint64_t seed, int64_t counter, int64_t row0) {
  HZ_CHECK(B > 0 && T > 0, ShapeError, "positions: need B, T > 0, got ", B, " x ", T);
  HZ_CHECK(o.scheme == PositionScheme::Index || o.max > T, ValueError, "positions: ", name(o.scheme),
           " spreads ", T, " tokens over [0, position_max) and needs position_max > ", T, ", got ", o.max);
  HZ_CHECK(o.scheme != PositionScheme::PoSE || (o.chunks >= 1 && o.chunks <= T), ValueError,
           "positions: PoSE needs 1 <= chunks <= ", T, ", got ", o.chunks);
  std::vector<double> p(static_cast<size_t>(B * T));
  for (int64_t b = 0; b < B; ++b) {
    double* row = p.data() + b * T;
    if (o.scheme == PositionScheme::Index) {
      for (int64_t t = 0; t < T; ++t) row[t] = static_cast<double>(t);
      continue;
    }
    const int64_t ids[2] = {counter, row0 + b};  // this row's own stream
    Draws d{Generator(seed ^ 0x706f736974696f6eull, fnv1a64(ids, sizeof(ids))), 0};
    if (o.scheme == PositionScheme::Continuous) {  // T uniform reals on [0, L), sorted
      for (int64_t t = 0; t < T; ++t) {
        const uint64_t w = (static_cast<uint64_t>(d.g.word(d.next)) << 32) | d.g.word(d.next + 1);
        d.next += 2;
        row[t] = static_cast<double>(w >> 11) * 0x1.0p-53 * static_cast<double>(o.max);
      }
      std::sort(row, row + T);
      continue;
    }
    if (o.scheme == PositionScheme::Randomized) {
      const std::vector<int64_t> r = d.distinct(T, o.max);
      for (int64_t t = 0; t < T; ++t) row[t] = static_cast<double>(r[t]);
      continue;
    }
    // PoSE: N - 1 distinct cut points in [1, T - 1], non-decreasing skips in [0, L - T]
    std::vector<int64_t> cuts = d.distinct(o.chunks - 1, T - 1);
    for (auto& c : cuts) c += 1;
    cuts.push_back(T);
    int64_t start = 0, skip = 0;
    for (int64_t c : cuts) {
      skip = d.uniform(skip, o.max - T);
      for (int64_t t = start; t < c; ++t) row[t] = static_cast<double>(t + skip);
      start = c;
    }
  }
  return Tensor::from_vector(p, {B, T}, o.scheme == PositionScheme::Continuous ? DType::F64 : DType::I64);
}

}  // namespace hz::data
