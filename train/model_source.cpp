#include "train/model_source.h"

#include <memory>
#include <mutex>
#include <vector>

namespace hz::train {

namespace {
std::mutex& sources_mutex() {
  static std::mutex m;
  return m;
}
// never shrinks: the pointers find_model_source returns stay valid
std::vector<std::unique_ptr<const ModelSource>>& sources() {
  static std::vector<std::unique_ptr<const ModelSource>> s;
  return s;
}
}  // namespace

void register_model_source(ModelSource s) {
  std::lock_guard<std::mutex> lock(sources_mutex());
  for (const auto& x : sources())
    if (x->name == s.name) return;
  sources().push_back(std::make_unique<const ModelSource>(std::move(s)));
}

const ModelSource* find_model_source(const std::string& path) {
  std::vector<const ModelSource*> all;
  {
    std::lock_guard<std::mutex> lock(sources_mutex());
    for (const auto& x : sources()) all.push_back(x.get());
  }
  for (const ModelSource* s : all)
    if (s->recognises(path)) return s;
  return nullptr;
}

}  // namespace hz::train
