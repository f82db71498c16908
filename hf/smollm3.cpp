// SmolLM3ForCausalLM: no_rope_layers[i] = 0 -> layer i NoPE (a SWAN-like per-layer pattern; without
// the list every no_rope_layer_interval-th layer), windows as layer_types / use_sliding_window say
// (without layer_types on the NoPE layers); Llama's attention_bias / mlp_bias. Exported for a model
// with per-layer NoPE and/or windows on some layers only (a zero o_proj bias written with q/k/v
// biases).
#include "hf/architecture.h"

namespace hz::hf {

namespace {

void import_layers(Fields& c, LayerLayout& l) {
  const int64_t n = static_cast<int64_t>(l.window.size());
  std::vector<int64_t> nrl;
  if (const json* v = c.find("no_rope_layers")) {
    if (!v->is_array() || static_cast<int64_t>(v->size()) != n)
      c.fail("no_rope_layers", "must list one 0/1 flag per layer (" + std::to_string(n) + ")");
    for (const auto& x : *v) {
      if (!x.is_number_integer() || (x != 0 && x != 1)) c.fail("no_rope_layers", "entries must be 0 or 1, got " + x.dump());
      nrl.push_back(x.get<int64_t>());
    }
    c.ignored("no_rope_layer_interval", c.has("no_rope_layer_interval") ? show(c.raw("no_rope_layer_interval")) : "-",
              "no_rope_layers is given explicitly");
    c.find("no_rope_layer_interval");
  } else {
    const int64_t every = c.integer("no_rope_layer_interval", 4);
    if (every <= 0) c.fail("no_rope_layer_interval", "must be positive");
    for (int64_t i = 0; i < n; ++i) nrl.push_back((i + 1) % every != 0);
    c.mapped("no_rope_layer_interval", std::to_string(every), "every " + std::to_string(every) + "th layer NoPE");
  }
  std::string flags;
  for (int64_t i = 0; i < n; ++i) {
    l.use_rope[i] = nrl[i] != 0;
    flags += l.use_rope[i] ? '1' : '0';
  }
  c.mapped("no_rope_layers", flags, "layer i NoPE where 0 (pos: none)");
  const bool use_sw = c.boolean("use_sliding_window", false);
  const int64_t w = sliding_window(c, 0);
  std::vector<std::string> lt = layer_types(c, n);
  if (lt.empty())
    for (int64_t i = 0; i < n; ++i)
      lt.push_back(use_sw && w > 0 && !l.use_rope[i] ? "sliding_attention" : "full_attention");
  const std::string marks = apply_layer_types(c, lt, use_sw, w, l.window);
  c.mapped("use_sliding_window", use_sw ? "true" : "false", "windows enabled");
  c.mapped("sliding_window", w ? std::to_string(w) : "null", "the window W of sliding layers");
  if (c.has("max_window_layers"))  // SmolLM3-3B's config.json carries it; transformers' SmolLM3 ignores it
    c.ignored("max_window_layers", show(c.raw("max_window_layers")), "not a SmolLM3 field (transformers ignores it)");
  c.find("max_window_layers");
  c.mapped("layer_types", marks, "per layer: W = mask window, F = causal");
}

void export_fields(const ExportLayout& e, json& j, ExportReport& rep) {
  j["attention_bias"] = e.c.qkv_bias;
  j["mlp_bias"] = false;
  std::vector<int> nrl;
  for (int64_t l = 0; l < e.c.n_layers; ++l) nrl.push_back(e.layers.use_rope[l] ? 1 : 0);
  j["no_rope_layers"] = nrl;
  j["no_rope_layer_interval"] = 4;
  j["use_sliding_window"] = e.any_window;
  j["sliding_window"] = e.any_window ? json(e.window) : json(nullptr);
  j["layer_types"] = e.layer_types;
  if (e.c.qkv_bias) rep.notes.push_back("SmolLM3's attention_bias also biases o_proj: written as zeros");
}

void zero_tensors(const nn::ModelConfig& c, DType dt, std::map<std::string, Tensor>& hf) {
  if (!c.qkv_bias) return;
  for (int64_t l = 0; l < c.n_layers; ++l)
    hf["model.layers." + std::to_string(l) + ".self_attn.o_proj.bias"] = Tensor::zeros({c.d_model}, dt);
}

}  // namespace

const Architecture kSmolLM3{"SmolLM3ForCausalLM", "smollm3", true, 32768,
                            import_attention_mlp_bias, import_layers, export_fields, zero_tensors};

}  // namespace hz::hf
