// Horizon: the options of model surgery (train/surgery.h) as the recipe's drope and swan sections
// hold them. Its own header so that recipe.h and surgery.h each include it and not one another.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "attention/spec.h"

namespace hz::train {

struct DropeSection {
  int64_t at_step = -1;               // >= 0: drop every layer's position encoding at this step
  bool qk_norm = false;               // add QK-norm (full) when dropping; gains start at 1
  bool reset_optimizer = false;       // fresh optimizer state and schedule at the drop
  double lr = 1e-3;                   // lr after a reset
  int64_t warmup_steps = 70;          // warmup after a reset
  // Partial DroPE: keep RoPE on these pairs instead of dropping it everywhere (rope_pairs, or
  // keep_fraction of the pairs chosen by keep_select: high | low | uniform); 0 and empty: drop all.
  std::vector<int64_t> keep_pairs;
  double keep_fraction = 0.0;
  attn::RopeSelect keep_select = attn::RopeSelect::High;
  bool partial() const { return !keep_pairs.empty() || keep_fraction > 0; }
};

struct SwanSection {
  bool enabled = false;               // convert the model to a SWAN stack (with init_from: RoPE -> SWAN)
  std::vector<std::string> pattern{"global_nope", "swa_rope", "swa_rope", "swa_rope"};
  int64_t window = 512;
  double rope_base = 0;               // 0: keep the RoPE layers' base
};

}  // namespace hz::train
