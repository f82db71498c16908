// Horizon: exact attention cost accounting. Visible (i, j) pairs per head come from the per-row
// key intervals the kernels use (attention/tiling.h's key_range and sink_range: O(T) per head);
// FLOPs count 4 D per visible pair forward (q.k and p.v, a multiply-add each = 2 FLOPs) and 2.5x
// that backward (five products instead of two). Block counts are tiling.h's key_block_spans, the
// blocks the kernels visit for the config's tiles. With packed documents (cfg.documents) every
// count covers all of the documents' sequences (B of them), else one sequence.
#pragma once
#include <cstdint>
#include <vector>

#include "attention/fused.h"

namespace hz::attn {

struct HeadCost {
  int64_t window = 0;
  int64_t visible_pairs = 0;
  int64_t blocks = 0;           // (query block, key block) pairs with >= 1 visible entry
  int64_t boundary_blocks = 0;  // of which partially masked
};

struct LayerCost {
  std::vector<HeadCost> heads;  // per query head
  int64_t visible_pairs = 0;    // all heads of one batch element (every sequence with documents)
  int64_t dense_pairs = 0;      // B * H * Tq * Tk (B = 1 without documents)
  double flops_fwd = 0;         // per batch element (every sequence with documents)
  double flops_fwd_bwd = 0;
  int64_t blocks = 0;
};

LayerCost attention_cost(const AttnConfig& cfg, int64_t H, int64_t Tq, int64_t Tk, int64_t D);

}  // namespace hz::attn
