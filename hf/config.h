// Horizon: Hugging Face config.json <-> Horizon model config.
//
// Import maps
//   LlamaForCausalLM    every layer RoPE + causal
//   MistralForCausalLM  every layer RoPE + sliding window (sliding_window; null = causal)
//   Qwen2ForCausalLM    RoPE, q/k/v biases (model.qkv_bias), windows on the layers layer_types marks
//                       "sliding_attention" (or, without layer_types, layers >= max_window_layers)
//                       when use_sliding_window
//   SmolLM3ForCausalLM  no_rope_layers[i] = 0 -> layer i NoPE (a SWAN-like per-layer pattern), windows
//                       as layer_types / use_sliding_window say
// onto a Horizon model config (layer kinds rope / rope_swa / nope / nope_swa, a repeating pattern or
// overrides). Both config layouts are read: transformers 5's rope_parameters {rope_theta, rope_type,
// ...} and the older top-level rope_theta / rope_scaling {type | rope_type, ...} (rope_scaling wins,
// as in transformers). rope types: default; linear -> pi; dynamic -> dynamic_ntk (transformers'
// factor formula); yarn -> yarn with the index ramp (beta_fast -> yarn_beta, beta_slow -> yarn_alpha,
// truncate, attention_factor or mscale / mscale_all_dim -> yarn_mscale); llama3 -> llama3. Every
// config field is either mapped, checked to have the value Horizon computes (e.g. hidden_act silu,
// attention_bias false, partial_rotary_factor 1), or known to leave the forward pass unchanged
// (use_cache, token ids, dtype, ...); anything else is refused by name, as are other
// architectures, quantized checkpoints and custom code (auto_map).
// Limits (checked before anything is allocated): config.json at most 16 MiB, JSON nested at most
// 64 deep; numbers finite; rms_norm_eps in (0, 1), rope_theta and RoPE factors > 0 (llama3:
// high_freq_factor > low_freq_factor), attention_dropout in [0, 1]; sizes positive and at most:
// vocab_size 2^31-1, hidden_size 2^20, intermediate_size 2^22, head counts and head_dim 2^16,
// num_hidden_layers 10000, max_position_embeddings 2^26; a RoPE dict whose rope_type/type is null
// is refused by name. Every refusal is an HfError naming the file and the field.
//
// Export writes the architecture that expresses the model: Llama (all RoPE, causal), Mistral (all
// RoPE, one window on every layer), Qwen2 (q/k/v biases), SmolLM3 (per-layer NoPE and/or per-layer
// windows); config.json carries both layouts (rope_parameters and top-level rope_theta /
// rope_scaling) so transformers 4 and 5 read the same model. Refused, naming the reason: SCOPE
// scopes, ALiBi, p-RoPE, logit transforms (scale-invariant, LogN, SWAN row scaling, temperature),
// QK-norm, MLPs other than SwiGLU, different RoPE settings or window sizes across layers, and YaRN's
// rotations ramp (transformers implements only the index ramp).
//
// hf/config.cpp reads and writes what the architectures share; each architecture's own fields,
// import and export, are in its file (hf/llama.cpp, hf/mistral.cpp, hf/qwen2.cpp, hf/smollm3.cpp;
// the interface is hf/architecture.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "nn/transformer.h"

namespace hz::hf {

// A checkpoint Horizon cannot import or a model it cannot export (names the field and why).
struct HfError : hz::ValueError {
  using ValueError::ValueError;
};

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

// config.json text -> model config (train_len = max_position_embeddings). `where` names the
// file in messages. Throws HfError.
nn::ModelConfig import_config(const std::string& config_json_text, const std::string& where,
                              ImportReport* report = nullptr);
nn::ModelConfig import_config_dir(const std::string& dir, ImportReport* report = nullptr);

struct SpecialTokens {
  int64_t bos = -1, eos = -1, pad = -1;  // -1: null in config.json
};

struct ExportReport {
  std::string architecture, dir;
  std::vector<FieldNote> config;      // what config.json says, and from which Horizon field
  std::vector<std::string> notes;     // e.g. zero biases added, NTK folded into rope_theta
  std::vector<std::string> warnings;  // what was left out of the source's files (auto_map, ...): stderr
  std::vector<std::string> files;
};

// The config.json "architectures" names import reads and export writes, in the order import tries
// them: the stock ones, then HorizonForCausalLM.
std::vector<std::string> architecture_names();

// The config.json (text) and architecture that express `c`; throws HfError listing every reason
// when no standard architecture does.
std::string export_config(const nn::ModelConfig& c, const SpecialTokens& tokens, io::StoreAs store,
                          ExportReport* report = nullptr);

}  // namespace hz::hf
