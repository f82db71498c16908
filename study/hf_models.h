// Horizon: Hugging Face directories as the starting point of runs and evaluations. hf/ maps their
// config.json and weights and knows no recipe; train/ knows recipes and no Hugging Face; this file
// joins the two.
#pragma once
#include <string>
#include <vector>

#include "train/recipe.h"

namespace hz::study {

// Lets train/ take a Hugging Face directory as checkpoint.init_from (train/model_source.h): the
// model fields and the tokenizer a recipe leaves out come from its config.json and tokenizer files,
// the weights from its safetensors. Idempotent; `horizon` calls it at startup, hf_recipe() and
// load_run() call it themselves.
void register_hf_models();

// The recipe of a Hugging Face directory: run.name = its name, the model from its config.json,
// data.seq_len = max_position_embeddings, data.tokenizer = its tokenizer; then the overrides.
train::Recipe hf_recipe(const std::string& dir, const std::vector<std::string>& overrides);

}  // namespace hz::study
