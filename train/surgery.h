// Horizon: model surgery. DroPE drops every layer's position encoding (identity rotation /
// no ALiBi bias) without touching a weight, optionally adding full QK-norm (gains start at 1);
// SWAN conversion is a config change (recipe swan.enabled, swan_config()) whose weights load by
// name from a RoPE checkpoint.
#pragma once
#include <functional>
#include <memory>

#include "nn/transformer.h"
#include "optim/optimizer.h"
#include "train/surgery_options.h"

namespace hz::train {

// The config after DroPE: every kind's position encoding becomes none (RoPE scaling cleared);
// with qk_norm, kinds without QK-norm get full QK-norm. Partial DroPE (part.partial()): RoPE and
// p-RoPE kinds keep rotating only part's pairs (keep_pairs, or keep_fraction by keep_select), the
// other dimensions become NoPE dimensions; ALiBi is dropped as before.
nn::ModelConfig drope_config(const nn::ModelConfig& c, bool qk_norm, const DropeSection& part = {});

// In place (no new parameters): every layer stops rotating / biasing by position (partial: as
// drope_config).
void drop_positions(nn::Transformer& m, const DropeSection& part = {});

struct SurgeryReport {
  std::vector<std::string> loaded, added, dropped;  // parameter names
};

// A new model of config `c` whose parameters are copied by name from `from`; parameters that
// `from` lacks keep their initialisation (e.g. QK-norm gains = 1). Shape mismatches throw.
std::unique_ptr<nn::Transformer> rebuild_model(const nn::Transformer& from, const nn::ModelConfig& c,
                                               uint64_t seed, SurgeryReport* report = nullptr);

// Load a state dict non-strictly and report by name what was loaded, added (kept init), dropped.
SurgeryReport load_weights(nn::Transformer& m, const std::map<std::string, Tensor>& sd,
                           const std::string& source = "");

// SWAN stack from a config: kinds global_nope (NoPE, causal) and swa_rope (RoPE, window), both
// copied from c's first RoPE kind (logit transform, QK-norm), laid out by s.pattern.
nn::ModelConfig swan_config(const nn::ModelConfig& c, const SwanSection& s);

// DroPE inside a run (drope.at_step), applied at the start of that step: every position
// encoding is dropped; with drope.qk_norm the model is rebuilt with full QK-norm (gains 1) and
// the optimizer state of every surviving parameter carried over unless drope.reset_optimizer,
// which starts a fresh optimizer at drope.lr. `make_optimizer(model, lr)` builds an optimizer.
struct DropeOutcome {
  bool rebuilt = false;     // the model object was replaced (gradient hooks must be remade)
  size_t new_params = 0;
};
using OptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(nn::Transformer&, double lr)>;
DropeOutcome apply_drope(const DropeSection& d, uint64_t seed, double current_lr, std::unique_ptr<nn::Transformer>& model,
                         std::unique_ptr<optim::Optimizer>& optimizer, const OptimizerFactory& make_optimizer);

}  // namespace hz::train
