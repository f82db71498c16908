#include "attention/accounting.h"

#include <algorithm>

namespace hz::attn {

LayerCost attention_cost(const AttnConfig& cfg, int64_t H, int64_t Tq, int64_t Tk, int64_t D) {
  LayerCost c;
  const int64_t off = cfg.q_offset < 0 ? Tk - Tq : cfg.q_offset;
  const int64_t Bq = std::max<int64_t>(1, cfg.block_q), Bk = std::max<int64_t>(1, cfg.block_k);
  for (int64_t h = 0; h < H; ++h) {
    HeadCost hc;
    hc.window = cfg.window.empty() ? 0 : cfg.window[h];
    std::vector<KeyRange> rows(Tq);
    for (int64_t i = 0; i < Tq; ++i) {
      rows[i] = visible_keys(cfg, Tk, off + i, hc.window);
      hc.visible_pairs += std::max<int64_t>(0, rows[i].hi - rows[i].lo + 1);
    }
    for (int64_t i0 = 0; i0 < Tq; i0 += Bq) {
      const int64_t i1 = std::min(Tq, i0 + Bq) - 1;
      for (int64_t j0 = 0; j0 < Tk; j0 += Bk) {
        const int64_t j1 = std::min(Tk, j0 + Bk) - 1;
        bool any = false, all = true;
        for (int64_t i = i0; i <= i1; ++i) {
          const KeyRange r = rows[i];
          any |= r.lo <= r.hi && r.lo <= j1 && r.hi >= j0;
          all &= r.lo <= j0 && r.hi >= j1;
        }
        hc.blocks += any;
        hc.boundary_blocks += any && !all;
      }
    }
    c.visible_pairs += hc.visible_pairs;
    c.blocks += hc.blocks;
    c.heads.push_back(hc);
  }
  c.dense_pairs = H * Tq * Tk;
  c.flops_fwd = 4.0 * D * static_cast<double>(c.visible_pairs);
  c.flops_fwd_bwd = c.flops_fwd * 3.5;
  return c;
}

}  // namespace hz::attn
