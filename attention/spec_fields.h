// Horizon: the recipe fields of an attention layer kind (model.layer_kinds.NAME.*), next to the spec
// they fill (attention/spec.h): a new ingredient adds its field here and nowhere above. The recipe
// (train/recipe.cpp) visits them with its reader, writer, schema and checks (core/fields.h).
#pragma once
#include <string>

#include "attention/spec.h"
#include "core/fields.h"

namespace hz::attn {

// V provides operator()(path, T& value, Field) for int64_t, double, bool, std::string and vectors of
// int64_t / double, and enumeration(path, E& value, Field, parse, name) for enums.
template <class V>
void visit_spec_fields(const std::string& p, AttentionSpec& s, V& v) {
  v.enumeration(p + ".pos", s.pos.kind, arch("position encoding: none | rope | prope | alibi"), parse_pos,
                static_cast<const char* (*)(PosKind)>(name));
  v(p + ".rope_base", s.pos.rope_base, arch("RoPE base (w_m = base^(-2m/d))").above(0));
  v.enumeration(p + ".rope_scaling", s.pos.scaling,
                infer("RoPE scaling: none | pi | ntk | dynamic_ntk | yarn | llama3 | longrope"),
                parse_scaling, static_cast<const char* (*)(RopeScaling)>(name));
  v(p + ".rope_factor", s.pos.factor, infer("extension factor s for pi / ntk / yarn / llama3; dynamic_ntk: s = factor T/C - (factor - 1)").above(0));
  v(p + ".rope_original_context", s.pos.original_context, infer("C_train for yarn / llama3 / dynamic_ntk (0 = data.seq_len)").at_least(0));
  v(p + ".yarn_alpha", s.pos.yarn_alpha, infer("YaRN: pairs under alpha rotations over C_train are interpolated (beta_slow)").at_least(0));
  v(p + ".yarn_beta", s.pos.yarn_beta, infer("YaRN: pairs over beta rotations keep their frequency (beta_fast)").at_least(0));
  v.enumeration(p + ".yarn_ramp", s.pos.yarn_ramp, infer("YaRN ramp: rotations (docs/methods.md) | index (transformers)"),
                parse_yarn_ramp, static_cast<const char* (*)(YarnRamp)>(name));
  v(p + ".yarn_truncate", s.pos.yarn_truncate, infer("YaRN index ramp: round its ends outward (transformers' truncate)"));
  v(p + ".yarn_mscale", s.pos.yarn_mscale,
    infer("YaRN / LongRoPE cos/sin multiplier (0 = YaRN's 0.1 ln s + 1, LongRoPE's sqrt(1 + ln s / ln C_train))").at_least(0));
  v(p + ".llama3_low_freq_factor", s.pos.llama3_low_freq_factor, infer("llama3: pairs under this many rotations over C_train are divided by s").above(0));
  v(p + ".llama3_high_freq_factor", s.pos.llama3_high_freq_factor, infer("llama3: pairs over this many rotations keep their frequency").above(0));
  v(p + ".prope_fraction", s.pos.prope_fraction, arch("p-RoPE: fraction of pairs that rotate").in(0, 1));
  v(p + ".prope_base_eff", s.pos.prope_base_eff, arch("p-RoPE: frequencies log-spaced in [1/base_eff, 1]").above(0));
  v(p + ".rope_pairs", s.pos.rope_pairs, arch("partial RoPE: the frequency pairs that rotate (0 = fastest; empty = by rope_fraction)").at_least(0));
  v(p + ".rope_fraction", s.pos.rope_fraction, arch("partial RoPE / HoPE: fraction of the D/2 pairs that rotate, the rest are NoPE dims").in(0, 1));
  v(p + ".rope_freq_factors", s.pos.rope_freq_factors,
    infer("per-pair RoPE frequency factors m (head_dim/2 values, pair 0 the fastest): w_m <- w_m * m_m after any "
          "scaling ([] = none; 1/s everywhere = pi; LongRoPE factors, clipped RoPE's taper, 0 = a pair that stops "
          "rotating)").at_least(0));
  v(p + ".longrope_long_factors", s.pos.longrope_long_factors,
    infer("LongRoPE rescale factors lambda_m (rope_scaling longrope): w_m <- w_m / lambda_m beyond C_train (head_dim/2 "
          "values; a list, or a JSON file: a list, LongRoPE's {long_factor, short_factor}, a config.json's rope_scaling)")
        .above(0));
  v(p + ".longrope_short_factors", s.pos.longrope_short_factors,
    infer("LongRoPE rescale factors within C_train ([] = 1; a list or a JSON file as longrope_long_factors)").above(0));
  v.enumeration(p + ".rope_select", s.pos.rope_select, arch("which pairs rope_fraction keeps: high (HoPE) | low | uniform"),
                parse_rope_select, static_cast<const char* (*)(RopeSelect)>(name));
  v.enumeration(p + ".mask", s.mask.kind, arch("mask: causal | window | scope"), parse_mask,
                static_cast<const char* (*)(MaskKind)>(name));
  v(p + ".window", s.mask.window, arch("sliding window W (mask: window)").at_least(0));
  v(p + ".chunk", s.mask.chunk,
    arch("chunked attention (Llama 4): keys from the query's chunk of C positions to itself, with any mask (0 = off)")
        .at_least(0).at_most(16777216));
  v(p + ".sink_tokens", s.mask.sink_tokens,
    arch("sink tokens (StreamingLLM): the first S positions of each document stay visible beside a window, scope "
         "or chunk (0 = off)")
        .at_least(0).at_most(16777216));
  v(p + ".prefix", s.mask.prefix,
    arch("prefix-LM: the first P positions of each document attend bidirectionally, the rest causally (0 = off; "
         "below data.seq_len: the loss takes the targets after the prefix)")
        .at_least(0).at_most(16777216));
  v(p + ".scope_gamma", s.mask.scope_gamma, arch("SCOPE gamma (0 = auto, T^(1/H))").at_least(0));
  v(p + ".scope_min", s.mask.scope_min, arch("SCOPE minimum scope").at_least(1));
  v(p + ".scope_max", s.mask.scope_max, arch("SCOPE maximum scope (0 = T)").at_least(0));
  v(p + ".scopes", s.mask.scopes, arch("SCOPE explicit scopes, one per query head (overrides gamma)").at_least(1));
  v(p + ".freeze_scopes", s.mask.freeze_scopes, infer("SCOPE: keep the training scopes at longer T"));
  v.enumeration(p + ".logit", s.logit.kind, arch("logit transform: identity | scale_invariant | logn (= ssmax) | swan_row | temperature"),
                parse_logit, static_cast<const char* (*)(LogitKind)>(name));
  v(p + ".tau", s.logit.tau, arch("scale_invariant tau").above(0));
  v(p + ".logn_c", s.logit.logn_c, arch("logn: initial (or fixed) c"));
  v(p + ".logn_learnable", s.logit.logn_learnable, arch("logn: c is a learned scalar per head"));
  v(p + ".swan_a", s.logit.swan_a, arch("swan_row: g(n) = ln(a + n) / ln(a)").above(1));
  v(p + ".beta", s.logit.beta, arch("temperature: beta").above(0));
  v(p + ".temp_c", s.logit.temp_c, arch("temperature: beta = 1 + c ln s when != 0"));
  v(p + ".logn_position", s.logit.logn_position,
    arch("logn: n = the query's position + 1 (LogN) instead of its visible keys (SSMax; logit: ssmax)"));
  v(p + ".qtemp_alpha", s.logit.qtemp_alpha,
    arch("Llama 4 NoPE temperature: logits x 1 + alpha ln(floor((p + 1) / beta) + 1) (0 = off)").at_least(0));
  v(p + ".qtemp_beta", s.logit.qtemp_beta, arch("Llama 4 NoPE temperature: beta (positions per step)").above(0));
  v.enumeration(p + ".qk_norm", s.qk_norm, arch("QK-norm: none | full | per_head"), parse_qknorm,
                static_cast<const char* (*)(QKNorm)>(name));
  v.enumeration(p + ".gate", s.gate, arch("gated attention output: none | head | element (o * sigmoid(x W_g) before wo)"),
                parse_gate, static_cast<const char* (*)(OutputGate)>(name));
  v(p + ".sink", s.sink, arch("attention sinks: a learned logit per head joins every row's softmax denominator (gpt-oss)"));
  v(p + ".forget", s.forget, arch("FoX forget gate: logits gain sum_{j<m<=i} log sigmoid(x_m w_h + b_h)"));
  v(p + ".diff", s.diff,
    arch("DIFF Transformer V2: 2H query heads, output head h = A_2h V - sigmoid(x w_h) A_2h+1 V (pairs share k, v)"));
  v(p + ".forget_bias", s.forget_bias, arch("FoX: initial forget-gate bias b_h (0 as in FoX; larger = longer memory at init)"));
}


}  // namespace hz::attn
