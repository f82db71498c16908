#include "attention/accounting.h"

#include <algorithm>

namespace hz::attn {

LayerCost attention_cost(const AttnConfig& cfg, int64_t H, int64_t Tq, int64_t Tk, int64_t D) {
  LayerCost c;
  const int64_t B = cfg.documents ? cfg.documents->batch() : 1;
  const AttnKernelParams P = make_kernel_params(cfg, B, H, 1, Tq, Tk, D);
  const int64_t Bq = P.block_q, Bk = P.block_k;
  for (int64_t h = 0; h < H; ++h) {
    HeadCost hc;
    hc.window = P.window[h];
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t i = 0; i < Tq; ++i) hc.visible_pairs += visible_count(P, b, h, i);
      for (int64_t i0 = 0; i0 < Tq; i0 += Bq) {
        const BlockSpans s = key_block_spans(P, b, h, i0, std::min(Tq, i0 + Bq) - 1, Bk);
        hc.blocks += spans_blocks(s);
        hc.boundary_blocks += spans_blocks(s) - spans_full_blocks(s);
      }
    }
    c.visible_pairs += hc.visible_pairs;
    c.blocks += hc.blocks;
    c.heads.push_back(hc);
  }
  c.dense_pairs = B * H * Tq * Tk;
  c.flops_fwd = 4.0 * D * static_cast<double>(c.visible_pairs);
  c.flops_fwd_bwd = c.flops_fwd * 3.5;
  return c;
}

}  // namespace hz::attn
