#include "study/load_run.h"

#include <filesystem>

#include "attention/fused.h"
#include "distributed/communicator.h"
#include "hf/hf.h"
#include "study/hf_models.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace fs = std::filesystem;

namespace hz::study {

namespace {
// A Horizon run directory or checkpoint: its recipe (plus overrides) and weights.
void load_horizon_run(const std::string& target, const std::vector<std::string>& overrides, LoadedRun& lr) {
  if (fs::is_directory(target)) {
    lr.run_dir = target;
    lr.checkpoint = train::find_latest_checkpoint(target + "/checkpoints");
    HZ_CHECK(!lr.checkpoint.empty(), ValueError, "no checkpoint in '", target, "/checkpoints'; train first");
  } else {
    lr.checkpoint = target;
    // <run>/checkpoints/step_<N>.h5 belongs to <run>; any other checkpoint to its own directory
    const fs::path parent = fs::path(target).parent_path();
    lr.run_dir = (parent.filename() == "checkpoints" ? parent.parent_path() : parent).string();
    if (lr.run_dir.empty()) lr.run_dir = ".";
  }
  const train::CheckpointData ck = train::load_checkpoint(lr.checkpoint);
  HZ_CHECK(ck.meta.count("recipe"), ValueError, lr.checkpoint, ": checkpoint carries no recipe");
  const train::Recipe trained = train::parse_trained_recipe(ck.meta.at("recipe"), lr.checkpoint + ":recipe");
  lr.recipe = overrides.empty() ? trained : train::parse_trained_recipe(ck.meta.at("recipe"), lr.checkpoint + ":recipe", overrides);
  train::check_architecture(trained, lr.recipe, lr.checkpoint);  // a checkpoint's architecture is its own
  lr.step = ck.step;
  lr.model = std::make_unique<nn::Transformer>(train::model_config_at(lr.recipe, ck.step), 0, /*draw_weights=*/false);
  lr.model->load_state_dict(ck.model, /*strict=*/true, lr.checkpoint);
}
}  // namespace

LoadedRun load_run(const std::string& target, const std::vector<std::string>& overrides) {
  LoadedRun lr;
  if (hf::is_hf_dir(target)) {
    lr.recipe = hf_recipe(target, overrides);
    lr.checkpoint = target;
    lr.run_dir = lr.recipe.run.out_dir + "/" + lr.recipe.run.name;
    lr.model = std::make_unique<nn::Transformer>(train::model_config_at(lr.recipe, 0), 0, /*draw_weights=*/false);
    lr.model->load_state_dict(hf::import_weights(target, lr.model->cfg), /*strict=*/true, target);
  } else {
    load_horizon_run(target, overrides, lr);
  }
  // evaluate where and how the run trained (override run.device / run.precision to change it)
  auto local = dist::make_local();
  lr.model->to(train::train_device(lr.recipe, *local));
  lr.model->compute_dtype = nn::compute_dtype_of(lr.recipe.run.precision);
  attn::set_attention_backend(lr.recipe.run.attention_backend);  // its CUDA calls: cuDNN / Horizon's kernels
  return lr;
}

}  // namespace hz::study
