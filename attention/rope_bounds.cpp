#include "attention/rope_bounds.h"

#include <cmath>

#include "core/error.h"

namespace hz::attn {

namespace {
constexpr double kTwoPi = 6.283185307179586476925286766559;
}

RopeBaseBounds rope_base_bounds(int64_t L, int64_t D, int64_t depth, double eps, double eps_mach) {
  HZ_CHECK(L >= 1 && D >= 4 && D % 2 == 0, ValueError, "rope base bounds: need a length >= 1 and an even head dim >= 4, got L ",
           L, ", D ", D);
  HZ_CHECK(depth >= 1 && eps > 0 && eps < 1 && eps_mach > 0 && eps_mach < 1, ValueError,
           "rope base bounds: need depth >= 1 and 0 < eps, eps_mach < 1, got ", depth, ", ", eps, ", ", eps_mach);
  // w_min = base^(-(D-2)/D) solved for base: base = w_min^(-D/(D-2))
  const double p = static_cast<double>(D) / (D - 2);
  RopeBaseBounds b;
  b.aliasing = std::pow(L / kTwoPi, p);
  b.stability = std::pow(L / std::acos(std::pow(eps, 1.0 / depth)), p);
  b.precision = std::pow(eps_mach, -p);
  return b;
}

double slowest_frequency(const RopeFreqs& f) {
  double w = 0;
  for (double x : f.inv_freq)
    if (x > 0 && (w == 0 || x < w)) w = x;
  return w;
}

double effective_base(double w_min, int64_t D) {
  return w_min > 0 ? std::pow(w_min, -static_cast<double>(D) / (D - 2)) : 0.0;
}

std::string rope_bounds_verdict(double base, const RopeBaseBounds& b) {
  if (base <= b.aliasing) return "below the aliasing bound";
  if (base < b.stability) return "below the stability bound";
  if (base >= b.precision) return "above the precision bound";
  return "";
}

std::vector<RopeBoundsRow> rope_bounds_table(const std::vector<std::pair<std::string, AttentionSpec>>& kinds,
                                             int64_t D, int64_t depth, int64_t train_len,
                                             const std::vector<int64_t>& eval_lengths, double eps, double eps_mach) {
  std::vector<int64_t> lengths{train_len};
  for (int64_t L : eval_lengths)
    if (L != train_len) lengths.push_back(L);
  std::vector<RopeBoundsRow> rows;
  for (const auto& [name, spec] : kinds) {
    if (!spec.rotary()) continue;
    PositionSpec pos = spec.pos;
    if (pos.original_context == 0) pos.original_context = train_len;
    for (int64_t L : lengths) {
      RopeBoundsRow r;
      r.kind = name;
      r.L = L;
      r.training = L == train_len;
      r.base = effective_base(slowest_frequency(rope_frequencies(pos, D, L)), D);
      r.bounds = rope_base_bounds(L, D, depth, eps, eps_mach);
      r.verdict = r.base > 0 ? rope_bounds_verdict(r.base, r.bounds) : "";
      rows.push_back(r);
    }
  }
  return rows;
}

}  // namespace hz::attn
