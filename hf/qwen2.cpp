// Qwen2ForCausalLM: RoPE on every layer, q/k/v biases always (model.qkv_bias); windows on the
// layers layer_types marks sliding_attention, or without layer_types on layers >= max_window_layers,
// when use_sliding_window. Exported for a model with q/k/v biases and RoPE on every layer (zero
// biases written when the model has none).
#include "hf/architecture.h"

namespace hz::hf {

namespace {

void import_biases(Fields& c, nn::ModelConfig& m) {
  m.qkv_bias = true;
  c.checked("(Qwen2ForCausalLM)", "q/k/v bias", "model.qkv_bias: true (Qwen2's q/k/v projections always carry biases)");
  if (c.boolean("use_mrope", false))
    c.fail("use_mrope", "= true: multimodal RoPE (Qwen2-VL) is not a Qwen2ForCausalLM Horizon imports; refused");
}

void import_layers(Fields& c, LayerLayout& l) {
  const int64_t n = static_cast<int64_t>(l.window.size());
  const bool use_sw = c.boolean("use_sliding_window", false);
  const int64_t w = sliding_window(c, 4096);
  const int64_t mwl = c.integer("max_window_layers", 28);
  std::vector<std::string> lt = layer_types(c, n);
  const bool explicit_types = !lt.empty();
  if (lt.empty())
    for (int64_t i = 0; i < n; ++i) lt.push_back(use_sw && w > 0 && i >= mwl ? "sliding_attention" : "full_attention");
  const std::string marks = apply_layer_types(c, lt, use_sw, w, l.window);
  c.mapped("use_sliding_window", use_sw ? "true" : "false", "windows enabled");
  c.mapped("sliding_window", w ? std::to_string(w) : "null", "the window W of sliding layers");
  c.mapped("max_window_layers", std::to_string(mwl), explicit_types ? "(layer_types given: not used)" : "layers >= it slide");
  c.mapped("layer_types", marks, "per layer: W = mask window, F = causal");
}

void export_fields(const ExportLayout& e, json& j, ExportReport& rep) {
  j["use_sliding_window"] = e.any_window;
  j["sliding_window"] = e.any_window ? json(e.window) : json(nullptr);
  j["max_window_layers"] = 0;
  j["layer_types"] = e.layer_types;
  if (!e.c.qkv_bias) rep.notes.push_back("Qwen2 always has q/k/v biases: written as zeros");
}

void zero_tensors(const nn::ModelConfig& c, DType dt, std::map<std::string, Tensor>& hf) {
  if (c.qkv_bias) return;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    hf[p + "q_proj.bias"] = Tensor::zeros({c.n_heads * c.hdim()}, dt);
    hf[p + "k_proj.bias"] = Tensor::zeros({c.kv_heads() * c.hdim()}, dt);
    hf[p + "v_proj.bias"] = Tensor::zeros({c.kv_heads() * c.hdim()}, dt);
  }
}

}  // namespace

const Architecture kQwen2{"Qwen2ForCausalLM", "qwen2", false, 32768,
                          import_biases, import_layers, export_fields, zero_tensors};

}  // namespace hz::hf
