// Horizon: model surgery. DroPE drops every layer's position encoding (identity rotation /
// no ALiBi bias) without touching a weight, optionally adding full QK-norm (gains start at 1);
// SWAN conversion is a config change (recipe swan.enabled) whose weights load by name from a
// RoPE checkpoint.
#pragma once
#include <memory>

#include "nn/transformer.h"

namespace hz::train {

// The config after DroPE: every kind's position encoding becomes none (RoPE scaling cleared);
// with qk_norm, kinds without QK-norm get full QK-norm.
nn::ModelConfig drope_config(const nn::ModelConfig& c, bool qk_norm);

// In place (no new parameters): every layer stops rotating / biasing by position.
void drop_positions(nn::Transformer& m);

struct SurgeryReport {
  std::vector<std::string> loaded, added, dropped;  // parameter names
};

// A new model of config `c` whose parameters are copied by name from `from`; parameters that
// `from` lacks keep their initialisation (e.g. QK-norm gains = 1). Shape mismatches throw.
std::unique_ptr<nn::Transformer> rebuild_model(const nn::Transformer& from, const nn::ModelConfig& c,
                                               uint64_t seed, SurgeryReport* report = nullptr);

// Load a state dict non-strictly and report by name what was loaded, added (kept init), dropped.
SurgeryReport load_weights(nn::Transformer& m, const std::map<std::string, Tensor>& sd);

}  // namespace hz::train
