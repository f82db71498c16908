#include "train/surgery.h"

namespace hz::train {

namespace {
// One layer kind's position encoding after a full or partial drop.
void drop(attn::PositionSpec& pos, const DropeSection& part) {
  const bool rotary = pos.kind == attn::PosKind::Rope || pos.kind == attn::PosKind::PRope;
  if (part.partial() && rotary) {
    pos.rope_pairs = part.keep_pairs;
    pos.rope_fraction = part.keep_pairs.empty() ? part.keep_fraction : 1.0;
    pos.rope_select = part.keep_select;
    return;
  }
  pos.kind = attn::PosKind::None;
  pos.scaling = attn::RopeScaling::None;
}
}  // namespace

nn::ModelConfig drope_config(const nn::ModelConfig& c, bool qk_norm, const DropeSection& part) {
  nn::ModelConfig d = c;
  for (auto& k : d.kinds) {
    drop(k.attn.pos, part);
    if (qk_norm && k.attn.qk_norm == attn::QKNorm::None) k.attn.qk_norm = attn::QKNorm::Full;
  }
  return d;
}

void drop_positions(nn::Transformer& m, const DropeSection& part) {
  for (auto& k : m.cfg.kinds) drop(k.attn.pos, part);
  for (auto& b : m.layers) drop(b->attn->spec.pos, part);
}

SurgeryReport load_weights(nn::Transformer& m, const std::map<std::string, Tensor>& sd,
                           const std::string& source) {
  const nn::LoadReport r = m.load_state_dict(sd, /*strict=*/false, source);
  return {r.loaded, r.missing, r.unexpected};
}

std::unique_ptr<nn::Transformer> rebuild_model(const nn::Transformer& from, const nn::ModelConfig& c,
                                               uint64_t seed, SurgeryReport* report) {
  auto m = std::make_unique<nn::Transformer>(c, seed);
  SurgeryReport r = load_weights(*m, from.state_dict());
  if (report) *report = r;
  return m;
}

nn::ModelConfig swan_config(const nn::ModelConfig& in, const SwanSection& sw) {
  nn::ModelConfig c = in;
  attn::AttentionSpec base;
  for (const auto& k : c.kinds)
    if (k.attn.pos.kind == attn::PosKind::Rope) {
      base = k.attn;
      break;
    }
  attn::AttentionSpec global = base, local = base;
  global.pos.kind = attn::PosKind::None;
  global.mask = attn::MaskSpec{};
  local.pos.kind = attn::PosKind::Rope;
  if (sw.rope_base > 0) local.pos.rope_base = sw.rope_base;
  local.mask = attn::MaskSpec{};
  local.mask.kind = attn::MaskKind::Window;
  local.mask.window = sw.window;
  c.kinds = {{"global_nope", global}, {"swa_rope", local}};
  c.pattern = sw.pattern;
  c.overrides.clear();
  return c;
}

DropeOutcome apply_drope(const DropeSection& d, uint64_t seed, double current_lr, std::unique_ptr<nn::Transformer>& model,
                         std::unique_ptr<optim::Optimizer>& optimizer, const OptimizerFactory& make_optimizer) {
  DropeOutcome out;
  if (!d.qk_norm) {
    drop_positions(*model, d);
    if (d.reset_optimizer) optimizer = make_optimizer(*model, d.lr);
    return out;
  }
  SurgeryReport rep;
  std::map<std::string, Tensor> old_state;
  if (!d.reset_optimizer) optimizer->state_dict(old_state);
  model = rebuild_model(*model, drope_config(model->cfg, true, d), seed, &rep);
  auto fresh = make_optimizer(*model, d.reset_optimizer ? d.lr : current_lr);
  if (!d.reset_optimizer) {  // carry the state of every surviving parameter
    std::map<std::string, Tensor> merged;
    fresh->state_dict(merged);
    for (auto& [k, v] : old_state)
      if (merged.count(k)) merged[k] = v;
    fresh->load_state_dict(merged);
  }
  optimizer = std::move(fresh);
  out.rebuilt = true;
  out.new_params = rep.added.size();
  return out;
}

}  // namespace hz::train
