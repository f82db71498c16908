#include "eval/inference.h"

namespace hz::eval {

ScopedInference::ScopedInference(nn::Transformer& m, const InferenceOptions& e, int64_t train_T, int64_t L) : m_(m) {
  for (auto& b : m.layers) saved_.push_back({b->attn->spec, b->attn->lampe});
  const double s = static_cast<double>(L) / train_T;
  for (auto& b : m.layers) {
    attn::AttentionSpec& sp = b->attn->spec;
    if (!e.rope_scaling.empty() && sp.pos.kind == attn::PosKind::Rope) {
      sp.pos.scaling = attn::parse_scaling(e.rope_scaling);
      sp.pos.factor = std::max(1.0, s);
      sp.pos.original_context = train_T;
    }
    if (e.swan_a > 0 && sp.pos.kind == attn::PosKind::None && sp.mask.kind == attn::MaskKind::Causal) {
      sp.logit.kind = attn::LogitKind::SwanRow;
      sp.logit.swan_a = e.swan_a;
    }
    if (e.drope_c != 0 && sp.logit.kind == attn::LogitKind::Identity) {
      sp.logit.kind = attn::LogitKind::Temperature;
      sp.logit.temp_c = e.drope_c;
    }
    if (e.lampe && sp.pos.kind == attn::PosKind::Rope) {
      attn::LampeConfig lc;
      lc.L = e.lampe_L > 0 ? e.lampe_L : 0.75 * train_T;
      lc.a = e.lampe_a;
      lc.b = e.lampe_b;
      lc.s_local = e.lampe_local;
      lc.s_sink = e.lampe_sink;
      b->attn->lampe = lc;
    }
  }
}

ScopedInference::~ScopedInference() {
  for (size_t i = 0; i < saved_.size(); ++i) {
    m_.layers[i]->attn->spec = saved_[i].first;
    m_.layers[i]->attn->lampe = saved_[i].second;
  }
}

}  // namespace hz::eval
