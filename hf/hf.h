// Horizon: Hugging Face model directories in and out.
//
// A Hugging Face directory holds config.json (hf/config.h maps it), model.safetensors (or shards
// with model.safetensors.index.json, io/safetensors.h) and usually a tokenizer. Parameters map
// onto Horizon names:
//   model.embed_tokens.weight -> embed.weight          model.norm.weight -> norm.weight
//   model.layers.i.input_layernorm -> layers.i.norm1   post_attention_layernorm -> layers.i.norm2
//   self_attn.{q,k,v,o}_proj -> attn.{wq,wk,wv,wo}     mlp.{gate,up,down}_proj -> mlp.{w1,w3,w2}
//   lm_head.weight -> head.weight (absent when tie_word_embeddings)
// Export writes config.json, the weights under these names (plus zeros for the biases the chosen
// architecture has and Horizon does not) and the tokenizer.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "hf/config.h"
#include "io/safetensors.h"
#include "nn/transformer.h"

namespace hz::hf {

// A directory holding config.json.
bool is_hf_dir(const std::string& path);

// (Hugging Face name, Horizon name) of every parameter of `c`, in Horizon's order.
std::vector<std::pair<std::string, std::string>> parameter_names(const nn::ModelConfig& c);
// Horizon parameter name -> shape for `c` (without building the model).
std::map<std::string, Shape> parameter_shapes(const nn::ModelConfig& c);

// The weights of a Hugging Face directory under Horizon names, converted to `dtype`, checked
// against `c` (every parameter present with its shape; no tensor left over except derived
// buffers such as rotary inv_freq, and lm_head equal to the embedding when tied).
std::map<std::string, Tensor> import_weights(const std::string& dir, const nn::ModelConfig& c,
                                             DType dtype = DType::F32, ImportReport* report = nullptr);

struct Imported {
  nn::ModelConfig cfg;
  std::map<std::string, Tensor> weights;
  ImportReport report;
};
Imported import_dir(const std::string& dir, DType dtype = DType::F32);

// The tokenizer file of a Hugging Face directory: tokenizer.json, else tokenizer.model; "" if none.
std::string tokenizer_file(const std::string& dir);
// The data.tokenizer spec of a Hugging Face directory: "byte" when its tokenizer.json is exactly
// the one export_dir writes for Horizon's byte tokenizer, else tokenizer_file(dir) ("" if none).
std::string tokenizer_spec(const std::string& dir);

// ---- export ----------------------------------------------------------------------------------
// Which architecture an export writes: Auto = a stock one (Llama, Mistral, Qwen2, SmolLM3) where one
// expresses the model, else HorizonForCausalLM; Stock refuses what none expresses; Horizon always
// writes HorizonForCausalLM (config.json with auto_map + configuration_horizon.py + modeling_horizon.py).
enum class ExportTarget : uint8_t { Auto, Stock, Horizon };

struct ExportOptions {
  ExportTarget target = ExportTarget::Auto;
  io::StoreAs store = io::StoreAs::F32;
  uint64_t max_shard_bytes = 5000000000ull;  // transformers' default "5GB"
};

// Writes config.json, the weights (Hugging Face names; zero biases where the architecture has
// them and Horizon does not) and, when `tokenizer` is "byte", a tokenizer.json +
// tokenizer_config.json reproducing Horizon's byte tokenizer (a tokenizer.json / .model path is
// copied, its tokenizer_config.json / special_tokens_map.json rewritten with the keys Horizon reads:
// the rest, an auto_map above all, left out and named in the report's warnings; "" writes none).
// `out_dir` must not exist or be empty.
ExportReport export_dir(const nn::ModelConfig& c, const std::map<std::string, Tensor>& weights,
                        const std::string& tokenizer, const std::string& out_dir, const ExportOptions& opt = {});

// The remote code written beside a HorizonForCausalLM export (hf/remote/*.py, compiled in).
const char* configuration_horizon_py();
const char* modeling_horizon_py();
// horizon_fields.json, written beside them: every field of an attention layer kind from its table
// (attention/spec_fields.h): name, config.json key, type, default, range, role, doc and what stock
// architectures do with it. configuration_horizon.py takes its defaults and checks from it; the copy in
// hf/remote/ is held to this text by a test (regenerate: HZ_WRITE_FIELDS_JSON=1 build/hz_test_hf
// --gtest_filter=HorizonFields.*).
std::string horizon_fields_json();

// The tokenizer.json (Hugging Face `tokenizers` format) of Horizon's byte tokenizer: a byte-level
// BPE without merges whose 256 tokens are the bytes (GPT-2's byte-to-unicode alphabet) plus the
// specials <|horizon_bos|> 256, <|horizon_eos|> 257, <|horizon_pad|> 258.
std::string byte_tokenizer_json();

}  // namespace hz::hf
