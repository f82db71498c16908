// Block skipping: the kernel visits exactly the (query block, key block) pairs holding at least
// one visible entry — counted here by brute force over (i, j) from the mask definition — and
// never reads a block that is masked for every row.
#include <gtest/gtest.h>

#include <cmath>

#include "attention/accounting.h"
#include "attention/fused.h"
#include "attention/spec.h"
#include "autograd/functions.h"
#include "core/rng.h"

using namespace hz;
using namespace hz::attn;

namespace {

struct Brute {
  int64_t blocks = 0, boundary = 0, pairs = 0;
};

// Independent count: visibility straight from the definition in docs/methods.md (j <= i, i - j < w) with queries last.
Brute brute(const std::vector<int64_t>& windows, int64_t Tq, int64_t Tk, int64_t Bq, int64_t Bk) {
  Brute r;
  const int64_t off = Tk - Tq;
  for (int64_t w : windows) {
    auto vis = [&](int64_t i, int64_t j) { return j <= off + i && (w == 0 || off + i - j < w); };
    for (int64_t i = 0; i < Tq; ++i)
      for (int64_t j = 0; j < Tk; ++j) r.pairs += vis(i, j);
    for (int64_t i0 = 0; i0 < Tq; i0 += Bq)
      for (int64_t j0 = 0; j0 < Tk; j0 += Bk) {
        int64_t n = 0, tot = 0;
        for (int64_t i = i0; i < std::min(Tq, i0 + Bq); ++i)
          for (int64_t j = j0; j < std::min(Tk, j0 + Bk); ++j) {
            n += vis(i, j);
            ++tot;
          }
        r.blocks += n > 0;
        r.boundary += n > 0 && n < tot;
      }
  }
  return r;
}

struct MaskCase {
  std::string name;
  std::vector<int64_t> windows;
  int64_t Tq, Tk, Bq, Bk;
};

class BlockSkip : public ::testing::TestWithParam<MaskCase> {};

TEST_P(BlockSkip, VisitedBlocksEqualIndependentCount) {
  const MaskCase c = GetParam();
  const int64_t H = static_cast<int64_t>(c.windows.size());
  Generator g(9);
  AttnConfig cfg;
  cfg.window = c.windows;
  cfg.block_q = c.Bq;
  cfg.block_k = c.Bk;
  ag::Variable q(g.normal({1, H, c.Tq, 8}), true), k(g.normal({1, H, c.Tk, 8}), true),
      v(g.normal({1, H, c.Tk, 8}), true);
  const Brute want = brute(c.windows, c.Tq, c.Tk, c.Bq, c.Bk);
  reset_attn_stats();
  AttnOutput o = fused_attention(q, k, v, cfg);
  EXPECT_EQ(attn_stats().fwd_blocks, want.blocks);
  EXPECT_EQ(attn_stats().fwd_boundary_blocks, want.boundary);
  ag::sum_all(o.out).backward();
  EXPECT_EQ(attn_stats().bwd_blocks, want.blocks);
  const LayerCost cost = attention_cost(cfg, H, c.Tq, c.Tk, 8);
  EXPECT_EQ(cost.visible_pairs, want.pairs);
  EXPECT_EQ(cost.blocks, want.blocks);
  EXPECT_DOUBLE_EQ(cost.flops_fwd, 4.0 * 8 * want.pairs);
}

std::vector<MaskCase> mask_cases() {
  return {
      {"causal", {0, 0}, 100, 100, 16, 8},
      {"causal_square_tiles", {0}, 97, 97, 32, 32},
      {"swa7", {7, 7}, 100, 100, 16, 8},
      {"swa33", {33}, 130, 130, 32, 32},
      {"scope_auto", scope_windows(4, 100), 100, 100, 8, 8},
      {"scope_8heads", scope_windows(8, 257), 257, 257, 32, 16},
      {"decode_tail", {0, 5, 40}, 7, 100, 4, 8},
  };
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Masks, BlockSkip, ::testing::ValuesIn(mask_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(BlockSkip, ExactPairCounts) {
  AttnConfig cfg;
  cfg.window = {0};
  EXPECT_EQ(attention_cost(cfg, 1, 1000, 1000, 64).visible_pairs, 1000 * 1001 / 2);  // T(T+1)/2
  cfg.window = {512};
  EXPECT_EQ(attention_cost(cfg, 1, 8192, 8192, 64).visible_pairs, 8192LL * 512 - 512LL * 511 / 2);
}

TEST(BlockSkip, FullyMaskedBlocksAreNeverRead) {
  // keys in whole tiles before every row's window hold NaN; reading one would poison the output
  for (const std::vector<int64_t>& windows : {std::vector<int64_t>{16}, scope_windows(4, 96)}) {
    const int64_t H = static_cast<int64_t>(windows.size()), T = 96, Bk = 8, Bq = 8;
    Generator g(12);
    Tensor k = g.normal({1, H, T, 4}), v = g.normal({1, H, T, 4});
    for (int64_t h = 0; h < H; ++h) {
      const int64_t w = windows[h];
      // a single query block at the end: rows T-Bq..T-1 see keys >= T-Bq-w+1
      const int64_t first_visible = T - Bq - w + 1;
      const int64_t poison_end = first_visible <= 0 ? 0 : first_visible / Bk * Bk;
      for (int64_t j = 0; j < poison_end; ++j)
        for (int64_t d = 0; d < 4; ++d) {
          k.set({0, h, j, d}, std::nan(""));
          v.set({0, h, j, d}, std::nan(""));
        }
    }
    AttnConfig cfg;
    cfg.window = windows;
    cfg.block_q = Bq;
    cfg.block_k = Bk;
    ag::Variable q(g.normal({1, H, Bq, 4}), true), kv(k, true), vv(v, true);
    AttnOutput o = fused_attention(q, kv, vv, cfg);  // queries are the last Bq positions
    for (double x : o.out.value().to_vector()) ASSERT_TRUE(std::isfinite(x));
    ag::sum_all(o.out).backward();
    for (double x : q.grad().to_vector()) ASSERT_TRUE(std::isfinite(x));
  }
}
