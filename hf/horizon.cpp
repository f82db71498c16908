// HorizonForCausalLM: any Horizon model as a transformers model with its own code (trust_remote_code).
//
// A model that no stock architecture expresses (SCOPE, ALiBi, p-RoPE, partial RoPE, logit transforms,
// QK-norm, gates, sinks, FoX, other MLPs, per-layer RoPE settings, ...) leaves as config.json with
// auto_map naming configuration_horizon.HorizonConfig and modeling_horizon.HorizonForCausalLM, the
// two Python files (hf/remote/, compiled into the binary as text) beside it, and the weights under
// Llama's names plus the ones the ingredients add (hf/hf.h). config.json carries every per-layer
// choice as Horizon's own recipe fields: layer_kinds {name: every field of an attention layer kind},
// layer_pattern and layer_overrides, so import reads back exactly the model that was exported.
#include <fmt/core.h>

#include "attention/spec_fields.h"
#include "hf/architecture.h"

namespace hz::hf {

extern const char* const kConfigurationHorizonPy;  // generated from hf/remote/*.py (CMakeLists.txt)
extern const char* const kModelingHorizonPy;

const char* configuration_horizon_py() { return kConfigurationHorizonPy; }
const char* modeling_horizon_py() { return kModelingHorizonPy; }

const char* const kWindowConvention =
    "A window W lets a query see itself and the W-1 keys before it (distance t = i - j < W). "
    "FlashAttention: window_size = (W - 1, 0); FlashInfer: window_left = W - 1; cuDNN's sliding-window "
    "band: left bound W; transformers' sliding_window (Mistral, Qwen2): W. SCOPE scopes are windows "
    "per query head in the same convention.";

namespace {

std::string leaf(const std::string& path) { return path.substr(path.rfind('.') + 1); }

// Writes every field of an attention layer kind (attention/spec_fields.h) into a JSON object.
struct SpecWriter {
  json& j;
  template <class T>
  void operator()(const std::string& p, T& v, const Field&) { j[leaf(p)] = v; }
  template <class E, class P, class N>
  void enumeration(const std::string& p, E& v, const Field&, P, N name) { j[leaf(p)] = name(v); }
};

// Reads them back: each field optional (absent keeps the default), typed and in its range; a key
// that is no field is refused by name.
struct SpecReader {
  const json& j;
  std::string where;  // "config.json: layer_kinds.NAME"
  std::set<std::string> seen;

  [[noreturn]] void fail(const std::string& p, const std::string& what) const {
    throw HfError(where + "." + leaf(p) + " " + what);
  }
  const json* get(const std::string& p) {
    seen.insert(leaf(p));
    auto it = j.find(leaf(p));
    return it == j.end() ? nullptr : &*it;
  }
  double number(const std::string& p, const json& v, const Field& f) const {
    if (!v.is_number()) fail(p, "must be a number, got " + v.dump());
    const double x = v.get<double>();
    if (!f.contains(x)) fail(p, "= " + v.dump() + " is out of range (" + (f.bounded() ? f.range() : "finite") + ")");
    return x;
  }
  int64_t integer(const std::string& p, const json& v, const Field& f) const {
    if (!v.is_number_integer()) fail(p, "must be an integer, got " + v.dump());
    const double x = static_cast<double>(v.get<int64_t>());
    if (!f.contains(x) || std::fabs(x) > kIntCeiling)
      fail(p, "= " + v.dump() + " is out of range (" + (f.bounded() ? f.range() : "at most 2^40") + ")");
    return v.get<int64_t>();
  }
  void operator()(const std::string& p, int64_t& v, const Field& f) {
    if (const json* x = get(p)) v = integer(p, *x, f);
  }
  void operator()(const std::string& p, double& v, const Field& f) {
    if (const json* x = get(p)) v = number(p, *x, f);
  }
  void operator()(const std::string& p, bool& v, const Field&) {
    if (const json* x = get(p)) {
      if (!x->is_boolean()) fail(p, "must be true or false, got " + x->dump());
      v = x->get<bool>();
    }
  }
  void operator()(const std::string& p, std::string& v, const Field&) {
    if (const json* x = get(p)) {
      if (!x->is_string()) fail(p, "must be a string, got " + x->dump());
      v = x->get<std::string>();
    }
  }
  template <class T>
  void operator()(const std::string& p, std::vector<T>& v, const Field& f) {
    const json* x = get(p);
    if (!x) return;
    if (!x->is_array()) fail(p, "must be a list, got " + x->dump().substr(0, 80));
    if (x->size() > 65536) fail(p, "has " + std::to_string(x->size()) + " entries; at most 65536");
    v.clear();
    for (const json& e : *x) {
      if constexpr (std::is_same_v<T, int64_t>) v.push_back(integer(p, e, f));
      else v.push_back(number(p, e, f));
    }
  }
  template <class E, class P, class N>
  void enumeration(const std::string& p, E& v, const Field&, P parse, N) {
    const json* x = get(p);
    if (!x) return;
    if (!x->is_string()) fail(p, "must be a name, got " + x->dump());
    try {
      v = parse(x->get<std::string>());
    } catch (const ValueError& e) {
      fail(p, "= " + x->dump() + ": " + e.what());
    }
  }
  void finish() const {
    for (auto it = j.begin(); it != j.end(); ++it)
      if (!seen.count(it.key()))
        throw HfError(where + "." + it.key() + " is not a field of an attention layer kind; refused (a typo, or a "
                      "config.json from a newer Horizon)");
  }
};

// One entry of horizon_fields.json per field of the table, its keys in the order written here.
using ojson = nlohmann::ordered_json;
struct FieldsJson {
  ojson& out;
  static ojson bound(double x) { return std::isfinite(x) ? ojson(x) : ojson(nullptr); }
  void add(const std::string& p, const char* type, ojson dflt, const attn::SpecField& f, ojson choices = nullptr) {
    ojson e = {{"name", leaf(p)}, {"config_key", "layer_kinds.<kind>." + leaf(p)}, {"type", type}};
    if (!choices.is_null()) e["choices"] = choices;
    e["default"] = dflt;
    e["range"] = f.bounded() ? ojson{{"text", f.range()}, {"lo", bound(f.lo)}, {"hi", bound(f.hi)},
                                     {"lo_open", f.lo_open}, {"hi_open", f.hi_open}}
                             : ojson(nullptr);
    e["role"] = role_name(f.role);
    e["doc"] = f.doc;
    e["stock"] = f.stock == attn::Stock::Via ? std::string("via ") + f.via : attn::stock_name(f.stock);
    if (f.refusal) e["refusal"] = f.refusal;
    out.push_back(e);
  }
  void operator()(const std::string& p, int64_t& v, const attn::SpecField& f) { add(p, "int", v, f); }
  void operator()(const std::string& p, double& v, const attn::SpecField& f) { add(p, "float", v, f); }
  void operator()(const std::string& p, bool& v, const attn::SpecField& f) { add(p, "bool", v, f); }
  void operator()(const std::string& p, std::string& v, const attn::SpecField& f) { add(p, "string", v, f); }
  void operator()(const std::string& p, std::vector<int64_t>& v, const attn::SpecField& f) { add(p, "int_list", v, f); }
  void operator()(const std::string& p, std::vector<double>& v, const attn::SpecField& f) { add(p, "float_list", v, f); }
  template <class E, class P, class N>
  void enumeration(const std::string& p, E& v, const attn::SpecField& f, P, N name) {
    ojson choices = ojson::array(), refusals = ojson::object();
    for (int i = 0; i < static_cast<int>(E::Count); ++i) {
      choices.push_back(name(static_cast<E>(i)));
      if (f.value_refusals && f.value_refusals[i]) refusals[name(static_cast<E>(i))] = f.value_refusals[i];
    }
    add(p, "choice", name(v), f, choices);
    if (!refusals.empty()) out.back()["refusal"] = refusals;
  }
};

const char* hidden_act(nn::MlpKind k) {
  return k == nn::MlpKind::SwiGLU ? "silu" : k == nn::MlpKind::ReLU2 ? "relu2" : "gelu";
}

void no_fields(const ExportLayout&, json&, ExportReport&) {}
void no_zero_tensors(const nn::ModelConfig&, DType, std::map<std::string, Tensor>&) {}
void no_layers(Fields&, LayerLayout&) {}

}  // namespace

const Architecture kHorizon{"HorizonForCausalLM", "horizon", true, 0,
                            import_attention_mlp_bias, no_layers, no_fields, no_zero_tensors};

std::string horizon_fields_json() {
  ojson fields = ojson::array();
  FieldsJson w{fields};
  attn::AttentionSpec dflt;
  attn::visit_spec_fields("layer_kinds.<kind>", dflt, w);
  ojson j = {{"about", "Every field of a Horizon attention layer kind (HorizonForCausalLM's config.json: "
                       "layer_kinds.<kind>.<name>), generated from its table, attention/spec_fields.h; do not edit "
                       "(docs/hf.md). configuration_horizon.py reads its defaults and checks from it."},
             {"int_ceiling", static_cast<int64_t>(kIntCeiling)},
             {"fields", fields}};
  return j.dump(2) + "\n";
}

std::string horizon_config(const nn::ModelConfig& c, const SpecialTokens& tok, io::StoreAs store, ExportReport* report) {
  json j = common_config(kHorizon, c, tok, store);
  j["auto_map"] = {{"AutoConfig", "configuration_horizon.HorizonConfig"},
                   {"AutoModelForCausalLM", "modeling_horizon.HorizonForCausalLM"}};
  j["hidden_act"] = hidden_act(c.mlp);
  j["attention_bias"] = c.qkv_bias;
  j["train_length"] = c.train_len;
  j["max_position_embeddings"] = c.train_len;
  j["context_length"] = nullptr;
  json kinds = json::object();
  for (const nn::LayerKind& k : c.kinds) {
    json spec = json::object();
    SpecWriter w{spec};
    attn::AttentionSpec s = k.attn;
    attn::visit_spec_fields("layer_kinds." + k.name, s, w);
    kinds[k.name] = spec;
  }
  j["layer_kinds"] = kinds;
  j["layer_pattern"] = c.pattern;
  json ov = json::object();
  for (const auto& [i, name] : c.overrides) ov[std::to_string(i)] = name;
  j["layer_overrides"] = ov;
  j["lampe"] = nullptr;
  j["window_convention"] = kWindowConvention;
  ExportReport rep;
  rep.architecture = kHorizon.name;
  for (auto it = j.begin(); it != j.end(); ++it) rep.config.push_back({it.key(), show(it.value()), ""});
  if (report) *report = rep;
  return j.dump(2) + "\n";
}

void import_horizon_layers(Fields& c, nn::ModelConfig& m) {
  const json* auto_map = c.find("auto_map");
  const json want = {{"AutoConfig", "configuration_horizon.HorizonConfig"},
                     {"AutoModelForCausalLM", "modeling_horizon.HorizonForCausalLM"}};
  if (auto_map && *auto_map != want)
    c.fail("auto_map", "= " + auto_map->dump().substr(0, 120) + " is not the code Horizon exports (" + want.dump() +
                           "); a model with other code is refused");
  c.checked("auto_map", "configuration_horizon / modeling_horizon", "the code Horizon writes");
  const json* kinds = c.find("layer_kinds");
  if (!kinds || !kinds->is_object() || kinds->empty())
    c.fail("layer_kinds", "must map each layer kind's name to its fields");
  if (kinds->size() > 1024) c.fail("layer_kinds", "has " + std::to_string(kinds->size()) + " kinds; at most 1024");
  m.kinds.clear();
  for (auto it = kinds->begin(); it != kinds->end(); ++it) {
    if (!it.value().is_object()) c.fail("layer_kinds." + it.key(), "must be an object of fields");
    nn::LayerKind k{it.key(), {}};
    SpecReader r{it.value(), c.where() + ": layer_kinds." + it.key(), {}};
    attn::visit_spec_fields("layer_kinds." + it.key(), k.attn, r);
    r.finish();
    if (k.attn.mask.kind == attn::MaskKind::Scope) k.attn.mask.scope_train_len = m.train_len;
    m.kinds.push_back(k);
  }
  c.mapped("layer_kinds", std::to_string(m.kinds.size()) + " kinds", "model.layer_kinds (every field)");
  auto kind_name = [&](const std::string& k, const json& v) {
    if (!v.is_string() || !kinds->contains(v.get<std::string>()))
      c.fail(k, "names " + v.dump() + ", which is not in layer_kinds");
    return v.get<std::string>();
  };
  const json* pattern = c.find("layer_pattern");
  if (!pattern || !pattern->is_array() || pattern->empty() || static_cast<int64_t>(pattern->size()) > m.n_layers)
    c.fail("layer_pattern", "must list 1 to num_hidden_layers kind names");
  m.pattern.clear();
  for (const json& v : *pattern) m.pattern.push_back(kind_name("layer_pattern", v));
  c.mapped("layer_pattern", show(*pattern), "model.pattern");
  m.overrides.clear();
  if (const json* ov = c.find("layer_overrides")) {
    if (!ov->is_object()) c.fail("layer_overrides", "must map layer indices to kind names");
    for (auto it = ov->begin(); it != ov->end(); ++it) {
      const std::string& key = it.key();
      if (key.empty() || key.size() > 6 || key.find_first_not_of("0123456789") != std::string::npos ||
          std::stoll(key) >= m.n_layers)
        c.fail("layer_overrides", "key '" + key + "' is not a layer index below " + std::to_string(m.n_layers));
      m.overrides[std::stoll(key)] = kind_name("layer_overrides." + key, it.value());
    }
    c.mapped("layer_overrides", show(*ov), "model.overrides");
  }
  if (const json* t = c.find("train_length")) {
    if (!t->is_number_integer() || t->get<int64_t>() != m.train_len)
      c.fail("train_length", "= " + t->dump() + " must equal max_position_embeddings (" + std::to_string(m.train_len) + ")");
    c.checked("train_length", std::to_string(m.train_len), "the training length (data.seq_len)");
  }
  const json* ctx = c.find("context_length");
  c.ignored("context_length", ctx ? show(*ctx) : "null",
            "inference-time: the length the transformers model's length-dependent terms use (Horizon: the call's length)");
  const json* lampe = c.find("lampe");
  c.ignored("lampe", lampe ? show(*lampe).substr(0, 60) : "null",
            "inference-time: LaMPE is an evaluation option in Horizon (eval.lampe=true)");
  c.find("window_convention");
  c.ignored("window_convention", "(text)", "documentation");
}

}  // namespace hz::hf
