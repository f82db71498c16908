// Horizon: models of other frameworks as the start of a run. checkpoint.init_from may name a
// directory that is neither a Horizon run nor a checkpoint; train/ knows no such format itself. A
// library above it registers a source for one (study/hf_models.h: Hugging Face directories, which
// `horizon` registers at startup): it recognises the directory, supplies the model fields and the
// tokenizer a recipe leaves out (recipe.h, checkpoint.init_from) and loads the weights onto the
// run's model (trainer.h).
#pragma once
#include <functional>
#include <map>
#include <string>

#include "core/tensor.h"
#include "nn/transformer.h"

namespace hz::train {

struct ForeignWeights {
  std::map<std::string, Tensor> weights;  // under Horizon parameter names, f32
  nn::ModelConfig config;                 // the model the directory describes (before the recipe's changes)
  std::string config_file;                // where that description is (messages), e.g. DIR/config.json
  std::string summary;                    // for the run log, e.g. "Hugging Face LlamaForCausalLM, 20 tensors"
};

struct ModelSource {
  std::string name;  // e.g. "Hugging Face"
  std::function<bool(const std::string& path)> recognises;
  // The model config the directory describes; throws a ValueError naming what is wrong.
  std::function<nn::ModelConfig(const std::string& dir)> config;
  // data.tokenizer for a recipe that names none ("" when the directory holds no tokenizer).
  std::function<std::string(const std::string& dir)> tokenizer;
  // The weights for the run's model `c` (the directory's model after the recipe's changes).
  std::function<ForeignWeights(const std::string& dir, const nn::ModelConfig& c)> weights;
};

// Adds a source; a second source of the same name is ignored (registering is idempotent).
void register_model_source(ModelSource s);
// The first registered source that recognises `path`, or null.
const ModelSource* find_model_source(const std::string& path);

}  // namespace hz::train
