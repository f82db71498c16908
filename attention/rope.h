// Horizon: rotary position embedding as an op on q/k with explicit position ids.
//
// Pairs are (m, m + D/2) for m < D/2 (the "half split" layout); pair m rotates by p * w_m,
// p the position id of the token. Position ids are explicit so PI, LaMPE and decoding can remap
// them. Frequency tables implement every scaling of SPEC.md; YaRN's temperature is folded into
// cos/sin as mscale (so logits scale by mscale^2) and is applied nowhere else.
#pragma once
#include <vector>

#include "attention/spec.h"
#include "autograd/variable.h"

namespace hz::attn {

struct RopeFreqs {
  std::vector<double> inv_freq;  // D/2 angular frequencies w_m (0 = no rotation)
  double mscale = 1.0;           // multiplies cos and sin (YaRN temperature)
};

// Frequencies for `pos` at current sequence length T. C_train = the training context (for
// YaRN/dynamic NTK; 0 means pos.original_context, which then must be set).
RopeFreqs rope_frequencies(const PositionSpec& pos, int64_t head_dim, int64_t T);

// x (B, H, T, D) rotated by positions (T) i64. Differentiable in x.
ag::Variable apply_rope(const ag::Variable& x, const Tensor& positions, const RopeFreqs& f);
// Plain-tensor version (no autograd); `inverse` rotates by -angle (the backward).
Tensor rope_rotate(const Tensor& x, const Tensor& positions, const RopeFreqs& f, bool inverse);

}  // namespace hz::attn
