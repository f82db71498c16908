// Horizon: rotary position embedding as an op on q/k with explicit position ids.
//
// Pairs are (m, m + D/2) for m < D/2 (the "half split" layout, transformers' rotate_half); pair m
// rotates by p * w_m, w_m = base^(-2m/D), p the position id of the token. Position ids are explicit
// so PI, LaMPE and decoding can remap them. Frequency tables implement every scaling of docs/methods.md;
// YaRN's temperature is folded into cos/sin as mscale (so logits scale by mscale^2) and is applied
// nowhere else. With s the factor and C = C_train (original_context):
//   pi          w'_m = w_m / s
//   ntk         base' = base * s^(D/(D-2))
//   dynamic_ntk base' = base * s_T^(D/(D-2)), s_T = factor * T/C - (factor - 1) when T > C, else 1
//               (transformers' "dynamic"; factor 1 gives docs/methods.md's s_T = T/C)
//   yarn        w'_m = (1 - k_m) w_m / s + k_m w_m, cos/sin times mscale (0.1 ln s + 1 unless
//               yarn_mscale is given), with the share k_m of the original frequency kept:
//                 ramp "rotations" (docs/methods.md, the paper): k_m = clamp((r_m - alpha)/(beta - alpha), 0, 1),
//                   r_m = C w_m / (2 pi) rotations over the training length;
//                 ramp "index" (transformers and the YaRN reference code): k_m = 1 - clamp((m - lo) /
//                   (hi - lo), 0, 1) with lo, hi the pair indices where r_m equals beta and alpha,
//                   lo = D ln(C / (2 pi beta)) / (2 ln base), hi likewise with alpha, rounded outward
//                   (floor / ceil) when yarn_truncate, then clamped to [0, D - 1] (hi += 0.001 if equal).
//               The two ramps differ for pairs between the ends, so an imported checkpoint keeps
//               the ramp it was trained with.
//   llama3      the rotations ramp with alpha = low_freq_factor, beta = high_freq_factor and no
//               temperature (transformers' "llama3", identical to its wavelength formulation).
//   longrope    LongRoPE's searched per-pair rescale factors: w'_m = w_m / lambda_m, lambda the long
//               factors when T > C and the short ones (default 1) otherwise; cos/sin times
//               sqrt(1 + ln s / ln C) when s > 1 (yarn_mscale when given), transformers' "longrope".
// Then pairs left out by rope_pairs / rope_fraction get 0, and rope_freq_factors (one per pair)
// multiply what remains: w_m <- w_m * m_m.
#pragma once
#include <vector>

#include "attention/spec.h"
#include "autograd/variable.h"

namespace hz::attn {

struct RopeFreqs {
  std::vector<double> inv_freq;  // D/2 angular frequencies w_m (0 = no rotation)
  double mscale = 1.0;           // multiplies cos and sin (YaRN temperature)
};

// The pairs that rotate under pos's per-dimension control (rope_pairs, or rope_fraction by
// rope_select), as a mask over the D/2 pairs.
std::vector<bool> rotating_pairs(const PositionSpec& pos, int64_t half);

// Frequencies for `pos` at current sequence length T (pairs that do not rotate: 0). C_train = the training length (for
// YaRN/dynamic NTK; 0 means pos.original_context, which then must be set).
RopeFreqs rope_frequencies(const PositionSpec& pos, int64_t head_dim, int64_t T);

// x (B, H, T, D) rotated by positions (T) or (B, T) i64 (per sequence: packed documents with
// position reset). Differentiable in x.
ag::Variable apply_rope(const ag::Variable& x, const Tensor& positions, const RopeFreqs& f);
// Plain-tensor version (no autograd); `inverse` rotates by -angle (the backward).
Tensor rope_rotate(const Tensor& x, const Tensor& positions, const RopeFreqs& f, bool inverse);

// Rotation by given angles, the op of learned and accumulated angles (rope_angles, learned_freqs):
// x (B, Hx, T, D), angles (B or 1, G, T, D/2) with Hx % G == 0 (head h uses group h / (Hx / G));
// pair (m, m + D/2), as in apply_rope, rotates by angles[.., m] (inverse: by minus it), then times
// mscale. Differentiable in x (the adjoint: the inverse rotation times mscale) and in the angles:
// with (a', b') the rotated pair and (g_a, g_b) their gradients, dL/dtheta = sum over the group's
// heads of g_b a' - g_a b' (core/ops.h rotate_angles_grad; minus it for the inverse).
ag::Variable rotate_by_angles(const ag::Variable& x, const ag::Variable& angles, double mscale, bool inverse = false);
// The angles' dtype for activations x: f64 on the CPU (a running sum over a long sequence keeps its
// digits, as FoX's c) and for f64 x, f32 otherwise.
DType angle_dtype(const Tensor& x);

}  // namespace hz::attn
