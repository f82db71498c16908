// Horizon: Hugging Face Llama-family checkpoints in and out.
//
// A Hugging Face directory holds config.json, model.safetensors (or shards with
// model.safetensors.index.json, io/safetensors.h) and usually a tokenizer. Import maps
//   LlamaForCausalLM    every layer RoPE + causal
//   MistralForCausalLM  every layer RoPE + sliding window (sliding_window; null = causal)
//   Qwen2ForCausalLM    RoPE, q/k/v biases (model.qkv_bias), windows on the layers layer_types marks
//                       "sliding_attention" (or, without layer_types, layers >= max_window_layers)
//                       when use_sliding_window
//   SmolLM3ForCausalLM  no_rope_layers[i] = 0 -> layer i NoPE (a SWAN-like per-layer pattern), windows
//                       as layer_types / use_sliding_window say
// onto a Horizon model config (layer kinds rope / rope_swa / nope / nope_swa, a repeating pattern or
// overrides) and Horizon parameter names:
//   model.embed_tokens.weight -> embed.weight          model.norm.weight -> norm.weight
//   model.layers.i.input_layernorm -> layers.i.norm1   post_attention_layernorm -> layers.i.norm2
//   self_attn.{q,k,v,o}_proj -> attn.{wq,wk,wv,wo}     mlp.{gate,up,down}_proj -> mlp.{w1,w3,w2}
//   lm_head.weight -> head.weight (absent when tie_word_embeddings)
// Both config layouts are read: transformers 5's rope_parameters {rope_theta, rope_type, ...} and the
// older top-level rope_theta / rope_scaling {type | rope_type, ...} (rope_scaling wins, as in
// transformers). rope types: default; linear -> pi; dynamic -> dynamic_ntk (transformers' factor
// formula); yarn -> yarn with the index ramp (beta_fast -> yarn_beta, beta_slow -> yarn_alpha,
// truncate, attention_factor or mscale / mscale_all_dim -> yarn_mscale); llama3 -> llama3. Every
// config field is either mapped, checked to have the value Horizon computes (e.g. hidden_act silu,
// attention_bias false, partial_rotary_factor 1), or known to leave the forward pass unchanged
// (use_cache, token ids, dtype, ...); anything else is refused by name, as are other
// architectures, quantized checkpoints and custom code (auto_map).
//
// Export writes the architecture that expresses the model: Llama (all RoPE, causal), Mistral (all
// RoPE, one window on every layer), Qwen2 (q/k/v biases), SmolLM3 (per-layer NoPE and/or per-layer
// windows); config.json carries both layouts (rope_parameters and top-level rope_theta /
// rope_scaling) so transformers 4 and 5 read the same model. Refused, naming the reason: SCOPE
// scopes, ALiBi, p-RoPE, logit transforms (scale-invariant, LogN, SWAN row scaling, temperature),
// QK-norm, MLPs other than SwiGLU, different RoPE settings or window sizes across layers, and YaRN's
// rotations ramp (transformers implements only the index ramp).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "nn/transformer.h"

namespace hz::train::hf {

// A checkpoint Horizon cannot import or a model it cannot export (names the field and why).
struct HfError : hz::ValueError {
  using ValueError::ValueError;
};

// A directory holding config.json.
bool is_hf_dir(const std::string& path);

struct FieldNote {
  std::string field, value, effect;  // e.g. "num_key_value_heads", "2", "model.n_kv_heads"
};

struct ImportReport {
  std::string source, architecture;
  std::vector<FieldNote> mapped;    // config fields that set Horizon fields
  std::vector<FieldNote> checked;   // fields whose value is what Horizon computes
  std::vector<FieldNote> ignored;   // fields that do not change the forward pass (why)
  int64_t max_position_embeddings = 0;
  std::vector<std::string> tensors;     // Horizon parameters loaded (import_dir)
  std::vector<std::string> skipped;     // tensors of the files not loaded (why)
  std::string tokenizer;                // tokenizer file in the directory ("" if none)
  std::string str() const;              // the report, one line per field
};

// config.json text -> model config (max_seq_len = max_position_embeddings). `where` names the
// file in messages. Throws HfError.
nn::ModelConfig import_config(const std::string& config_json_text, const std::string& where,
                              ImportReport* report = nullptr);
nn::ModelConfig import_config_dir(const std::string& dir, ImportReport* report = nullptr);

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
struct SpecialTokens {
  int64_t bos = -1, eos = -1, pad = -1;  // -1: null in config.json
};

struct ExportOptions {
  io::StoreAs store = io::StoreAs::F32;
  uint64_t max_shard_bytes = 5000000000ull;  // transformers' default "5GB"
};

struct ExportReport {
  std::string architecture, dir;
  std::vector<FieldNote> config;      // what config.json says, and from which Horizon field
  std::vector<std::string> notes;     // e.g. zero biases added, NTK folded into rope_theta
  std::vector<std::string> files;
};

// The config.json (text) and architecture that express `c`; throws HfError listing every reason
// when no standard architecture does.
std::string export_config(const nn::ModelConfig& c, const SpecialTokens& tokens, io::StoreAs store,
                          ExportReport* report = nullptr);

// Writes config.json, the weights (Hugging Face names; zero biases where the architecture has
// them and Horizon does not) and, when `tokenizer` is "byte", a tokenizer.json +
// tokenizer_config.json reproducing Horizon's byte tokenizer (a tokenizer.json / .model path is
// copied; "" writes none). `out_dir` must not exist or be empty.
ExportReport export_dir(const nn::ModelConfig& c, const std::map<std::string, Tensor>& weights,
                        const std::string& tokenizer, const std::string& out_dir, const ExportOptions& opt = {});

// The tokenizer.json (Hugging Face `tokenizers` format) of Horizon's byte tokenizer: a byte-level
// BPE without merges whose 256 tokens are the bytes (GPT-2's byte-to-unicode alphabet) plus the
// specials <|horizon_bos|> 256, <|horizon_eos|> 257, <|horizon_pad|> 258.
std::string byte_tokenizer_json();

}  // namespace hz::train::hf
