#include "train/surgery.h"

namespace hz::train {

nn::ModelConfig drope_config(const nn::ModelConfig& c, bool qk_norm) {
  nn::ModelConfig d = c;
  for (auto& k : d.kinds) {
    k.attn.pos.kind = attn::PosKind::None;
    k.attn.pos.scaling = attn::RopeScaling::None;
    if (qk_norm && k.attn.qk_norm == attn::QKNorm::None) k.attn.qk_norm = attn::QKNorm::Full;
  }
  return d;
}

void drop_positions(nn::Transformer& m) {
  for (auto& k : m.cfg.kinds) {
    k.attn.pos.kind = attn::PosKind::None;
    k.attn.pos.scaling = attn::RopeScaling::None;
  }
  for (auto& b : m.layers) {
    b->attn->spec.pos.kind = attn::PosKind::None;
    b->attn->spec.pos.scaling = attn::RopeScaling::None;
  }
}

SurgeryReport load_weights(nn::Transformer& m, const std::map<std::string, Tensor>& sd) {
  const nn::LoadReport r = m.load_state_dict(sd, /*strict=*/false);
  return {r.loaded, r.missing, r.unexpected};
}

std::unique_ptr<nn::Transformer> rebuild_model(const nn::Transformer& from, const nn::ModelConfig& c,
                                               uint64_t seed, SurgeryReport* report) {
  auto m = std::make_unique<nn::Transformer>(c, seed);
  SurgeryReport r = load_weights(*m, from.state_dict());
  if (report) *report = r;
  return m;
}

}  // namespace hz::train
