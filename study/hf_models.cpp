#include "study/hf_models.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>

#include "train/hf.h"

namespace fs = std::filesystem;

namespace hz::study {

train::Recipe hf_recipe(const std::string& dir, const std::vector<std::string>& overrides) {
  train::hf::ImportReport rep;
  train::hf::import_config_dir(dir, &rep);
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
