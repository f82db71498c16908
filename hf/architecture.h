// Horizon: the per-architecture rules of the Hugging Face config mapping (internal to hf/).
//
// hf/config.cpp reads and writes what every architecture shares (dimensions, norms, RoPE
// parameters, the field report, the layer kinds); each architecture's own fields live in one file,
// import and export side by side: hf/llama.cpp, hf/mistral.cpp, hf/qwen2.cpp, hf/smollm3.cpp.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "hf/config.h"

namespace hz::hf {

using json = nlohmann::json;

std::string show(const json& v);  // a string as itself, anything else as JSON
std::string num(double v);        // {:g}

// config.json fields, each consumed at most once; the rest are checked at the end.
class Fields {
 public:
  Fields(const json& j, std::string where, ImportReport& r) : j_(j), where_(std::move(where)), r_(r) {}
  [[noreturn]] void fail(const std::string& k, const std::string& what) const {
    throw HfError(where_ + ": " + k + " " + what);
  }
  bool has(const std::string& k) const { return j_.contains(k); }
  const std::string& where() const { return where_; }  // the file, for messages
  // The value as written (null included), without marking the field read; has(k) must hold.
  const json& raw(const std::string& k) const { return j_.at(k); }
  // The value (nullptr when absent or null); marks the field read.
  const json* find(const std::string& k) {
    used_.insert(k);
    auto it = j_.find(k);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  int64_t integer(const std::string& k, std::optional<int64_t> def = std::nullopt) {
    const json* v = find(k);
    if (!v) {
      if (!def) fail(k, "is missing; a Llama-family config.json needs it");
      return *def;
    }
    if (!v->is_number_integer()) fail(k, "must be an integer, got " + v->dump());
    return v->get<int64_t>();
  }
  double number(const std::string& k, std::optional<double> def = std::nullopt) {
    const json* v = find(k);
    if (!v) {
      if (!def) fail(k, "is missing");
      return *def;
    }
    if (!v->is_number()) fail(k, "must be a number, got " + v->dump());
    const double x = v->get<double>();
    if (!std::isfinite(x)) fail(k, "must be a finite number, got " + v->dump());
    return x;
  }
  bool boolean(const std::string& k, bool def) {
    const json* v = find(k);
    if (!v) return def;
    if (!v->is_boolean()) fail(k, "must be true or false, got " + v->dump());
    return v->get<bool>();
  }
  std::string string(const std::string& k, const std::string& def) {
    const json* v = find(k);
    if (!v) return def;
    if (!v->is_string()) fail(k, "must be a string, got " + v->dump());
    return v->get<std::string>();
  }
  void mapped(const std::string& k, const std::string& value, const std::string& effect) {
    r_.mapped.push_back({k, value, effect});
  }
  void checked(const std::string& k, const std::string& value, const std::string& why) {
    r_.checked.push_back({k, value, why});
  }
  void ignored(const std::string& k, const std::string& value, const std::string& why) {
    r_.ignored.push_back({k, value, why});
  }
  // Every field not read: harmless ones are noted, the rest refused by name (hf/config.cpp).
  void finish(const std::string& arch);

 private:
  const json& j_;
  std::string where_;
  ImportReport& r_;
  std::set<std::string> used_;
};

// Position encoding and mask per layer, as config.json describes them.
struct LayerLayout {
  std::vector<bool> use_rope;   // false: NoPE
  std::vector<int64_t> window;  // 0: causal, else the sliding window
};

// What export_config found in the Horizon model, for the architecture's own fields.
struct ExportLayout {
  const nn::ModelConfig& c;
  const LayerLayout& layers;
  const std::vector<std::string>& layer_types;  // full_attention / sliding_attention per layer
  int64_t window = 0;                           // the one sliding window (0: none)
  bool any_window = false;
};

struct Architecture {
  const char* name;          // config.json "architectures", e.g. LlamaForCausalLM
  const char* model_type;    // e.g. llama
  bool tie_default;          // the config class's tie_word_embeddings default
  int64_t max_pos_default;   // its max_position_embeddings default
  // import, after the shared dimensions: the bias fields (model.qkv_bias)
  void (*import_biases)(Fields& c, nn::ModelConfig& m);
  // import, after the RoPE parameters: which layers rotate and which slide (`l` arrives all RoPE,
  // all causal, one entry per layer)
  void (*import_layers)(Fields& c, LayerLayout& l);
  // export: the architecture's own config.json fields, and the notes they need
  void (*export_fields)(const ExportLayout& e, json& j, ExportReport& rep);
  // export: tensors the architecture has and Horizon does not, written as zeros (Hugging Face names)
  void (*zero_tensors)(const nn::ModelConfig& c, DType dt, std::map<std::string, Tensor>& hf);
};

extern const Architecture kLlama, kMistral, kQwen2, kSmolLM3;
// The config.json fields every export writes: architecture, dimensions, norm, tie, init, token ids, dtype.
json common_config(const Architecture& A, const nn::ModelConfig& c, const SpecialTokens& tok, io::StoreAs store);
// HorizonForCausalLM (hf/horizon.cpp): every model, as transformers remote code; import reads the
// layer kinds from config.json, export writes them (horizon_config) instead of export_fields.
extern const Architecture kHorizon;
void import_horizon_layers(Fields& c, nn::ModelConfig& m);
std::string horizon_config(const nn::ModelConfig& c, const SpecialTokens& tok, io::StoreAs store,
                           ExportReport* report = nullptr);

// Every architecture, in the order import matches them; null when `name` is none of them.
const std::vector<const Architecture*>& architectures();
const Architecture* find_architecture(const std::string& name);

// ---- shared by several architectures (hf/config.cpp) ---------------------------------------------
// A list of layer flags / names of length n.
std::vector<std::string> layer_types(Fields& c, int64_t n);
// sliding_window: absent -> the class default, null -> none.
int64_t sliding_window(Fields& c, int64_t class_default);
// Llama's attention_bias / mlp_bias (SmolLM3 has the same two fields).
void import_attention_mlp_bias(Fields& c, nn::ModelConfig& m);
// Windows from layer types (Qwen2, SmolLM3): refuses a sliding layer without use_sliding_window and
// a window; returns the marks (W = window, F = causal) for the report.
std::string apply_layer_types(Fields& c, const std::vector<std::string>& lt, bool use_sw, int64_t w,
                              std::vector<int64_t>& window);

}  // namespace hz::hf
