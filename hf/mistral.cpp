// MistralForCausalLM: every layer RoPE + one sliding window (sliding_window; null = causal; the
// class default 4096 when absent); layer_types is ignored, as transformers does. No bias fields.
// Exported for an all-RoPE model with the same window on every layer.
#include <algorithm>

#include "hf/architecture.h"

namespace hz::hf {

namespace {

void import_biases(Fields&, nn::ModelConfig&) {}  // none: attention_bias / mlp_bias are not Mistral fields

void import_layers(Fields& c, LayerLayout& l) {
  const int64_t w = sliding_window(c, 4096);
  std::fill(l.window.begin(), l.window.end(), w);
  c.mapped("sliding_window", w ? std::to_string(w) : "null", w ? "mask: window on every layer" : "mask: causal");
  if (c.has("layer_types")) c.ignored("layer_types", "(list)", "MistralForCausalLM uses sliding_window on every layer and ignores it");
  c.find("layer_types");
}

void export_fields(const ExportLayout& e, json& j, ExportReport&) { j["sliding_window"] = e.window; }

void zero_tensors(const nn::ModelConfig&, DType, std::map<std::string, Tensor>&) {}

}  // namespace

const Architecture kMistral{"MistralForCausalLM", "mistral", false, 131072,
                            import_biases, import_layers, export_fields, zero_tensors};

}  // namespace hz::hf
