// Horizon: Hugging Face directories as the starting point of runs and evaluations. hf/ maps their
// config.json and weights and knows no recipe; train/ knows recipes and no Hugging Face (its
// parser reads nothing but the recipe's text); this file joins the two, a step above the parser:
// a recipe whose checkpoint.init_from names a Hugging Face directory takes the model fields and the
// tokenizer it leaves out from the directory, and its run the directory's weights.
#pragma once
#include <string>
#include <vector>

#include "train/recipe.h"
#include "train/trainer.h"

namespace hz::study {

// train::parse_recipe, and where checkpoint.init_from names a Hugging Face directory and the recipe
// leaves out model fields or data.tokenizer, those from its config.json and tokenizer files
// (precedence: command line > file > config.json > defaults); likewise from a Horizon run's
// config.yaml where it names a run directory or a checkpoint in one (a fine-tuning recipe that gives
// no model trains the run's). What `horizon` and the sweeps read.
train::Recipe resolve_recipe(const std::string& yaml_text, const std::string& name,
                             const std::vector<std::string>& overrides = {});
train::Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides = {});

// train::train, with checkpoint.init_from's weights read from a Hugging Face directory when it
// names one (TrainOptions::init_weights).
train::TrainResult train(const train::Recipe& r, train::TrainOptions opt = {});

// The recipe of a Hugging Face directory: run.name = its name, the model from its config.json,
// data.seq_len = max_position_embeddings, data.tokenizer = its tokenizer; then the overrides.
train::Recipe hf_recipe(const std::string& dir, const std::vector<std::string>& overrides);

}  // namespace hz::study
