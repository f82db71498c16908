// Horizon: the fields of an attention layer kind, next to the spec they fill (attention/spec.h): the one
// declaration of each per-layer field. A field's row gives its recipe name (model.layer_kinds.NAME.*),
// which is also its config.json key in a HorizonForCausalLM export (layer_kinds.NAME.*, hf/horizon.cpp),
// its role, range and documentation, and what Hugging Face's stock architectures (Llama, Mistral, Qwen2,
// SmolLM3: hf/) do with a value other than its default. Everything per field is read from here: the recipe
// (train/recipe_yaml.cpp: reader, writer, schema, checks; core/fields.h), the HorizonForCausalLM config and its
// table hf/remote/horizon_fields.json (hf/horizon.cpp), the stock export's refusals (hf/config.cpp) and
// describe()'s toggles (spec.cpp). tests/attention/spec_fields_test.cpp holds the rows to the structs'
// members, so a member without a row fails a test.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "attention/spec.h"
#include "core/fields.h"

namespace hz::attn {

// What a stock export (hf/config.cpp) does with a value other than the field's default:
//   expressed  it writes it: rope_theta / rope_parameters, sliding_window / layer_types, NoPE layers
//              (pos none, SmolLM3), where it also checks that the layers agree
//   refused    no stock architecture computes it: the export names the field, its value and the words
//              below, and the model leaves as HorizonForCausalLM instead
//   via        read only under another field's setting (`via`), which is expressed or refused there
enum class Stock : uint8_t { Expressed, Refused, Via };
inline const char* stock_name(Stock s) {
  return s == Stock::Expressed ? "expressed" : s == Stock::Refused ? "refused" : "via";
}

struct SpecField : Field {
  Stock stock = Stock::Expressed;
  const char* refusal = nullptr;                   // refused: what it is and why no stock architecture has it
  const char* const* value_refusals = nullptr;     // refused enumeration: the words per value (nullptr: expressed)
  const char* via = nullptr;                       // via: the field whose setting decides
  bool (*when)(const AttentionSpec&) = nullptr;    // refused only where this holds (nullptr: always)
  bool described = false;                          // describe() shows it when not at its default
  SpecField shown() const { SpecField f = *this; f.described = true; return f; }
};
inline SpecField expressed(const Field& f) { return {f}; }
inline SpecField refused(const Field& f, const char* words, bool (*when)(const AttentionSpec&) = nullptr) {
  SpecField s{f};
  s.stock = Stock::Refused;
  s.refusal = words;
  s.when = when;
  return s;
}
// An enumeration refused for some of its values: one entry per value, nullptr where stock expresses it.
template <class E, size_t N>
SpecField refused_values(const Field& f, const char* const (&words)[N], bool (*when)(const AttentionSpec&) = nullptr) {
  static_assert(N == static_cast<size_t>(E::Count), "one entry per value of the enumeration");
  SpecField s{f};
  s.stock = Stock::Refused;
  s.value_refusals = words;
  s.when = when;
  return s;
}
inline SpecField via(const Field& f, const char* field) {
  SpecField s{f};
  s.stock = Stock::Via;
  s.via = field;
  return s;
}

namespace stock {
inline constexpr const char* kPos[] = {
    nullptr, nullptr,
    "p-RoPE: transformers' partial rotary rotates the first dims at standard frequencies, not p-RoPE's log-spaced ones",
    "ALiBi: no Llama-family architecture adds position biases"};
inline constexpr const char* kMask[] = {
    nullptr, nullptr, "SCOPE per-head scopes: no standard architecture gives each head its own window"};
inline constexpr const char* kLogit[] = {
    nullptr, "scale_invariant logits: the Llama family computes plain softmax(q.k / sqrt(d))",
    "logn logits: the Llama family computes plain softmax(q.k / sqrt(d))",
    "swan_row logits: the Llama family computes plain softmax(q.k / sqrt(d))",
    "temperature logits: the Llama family computes plain softmax(q.k / sqrt(d))"};
inline constexpr const char* kQKNorm[] = {
    nullptr,
    "whole-projection QK-norm (DroPE's): no Llama-family architecture normalises the whole q/k projection "
    "(recalibrate without drope.qk_norm to export)",
    "per-head QK-norm: Horizon exports Llama/Mistral/Qwen2/SmolLM3, none of which has it"};
inline constexpr const char* kAdditive[] = {
    nullptr, "ALiBi beside the position encoding: no Llama-family architecture adds position biases",
    "GRAPE's additive form: no Llama-family architecture adds a gated distance bias",
    "GRAPE's additive form: no Llama-family architecture adds a gated distance bias",
    "GRAPE's additive form: no Llama-family architecture adds a gated distance bias"};
inline constexpr const char* kGate[] = {
    nullptr, "gated attention output: Horizon exports Llama/Mistral/Qwen2/SmolLM3, none of which gates the attention output",
    "gated attention output: Horizon exports Llama/Mistral/Qwen2/SmolLM3, none of which gates the attention output"};
inline constexpr const char* kRopeAngles[] = {
    nullptr, "accumulated RoPE angles: the Llama family rotates by fixed position angles, not learned token-dependent "
             "steps"};
inline constexpr const char* kLearnedFreqs[] = {
    nullptr, "learned RoPE frequencies (GRAPE-M): no stock config carries trained per-pair frequency factors",
    "learned RoPE frequencies per head (GRAPE-M): the Llama family shares one frequency table across heads"};
// partial RoPE matters on a RoPE layer (p-RoPE is refused as such, a NoPE layer rotates nothing)
inline bool rotates(const AttentionSpec& s) { return s.pos.kind == PosKind::Rope; }
// temperature with beta 1 and c 0 is the identity
inline bool not_identity(const AttentionSpec& s) {
  return !(s.logit.kind == LogitKind::Temperature && s.logit.beta == 1.0 && s.logit.temp_c == 0.0);
}
}  // namespace stock

// V provides operator()(path, T& value, const SpecField&) for int64_t, double, bool, std::string and vectors
// of int64_t / double, and enumeration(path, E& value, const SpecField&, parse, name) for enums (a visitor
// that takes a const Field& reads the recipe's part only).
template <class V>
void visit_spec_fields(const std::string& p, AttentionSpec& s, V& v) {
  v.enumeration(p + ".pos", s.pos.kind,
                refused_values<PosKind>(arch("position encoding: none | rope | prope | alibi"), stock::kPos), parse_pos,
                static_cast<const char* (*)(PosKind)>(name));
  v(p + ".rope_base", s.pos.rope_base, expressed(arch("RoPE base (w_m = base^(-2m/d))").above(0)));
  v.enumeration(p + ".rope_scaling", s.pos.scaling,
                expressed(infer("RoPE scaling: none | pi | ntk | dynamic_ntk | yarn | llama3 | longrope")),
                parse_scaling, static_cast<const char* (*)(RopeScaling)>(name));
  v(p + ".rope_factor", s.pos.factor,
    expressed(infer("extension factor s for pi / ntk / yarn / llama3; dynamic_ntk: s = factor T/C - (factor - 1)").above(0)));
  v(p + ".rope_original_context", s.pos.original_context,
    expressed(infer("C_train for yarn / llama3 / dynamic_ntk (0 = data.seq_len)").at_least(0)));
  v(p + ".yarn_alpha", s.pos.yarn_alpha,
    expressed(infer("YaRN: pairs under alpha rotations over C_train are interpolated (beta_slow)").at_least(0)));
  v(p + ".yarn_beta", s.pos.yarn_beta,
    expressed(infer("YaRN: pairs over beta rotations keep their frequency (beta_fast)").at_least(0)));
  v.enumeration(p + ".yarn_ramp", s.pos.yarn_ramp,
                expressed(infer("YaRN ramp: rotations (docs/methods.md) | index (transformers)")), parse_yarn_ramp,
                static_cast<const char* (*)(YarnRamp)>(name));
  v(p + ".yarn_truncate", s.pos.yarn_truncate,
    expressed(infer("YaRN index ramp: round its ends outward (transformers' truncate)")));
  v(p + ".yarn_mscale", s.pos.yarn_mscale,
    expressed(infer("YaRN / LongRoPE cos/sin multiplier (0 = YaRN's 0.1 ln s + 1, LongRoPE's sqrt(1 + ln s / ln C_train))")
                  .at_least(0)));
  v(p + ".llama3_low_freq_factor", s.pos.llama3_low_freq_factor,
    expressed(infer("llama3: pairs under this many rotations over C_train are divided by s").above(0)));
  v(p + ".llama3_high_freq_factor", s.pos.llama3_high_freq_factor,
    expressed(infer("llama3: pairs over this many rotations keep their frequency").above(0)));
  v(p + ".prope_fraction", s.pos.prope_fraction, via(arch("p-RoPE: fraction of pairs that rotate").in(0, 1), "pos"));
  v(p + ".prope_base_eff", s.pos.prope_base_eff,
    via(arch("p-RoPE: frequencies log-spaced in [1/base_eff, 1]").above(0), "pos"));
  v(p + ".rope_pairs", s.pos.rope_pairs,
    refused(arch("partial RoPE: the frequency pairs that rotate (0 = fastest; empty = by rope_fraction)").at_least(0),
            "partial RoPE: the Llama family rotates every frequency pair", stock::rotates));
  v(p + ".rope_fraction", s.pos.rope_fraction,
    refused(arch("partial RoPE / HoPE: fraction of the D/2 pairs that rotate, the rest are NoPE dims").in(0, 1),
            "partial RoPE: the Llama family rotates every frequency pair", stock::rotates));
  v(p + ".rope_freq_factors", s.pos.rope_freq_factors,
    refused(infer("per-pair RoPE frequency factors m (head_dim/2 values, pair 0 the fastest): w_m <- w_m * m_m after any "
                  "scaling ([] = none; 1/s everywhere = pi; LongRoPE factors, clipped RoPE's taper, 0 = a pair that stops "
                  "rotating)")
                .at_least(0),
            "per-pair RoPE frequency factors: no stock config carries them exactly"));
  v(p + ".longrope_long_factors", s.pos.longrope_long_factors,
    expressed(infer("LongRoPE rescale factors lambda_m (rope_scaling longrope): w_m <- w_m / lambda_m beyond C_train "
                    "(head_dim/2 values; a list, or a JSON file: a list, LongRoPE's {long_factor, short_factor}, a "
                    "config.json's rope_scaling)")
                  .above(0)));
  v(p + ".longrope_short_factors", s.pos.longrope_short_factors,
    expressed(infer("LongRoPE rescale factors within C_train ([] = 1; a list or a JSON file as longrope_long_factors)")
                  .above(0)));
  // learned angles (h58-rot: arXiv 2606.24975's accumulated rotations, GRAPE's learned frequencies)
  v.enumeration(p + ".rope_angles", s.pos.rope_angles,
                refused_values<RopeAngles>(arch("RoPE's angles: position (p_i w_m) | accumulated (theta_i = sum_{t<=i} "
                                                "w_m softplus(x_t W + b), learned token-dependent steps)"),
                                           stock::kRopeAngles),
                parse_rope_angles, static_cast<const char* (*)(RopeAngles)>(name));
  v(p + ".angles_per_head", s.pos.angles_per_head,
    via(arch("rope_angles accumulated: one angle sequence per KV head (false: one shared by every head)"),
        "rope_angles"));
  v(p + ".rotate_v", s.pos.rotate_v,
    refused(arch("rotate v_j by its angle theta_j and the attention output o_i back by -theta_i (pos rope)"),
            "rotated values: the Llama family rotates only queries and keys"));
  v.enumeration(p + ".learned_freqs", s.pos.learned_freqs,
                refused_values<LearnedFreqs>(arch("GRAPE-M learned frequency factors: none | layer | head (per KV head), "
                                                  "initialised to rope_freq_factors (or 1)"),
                                             stock::kLearnedFreqs),
                parse_learned_freqs, static_cast<const char* (*)(LearnedFreqs)>(name));
  v.enumeration(p + ".rope_select", s.pos.rope_select,
                via(arch("which pairs rope_fraction keeps: high (HoPE) | low | uniform"), "rope_fraction"),
                parse_rope_select, static_cast<const char* (*)(RopeSelect)>(name));
  v.enumeration(p + ".mask", s.mask.kind, refused_values<MaskKind>(arch("mask: causal | window | scope"), stock::kMask),
                parse_mask, static_cast<const char* (*)(MaskKind)>(name));
  v(p + ".window", s.mask.window, expressed(arch("sliding window W (mask: window)").at_least(0)));
  v(p + ".chunk", s.mask.chunk,
    refused(arch("chunked attention (Llama 4): keys from the query's chunk of C positions to itself, with any mask (0 = off)")
                .at_least(0).at_most(16777216),
            "chunked attention: Llama, Mistral, Qwen2 and SmolLM3 have no chunks (Llama4ForCausalLM's come with its "
            "mixture of experts)")
        .shown());
  v(p + ".sink_tokens", s.mask.sink_tokens,
    refused(arch("sink tokens (StreamingLLM): the first S positions of each document stay visible beside a window, scope "
                 "or chunk (0 = off)")
                .at_least(0).at_most(16777216),
            "sink tokens: Llama, Mistral, Qwen2 and SmolLM3 keep no first tokens beside a window")
        .shown());
  v(p + ".prefix", s.mask.prefix,
    refused(arch("prefix-LM: the first P positions of each document attend bidirectionally, the rest causally (0 = off; "
                 "below data.seq_len: the loss takes the targets after the prefix)")
                .at_least(0).at_most(16777216),
            "a prefix-LM mask: Llama, Mistral, Qwen2 and SmolLM3 attend causally throughout")
        .shown());
  v(p + ".scope_gamma", s.mask.scope_gamma, via(arch("SCOPE gamma (0 = auto, T^(1/H))").at_least(0), "mask"));
  v(p + ".scope_min", s.mask.scope_min, via(arch("SCOPE minimum scope").at_least(1), "mask"));
  v(p + ".scope_max", s.mask.scope_max, via(arch("SCOPE maximum scope (0 = T)").at_least(0), "mask"));
  v(p + ".scopes", s.mask.scopes,
    via(arch("SCOPE explicit scopes, one per query head (overrides gamma)").at_least(1), "mask"));
  v(p + ".freeze_scopes", s.mask.freeze_scopes, via(infer("SCOPE: keep the training scopes at longer T"), "mask"));
  v.enumeration(p + ".logit", s.logit.kind,
                refused_values<LogitKind>(
                    arch("logit transform: identity | scale_invariant | logn (= ssmax) | swan_row | temperature"),
                    stock::kLogit, stock::not_identity),
                parse_logit, static_cast<const char* (*)(LogitKind)>(name));
  v(p + ".tau", s.logit.tau, via(arch("scale_invariant tau").above(0), "logit"));
  v(p + ".logn_c", s.logit.logn_c, via(arch("logn: initial (or fixed) c"), "logit"));
  v(p + ".logn_learnable", s.logit.logn_learnable, via(arch("logn: c is a learned scalar per head"), "logit"));
  v(p + ".swan_a", s.logit.swan_a, via(arch("swan_row: g(n) = ln(a + n) / ln(a)").above(1), "logit"));
  v(p + ".beta", s.logit.beta, via(arch("temperature: beta").above(0), "logit"));
  v(p + ".temp_c", s.logit.temp_c, via(arch("temperature: beta = 1 + c ln s when != 0"), "logit"));
  v(p + ".logn_position", s.logit.logn_position,
    via(arch("logn: n = the query's position + 1 (LogN) instead of its visible keys (SSMax; logit: ssmax)"), "logit"));
  v(p + ".qtemp_alpha", s.logit.qtemp_alpha,
    refused(arch("Llama 4 NoPE temperature: logits x 1 + alpha ln(floor((p + 1) / beta) + 1) (0 = off)").at_least(0),
            "Llama 4's position temperature: Llama, Mistral, Qwen2 and SmolLM3 scale no logits by position"));
  v(p + ".qtemp_beta", s.logit.qtemp_beta,
    via(arch("Llama 4 NoPE temperature: beta (positions per step)").above(0), "qtemp_alpha"));
  v.enumeration(p + ".qk_norm", s.qk_norm,
                refused_values<QKNorm>(arch("QK-norm: none | full | per_head"), stock::kQKNorm).shown(), parse_qknorm,
                static_cast<const char* (*)(QKNorm)>(name));
  v.enumeration(p + ".gate", s.gate,
                refused_values<OutputGate>(
                    arch("gated attention output: none | head | element (o * sigmoid(x W_g) before wo)"), stock::kGate)
                    .shown(),
                parse_gate, static_cast<const char* (*)(OutputGate)>(name));
  v(p + ".sink", s.sink,
    refused(arch("attention sinks: a learned logit per head joins every row's softmax denominator (gpt-oss)"),
            "attention sinks: Horizon exports Llama/Mistral/Qwen2/SmolLM3, none of which has a sink logit")
        .shown());
  v(p + ".forget", s.forget,
    refused(arch("FoX forget gate: logits gain sum_{j<m<=i} log sigmoid(x_m w_h + b_h)"),
            "FoX forget gates: no Llama-family architecture decays its logits by a learned gate")
        .shown());
  v(p + ".diff", s.diff,
    refused(arch("DIFF Transformer V2: 2H query heads, output head h = A_2h V - sigmoid(x w_h) A_2h+1 V (pairs share k, v)"),
            "DIFF Transformer V2: no Llama-family architecture subtracts paired attention heads")
        .shown());
  v(p + ".forget_bias", s.forget_bias,
    via(arch("FoX: initial forget-gate bias b_h (0 as in FoX; larger = longer memory at init)"), "forget"));
  // GRAPE's additive form (h58-grape)
  v.enumeration(p + ".additive", s.additive,
                refused_values<AdditiveKind>(
                    arch("additive distance term beside pos (GRAPE-A): none | alibi (ALiBi's fixed slopes; not with pos "
                         "alibi) | key | query | query_key (logits gain -(p_i - p_j) omega_h softplus(u_h . k_j / "
                         "sqrt(D)), from q_i, or both)"),
                    stock::kAdditive)
                    .shown(),
                parse_additive, static_cast<const char* (*)(AdditiveKind)>(name));
  v(p + ".additive_learned_slope", s.additive_learned_slope,
    via(arch("GRAPE-A: omega_h = softplus(w_h) x ALiBi slope_h is learned (key | query | query_key; alibi's slopes "
             "stay fixed)"),
        "additive"));
}

// Visits the fields of `s` as visit_spec_fields does, and hands the visitor, beside each field, the same
// field of a default AttentionSpec: V provides operator()(path, T& value, const SpecField&, const T& dflt)
// and enumeration(path, E& value, const SpecField&, parse, name, const E& dflt).
namespace detail {
struct FieldAddresses {
  std::vector<const void*> at;
  template <class T>
  void operator()(const std::string&, T& x, const SpecField&) { at.push_back(&x); }
  template <class En, class P, class N>
  void enumeration(const std::string&, En& x, const SpecField&, P, N) { at.push_back(&x); }
};
template <class V>
struct WithDefaults {
  V& v;
  const std::vector<const void*>& d;
  size_t i = 0;
  template <class T>
  void operator()(const std::string& p, T& x, const SpecField& f) { v(p, x, f, *static_cast<const T*>(d.at(i++))); }
  template <class En, class P, class N>
  void enumeration(const std::string& p, En& x, const SpecField& f, P parse, N name) {
    v.enumeration(p, x, f, parse, name, *static_cast<const En*>(d.at(i++)));
  }
};
}  // namespace detail
template <class V>
void visit_spec_fields_with_defaults(const std::string& p, AttentionSpec& s, V& v) {
  AttentionSpec dflt;
  detail::FieldAddresses a;
  visit_spec_fields(p, dflt, a);
  detail::WithDefaults<V> w{v, a.at};
  visit_spec_fields(p, s, w);
}

// The members of the spec that are no field: set by the code, not by a recipe (scope_train_len: the
// length frozen SCOPE scopes were computed for, from the model's training length). The test that counts
// the structs' members against the rows subtracts them.
inline constexpr int kSpecMembersNotFields = 1;

}  // namespace hz::attn
