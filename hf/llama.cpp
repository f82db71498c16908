// LlamaForCausalLM: every layer RoPE + causal; attention_bias (q/k/v, and o_proj which must be
// zero) and mlp_bias (refused). Exported for an all-RoPE, all-causal model without q/k/v biases.
#include "hf/architecture.h"

namespace hz::hf {

namespace {

void import_layers(Fields&, LayerLayout&) {}  // no per-layer fields: the layout stays all RoPE, causal

void export_fields(const ExportLayout& e, json& j, ExportReport&) {
  j["attention_bias"] = e.c.qkv_bias;
  j["mlp_bias"] = false;
}

void zero_tensors(const nn::ModelConfig&, DType, std::map<std::string, Tensor>&) {}

}  // namespace

const Architecture kLlama{"LlamaForCausalLM", "llama", false, 2048,
                          import_attention_mlp_bias, import_layers, export_fields, zero_tensors};

}  // namespace hz::hf
