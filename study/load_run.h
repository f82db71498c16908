// Horizon: a trained model ready to evaluate. load_run opens a run directory, a checkpoint or a
// Hugging Face directory: the recipe (the run's config.yaml as the checkpoint carries it, or for a
// Hugging Face directory hf_recipe(), study/hf_models.h; plus overrides) and the model with its
// weights, placed on the device and at the precision the run trained with.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "nn/transformer.h"
#include "train/recipe.h"

namespace hz::study {

struct LoadedRun {
  train::Recipe recipe;
  std::unique_ptr<nn::Transformer> model;
  std::string run_dir, checkpoint;
  int64_t step = 0;
  int64_t tokens_seen = 0;        // training tokens up to the checkpoint (0 for a Hugging Face directory)
  bool results_written = false;  // set by evaluate_run: false when run_dir is read-only (published checkpoints)
};
LoadedRun load_run(const std::string& run_dir_or_checkpoint, const std::vector<std::string>& overrides);

}  // namespace hz::study
