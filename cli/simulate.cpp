// Horizon: `horizon simulate order-awareness` — SCOPE's Top-1 transition-matrix simulation
// (eval/order_awareness.h): r per layer count for NoPE, SCOPE, NoPE-1 and Uniform windows.
#include <fmt/core.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "cli/commands.h"
#include "cli/flags.h"
#include "core/error.h"
#include "eval/order_awareness.h"

namespace hz::cli {

int simulate_main(const std::vector<std::string>& a) {
  if (a.size() < 2 || a[1] != "order-awareness" || std::find(a.begin(), a.end(), "--help") != a.end()) {
    fmt::print("{}",
        "usage: horizon simulate order-awareness [--T 512] [--heads 10] [--layers 10] [--trials 4] [--seed 0]\n"
        "                                        [--schemes nope,scope,nope1,uniform] [-o oa.csv]\n"
        "  Ratio r of distinct path counts in the last row of L stacked Top-1 transition matrices (exact\n"
        "  128-bit integers), per layer count, averaged over trials (the SCOPE paper, appendix A.3).\n");
    return std::find(a.begin(), a.end(), "--help") != a.end() ? 0 : 2;
  }
  std::map<std::string, std::string> kv{{"T", "512"},     {"heads", "10"}, {"layers", "10"},
                                        {"trials", "4"},  {"seed", "0"},   {"schemes", "nope,scope,nope1,uniform"},
                                        {"o", ""}};
  for (size_t i = 2; i < a.size(); ++i) {
    std::string k = a[i];
    HZ_CHECK(k.rfind("-", 0) == 0 && i + 1 < a.size(), ValueError, "simulate: expected --key value, got '", k, "'");
    k = k.substr(k.rfind("--", 0) == 0 ? 2 : 1);
    HZ_CHECK(kv.count(k), ValueError, "simulate: unknown option --", k, "; see --help");
    kv[k] = a[++i];
  }
  const int64_t T = parse_int(kv["T"], "--T", 2, int64_t{1} << 24), H = parse_int(kv["heads"], "--heads", 1, 1 << 16),
                L = parse_int(kv["layers"], "--layers", 1, 1 << 16);
  const int64_t trials = parse_int(kv["trials"], "--trials", 1, 1 << 20);
  const auto seed = static_cast<uint64_t>(parse_int(kv["seed"], "--seed", 0));
  std::vector<std::pair<std::string, std::vector<double>>> rows;
  std::stringstream ss(kv["schemes"]);
  for (std::string s; std::getline(ss, s, ',');) {
    const eval::OaScheme sc = eval::parse_oa_scheme(s);
    rows.push_back({s, eval::order_awareness(eval::oa_windows(sc, T, H), T, L, trials, seed)});
  }
  fmt::print("order awareness r (distinct values / T) at T = {}, H = {}, {} trial(s)\n{:<8}", T, H, trials, "layers");
  for (int64_t l = 1; l <= L; ++l) fmt::print(" {:>6}", l);
  fmt::print("\n");
  for (const auto& [s, r] : rows) {
    fmt::print("{:<8}", s);
    for (double x : r) fmt::print(" {:>6.3f}", x);
    fmt::print("\n");
  }
  if (!kv["o"].empty()) {
    std::ofstream f(kv["o"]);
    HZ_CHECK(f.good(), ValueError, "simulate: cannot write '", kv["o"], "'");
    f << "scheme,T,heads,layers,r\n";
    for (const auto& [s, r] : rows)
      for (size_t l = 0; l < r.size(); ++l) f << fmt::format("{},{},{},{},{:.6f}\n", s, T, H, l + 1, r[l]);
    fmt::print("wrote {}\n", kv["o"]);
  }
  return 0;
}

}  // namespace hz::cli
