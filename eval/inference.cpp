#include "eval/inference.h"

namespace hz::eval {

ScopedInference::ScopedInference(nn::Transformer& m, const InferenceOptions& e, int64_t train_len, int64_t L) : m_(m) {
  for (auto& b : m.layers) saved_.push_back({b->attn->spec, b->attn->lampe});
  const double s = static_cast<double>(L) / train_len;
  int n_rope = 0, n_swan = 0, n_temp = 0, n_lampe = 0;  // layers each option reached
  bool learned_lampe = false;
  for (auto& b : m.layers) {
    attn::AttentionSpec& sp = b->attn->spec;
    if (e.rope_scaling && sp.pos.kind == attn::PosKind::Rope) {
      sp.pos.scaling = *e.rope_scaling;
      // dynamic NTK derives s from the length itself (factor 1: s = L / train_len)
      sp.pos.factor = sp.pos.scaling == attn::RopeScaling::DynamicNTK ? 1.0 : std::max(1.0, s);
      sp.pos.original_context = train_len;
      if (!e.longrope_long_factors.empty()) sp.pos.longrope_long_factors = e.longrope_long_factors;
      if (!e.longrope_short_factors.empty()) sp.pos.longrope_short_factors = e.longrope_short_factors;
      ++n_rope;
    }
    if (e.swan_a > 0 && sp.pos.kind == attn::PosKind::None && sp.mask.kind == attn::MaskKind::Causal) {
      sp.logit.kind = attn::LogitKind::SwanRow;
      sp.logit.swan_a = e.swan_a;
      ++n_swan;
    }
    if (e.drope_c != 0 && sp.logit.kind == attn::LogitKind::Identity) {
      sp.logit.kind = attn::LogitKind::Temperature;
      sp.logit.temp_c = e.drope_c;
      ++n_temp;
    }
    // LaMPE remaps fixed positions per region: learned or accumulated angles have none to remap
    if (e.lampe && sp.pos.kind == attn::PosKind::Rope && sp.pos.learned_angles()) learned_lampe = true;
    if (e.lampe && sp.pos.kind == attn::PosKind::Rope) {
      attn::LampeConfig lc;
      lc.L = e.lampe_L > 0 ? e.lampe_L : 0.75 * train_len;
      lc.a = e.lampe_a;
      lc.b = e.lampe_b;
      lc.s_local = e.lampe_local;
      lc.s_sink = e.lampe_sink;
      b->attn->lampe = lc;
      ++n_lampe;
    }
  }
  // an option that reaches no layer would silently change nothing: refuse it
  auto refuse = [&](bool asked, int n, const char* what) {
    if (!asked || n > 0) return;
    for (size_t i = 0; i < saved_.size(); ++i) {
      m_.layers[i]->attn->spec = saved_[i].first;
      m_.layers[i]->attn->lampe = saved_[i].second;
    }
    throw ValueError(what);
  };
  refuse(e.rope_scaling.has_value(), n_rope, "eval.rope_scaling: the model has no RoPE layer to scale; leave it empty");
  refuse((!e.longrope_long_factors.empty() || !e.longrope_short_factors.empty()) &&
             e.rope_scaling != attn::RopeScaling::LongRoPE,
         0, "eval.longrope_long_factors / longrope_short_factors: they are LongRoPE's; set eval.rope_scaling=longrope");
  for (auto& b : m.layers) {  // LongRoPE needs its factors, one per frequency pair
    const attn::PositionSpec& p = b->attn->spec.pos;
    const int64_t half = m.cfg.hdim() / 2;
    if (p.kind != attn::PosKind::Rope || p.scaling != attn::RopeScaling::LongRoPE) continue;
    refuse(p.longrope_long_factors.empty(), 0,
           "eval.rope_scaling=longrope: give the searched factors (eval.longrope_long_factors: a list or a JSON file)");
    refuse(static_cast<int64_t>(p.longrope_long_factors.size()) != half ||
               !(p.longrope_short_factors.empty() || static_cast<int64_t>(p.longrope_short_factors.size()) == half),
           0, ("eval.longrope_*_factors: the model's RoPE layers have " + std::to_string(half) + " frequency pairs").c_str());
  }
  refuse(e.swan_a > 0, n_swan, "eval.swan_a / fit_swan_a: the model has no global NoPE layer (pos none, mask causal) "
         "for SWAN row scaling; use it on SWAN or NoPE models");
  refuse(e.drope_c != 0, n_temp, "eval.drope_c / fit_drope_c: no layer has identity logits to put a temperature on");
  refuse(e.lampe, n_lampe, "eval.lampe: the model has no RoPE layer; LaMPE remaps RoPE positions");
  refuse(learned_lampe, 0,
         "eval.lampe: a RoPE layer has learned angles (rope_angles, learned_freqs or rotate_v), which LaMPE's position "
         "remapping does not take; evaluate without eval.lampe");
}

ScopedInference::~ScopedInference() {
  for (size_t i = 0; i < saved_.size(); ++i) {
    m_.layers[i]->attn->spec = saved_[i].first;
    m_.layers[i]->attn->lampe = saved_[i].second;
  }
}

}  // namespace hz::eval
