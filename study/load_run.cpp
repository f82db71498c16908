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
  // Only the model's tensors are read (an evaluation needs no optimizer state), and only once the
  // shapes the file declares are the model's that its recipe builds: nothing is allocated for a
  // tensor the model does not have or of a size it does not have.
  train::LoadOptions opt;
  opt.optimizer = false;
  opt.check = [&](const train::CheckpointManifest& m) {
    HZ_CHECK(m.meta.count("recipe"), ValueError, lr.checkpoint, ": checkpoint carries no recipe");
    const train::Recipe trained = train::parse_trained_recipe(m.meta.at("recipe"), lr.checkpoint + ":recipe");
    if (!overrides.empty()) {  // an override may name a JSON file of numbers (eval.longrope_long_factors)
      const train::RecipeFiles files = train::read_recipe_files(m.meta.at("recipe"), lr.checkpoint + ":recipe", overrides);
      lr.recipe = train::parse_trained_recipe(m.meta.at("recipe"), lr.checkpoint + ":recipe", overrides, &files);
    } else {
      lr.recipe = trained;
    }
    train::check_architecture(trained, lr.recipe, lr.checkpoint);  // a checkpoint's architecture is its own
    lr.model = std::make_unique<nn::Transformer>(train::model_config_at(lr.recipe, m.step), 0, /*draw_weights=*/false);
    size_t found = 0;
    for (auto& [name, v] : lr.model->named_parameters()) {
      const auto it = m.model.find(name);
      if (it == m.model.end()) continue;  // load_state_dict names what is missing
      ++found;
      HZ_CHECK(it->second.shape == v->shape(), ValueError, lr.checkpoint, ": parameter '", name, "' is stored with shape ",
               shape_str(it->second.shape), " but the checkpoint's own recipe builds ", shape_str(v->shape()),
               ": the file is damaged or crafted; use an earlier checkpoint");
    }
    HZ_CHECK(found == m.model.size(), ValueError, lr.checkpoint, ": holds ", m.model.size() - found,
             " model tensor(s) that the checkpoint's own recipe does not build: the file is damaged or crafted");
  };
  const train::CheckpointData ck = train::load_checkpoint(lr.checkpoint, opt);
  lr.step = ck.step;
  lr.tokens_seen = ck.tokens_seen;
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
  attn::set_exact_f32_attention(lr.recipe.run.exact_f32_attention);
  return lr;
}

}  // namespace hz::study
