// Horizon: the slow twin of fused_attention, composed of primitive autograd ops. It
// materialises the (B, H, Tq, Tk) scores, so it is for tests only. The mask and the transform
// coefficients are built here by direct loops over (i, j) from docs/methods.md's definitions, written
// independently of the kernel's range arithmetic.
// Packed documents (cfg.documents) are read straight from their cumulative lengths. Sinks are an
// extra column of logits, FoX's decay a (Tq, Tk) bias from the prefix sums of log f.
#pragma once
#include "attention/fused.h"

namespace hz::attn {

ag::Variable reference_attention(const ag::Variable& q, const ag::Variable& k, const ag::Variable& v,
                                 const AttnConfig& cfg, const AttnTerms& terms = {});

}  // namespace hz::attn
