// Horizon: SCOPE's order-awareness simulation (the SCOPE paper, appendix A.3).
//
// Each head is a Top-1 selector that picks one uniformly random visible position, so a layer is
// the T x T matrix M = I + sum_h P_h, where row i of P_h is one-hot at a uniform j in
// [max(0, i - w_h + 1), i] (w_h = 0: [0, i]). Stacking L layers gives v = e_T M_1 ... M_L (the
// last query's row), and r = (number of distinct values in v, zero included) / T measures how
// many positions the last query can tell apart by how many paths reach them.
//
// Arithmetic is exact: v holds unsigned 128-bit path counts (the total grows at most by H + 1
// per layer) and every addition is checked; an overflow throws, naming the depth at which it
// happened (it needs about 128 / log2(H + 1) layers, e.g. 31 for H = 16). Values are compared
// exactly. Draws: trial k, layer l uses Generator(seed, k * 2^20 + l), rows in order, heads in
// order within a row.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hz::eval {

enum class OaScheme : uint8_t { NoPE, Scope, NoPE1, Uniform, Count };
const char* name(OaScheme s);
OaScheme parse_oa_scheme(const std::string& s);  // nope | scope | nope1 | uniform

// Windows per head (0 = unbounded): NoPE all 0; SCOPE 2^1..2^H (capped at T); NoPE-1 H-1 unbounded
// heads and one of window 1; Uniform ceil(T / i), i = 1..H.
std::vector<int64_t> oa_windows(OaScheme s, int64_t T, int64_t H);

// r after 1..layers layers, averaged over `trials` random stacks.
std::vector<double> order_awareness(const std::vector<int64_t>& windows, int64_t T, int64_t layers, int64_t trials,
                                    uint64_t seed = 0);

}  // namespace hz::eval
