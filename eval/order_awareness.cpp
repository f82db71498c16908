#include "eval/order_awareness.h"

#include <algorithm>

#include "core/error.h"
#include "data/sampling.h"

namespace hz::eval {

namespace {
const char* const kSchemes[] = {"nope", "scope", "nope1", "uniform"};
static_assert(sizeof(kSchemes) / sizeof(*kSchemes) == static_cast<size_t>(OaScheme::Count));
using u128 = unsigned __int128;
}  // namespace

const char* name(OaScheme s) { return kSchemes[static_cast<int>(s)]; }

OaScheme parse_oa_scheme(const std::string& s) {
  for (int i = 0; i < static_cast<int>(OaScheme::Count); ++i)
    if (s == kSchemes[i]) return static_cast<OaScheme>(i);
  throw ValueError("unknown order-awareness scheme '" + s + "'; expected one of: nope scope nope1 uniform");
}

std::vector<int64_t> oa_windows(OaScheme s, int64_t T, int64_t H) {
  HZ_CHECK(T >= 1 && H >= 1, ValueError, "order awareness: need T >= 1 and H >= 1");
  std::vector<int64_t> w(H, 0);
  switch (s) {
    case OaScheme::NoPE: break;
    case OaScheme::Scope:
      for (int64_t h = 1; h <= H; ++h) w[h - 1] = h >= 62 ? T : std::min<int64_t>(T, int64_t{1} << h);
      break;
    case OaScheme::NoPE1: w[H - 1] = 1; break;
    case OaScheme::Uniform:
      for (int64_t i = 1; i <= H; ++i) w[i - 1] = (T + i - 1) / i;
      break;
    default: throw ValueError("bad order-awareness scheme");
  }
  return w;
}

std::vector<double> order_awareness(const std::vector<int64_t>& windows, int64_t T, int64_t layers, int64_t trials,
                                    uint64_t seed) {
  HZ_CHECK(T >= 1 && layers >= 1 && trials >= 1 && !windows.empty(), ValueError,
           "order awareness: need T, layers, trials >= 1 and at least one head");
  std::vector<double> r(layers, 0.0);
  std::vector<u128> v(T), next(T), sorted(T);
  for (int64_t k = 0; k < trials; ++k) {
    std::fill(v.begin(), v.end(), u128(0));
    v[T - 1] = 1;  // e_T
    for (int64_t l = 0; l < layers; ++l) {
      Generator g(seed, static_cast<uint64_t>(k) * (uint64_t{1} << 20) + static_cast<uint64_t>(l));
      next = v;  // the identity part
      for (int64_t i = 0; i < T; ++i)
        for (int64_t w : windows) {
          const int64_t lo = w > 0 ? std::max<int64_t>(0, i - w + 1) : 0;
          const int64_t j = lo + data::uniform_int(g, i - lo + 1);
          if (v[i] == 0) continue;
          HZ_CHECK(!__builtin_add_overflow(next[j], v[i], &next[j]), Error, "order awareness: a path count exceeded 2^128 "
                   "after ", l + 1, " layers (T = ", T, ", H = ", windows.size(), "); use fewer layers");
        }
      v.swap(next);
      sorted = v;
      std::sort(sorted.begin(), sorted.end());
      const int64_t distinct = std::unique(sorted.begin(), sorted.end()) - sorted.begin();
      r[l] += static_cast<double>(distinct) / static_cast<double>(T);
    }
  }
  for (auto& x : r) x /= static_cast<double>(trials);
  return r;
}

}  // namespace hz::eval
