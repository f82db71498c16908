#include "study/hf_models.h"

#include <fmt/core.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>

#include "hf/hf.h"
#include "train/model_source.h"

namespace fs = std::filesystem;

namespace hz::study {

void register_hf_models() {
  train::ModelSource s;
  s.name = "Hugging Face";
  s.recognises = [](const std::string& path) { return hf::is_hf_dir(path); };
  s.config = [](const std::string& dir) { return hf::import_config_dir(dir); };
  s.tokenizer = [](const std::string& dir) { return hf::tokenizer_spec(dir); };
  s.weights = [](const std::string& dir, const nn::ModelConfig& c) {
    hf::ImportReport rep;
    train::ForeignWeights fw;
    fw.config = hf::import_config_dir(dir, &rep);
    fw.weights = hf::import_weights(dir, c, DType::F32, &rep);
    fw.config_file = dir + "/config.json";
    fw.summary = fmt::format("Hugging Face {}, {} tensors{}", rep.architecture, rep.tensors.size(),
                             rep.skipped.empty() ? std::string() : fmt::format(" ({} skipped)", rep.skipped.size()));
    return fw;
  };
  train::register_model_source(std::move(s));
}

train::Recipe hf_recipe(const std::string& dir, const std::vector<std::string>& overrides) {
  register_hf_models();  // parse_recipe takes the model from the directory's config.json
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
  return train::parse_recipe(e.c_str(), dir + "/config.json", overrides);
}

}  // namespace hz::study
