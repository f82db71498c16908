#include "study/hf_models.h"

#include <fmt/core.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>

#include "hf/hf.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace fs = std::filesystem;

namespace hz::study {

namespace {
// The Horizon run a checkpoint.init_from names: a run directory (its config.yaml) or a checkpoint
// file in a run's checkpoints/; "" for anything else. `checkpoint`: the file it starts from (a run
// directory's latest).
std::string horizon_run_of(const std::string& from, std::string& checkpoint) {
  std::error_code ec;
  const fs::path p(from);
  if (fs::is_directory(p, ec) && fs::is_regular_file(p / "config.yaml", ec)) {
    checkpoint = train::find_latest_checkpoint((p / "checkpoints").string());
    return p.string();
  }
  if (fs::is_regular_file(p, ec) && p.parent_path().filename() == "checkpoints" &&
      fs::is_regular_file(p.parent_path().parent_path() / "config.yaml", ec)) {
    checkpoint = p.string();
    return p.parent_path().parent_path().string();
  }
  return "";
}

}  // namespace

train::Recipe resolve_recipe(const std::string& text, const std::string& file, const std::vector<std::string>& overrides) {
  const train::RecipeFiles files = train::read_recipe_files(text, file, overrides);  // the factor lists' JSON files
  const std::string dir = train::model_fill_dir(text, file, overrides);
  if (dir.empty()) return train::parse_recipe(text, file, overrides, nullptr, &files);
  train::ModelFill fill;
  if (!hf::is_hf_dir(dir)) {  // a Horizon run: the model it trained, and its tokenizer
    std::string checkpoint;
    const std::string run = horizon_run_of(dir, checkpoint);
    if (run.empty()) return train::parse_recipe(text, file, overrides, nullptr, &files);
    train::Recipe trained;
    try {
      trained = train::load_trained_recipe(run + "/config.yaml");
    } catch (const train::RecipeError& e) {
      throw train::RecipeError(file + ": checkpoint.init_from names run " + run + ", whose config.yaml does not load: " +
                               e.what());
    }
    // the model the checkpoint holds: after DroPE where the run dropped its positions before it
    const int64_t step = train::parse_step_name(fs::path(checkpoint).filename().string());
    fill.model = train::model_config_at(trained, step >= 0 ? step : trained.train.steps);
    fill.tokenizer = trained.data.tokenizer;
    return train::parse_recipe(text, file, overrides, &fill, &files);
  }
  try {
    fill.model = hf::import_config_dir(dir);
  } catch (const ValueError& e) {
    throw train::RecipeError(file + ": checkpoint.init_from: " + e.what());
  }
  fill.tokenizer = hf::tokenizer_spec(dir);
  return train::parse_recipe(text, file, overrides, &fill, &files);
}

train::Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides) {
  return resolve_recipe(train::read_recipe_file(path), path, overrides);
}

train::TrainResult train(const train::Recipe& r, train::TrainOptions opt) {
  const std::string dir = r.checkpoint.init_from;
  if (!dir.empty() && hf::is_hf_dir(dir) && !opt.init_weights) {
    opt.init_weights = [dir](const nn::ModelConfig& c) {
      hf::ImportReport rep;
      train::ForeignWeights fw;
      fw.config = hf::import_config_dir(dir, &rep);
      fw.weights = hf::import_weights(dir, c, DType::F32, &rep);
      fw.config_file = dir + "/config.json";
      fw.summary = fmt::format("Hugging Face {}, {} tensors{}", rep.architecture, rep.tensors.size(),
                               rep.skipped.empty() ? std::string() : fmt::format(" ({} skipped)", rep.skipped.size()));
      return fw;
    };
  }
  return train::train(r, opt);
}

train::Recipe hf_recipe(const std::string& dir, const std::vector<std::string>& overrides) {
  hf::ImportReport rep;
  hf::import_config_dir(dir, &rep);
  fs::path p = fs::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  YAML::Node doc;
  doc["run"]["name"] = p.filename().string();
  doc["checkpoint"]["init_from"] = dir;
  doc["data"]["seq_len"] = rep.max_position_embeddings;
  YAML::Emitter e;
  e << doc;
  return resolve_recipe(e.c_str(), dir + "/config.json", overrides);
}

}  // namespace hz::study
