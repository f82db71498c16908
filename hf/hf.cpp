// Hugging Face directories: weights in and out, tokenizer files (see hf/hf.h).
#include "hf/hf.h"

#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/file.h"
#include "data/hf_pipeline.h"
#include "data/tokenizer.h"
#include "hf/architecture.h"

namespace hz::hf {

namespace fs = std::filesystem;
using json = nlohmann::json;

bool is_hf_dir(const std::string& path) {
  // whatever its type: a config.json that is not a regular file is then refused by name when read,
  // never opened here (a FIFO would wait for a writer)
  std::error_code ec;
  return fs::exists(path + "/config.json", ec);
}

std::vector<std::pair<std::string, std::string>> parameter_names(const nn::ModelConfig& c) {
  std::vector<std::pair<std::string, std::string>> out{{"model.embed_tokens.weight", "embed.weight"}};
  const std::vector<attn::AttentionSpec> specs = c.layer_specs();
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".", h = "layers." + std::to_string(l) + ".";
    out.emplace_back(p + "input_layernorm.weight", h + "norm1.weight");
    for (const auto& [hf, hz] : {std::pair<const char*, const char*>{"q_proj", "wq"}, {"k_proj", "wk"}, {"v_proj", "wv"}}) {
      out.emplace_back(p + "self_attn." + hf + ".weight", h + "attn." + hz + ".weight");
      if (c.qkv_bias) out.emplace_back(p + "self_attn." + hf + ".bias", h + "attn." + hz + ".bias");
    }
    out.emplace_back(p + "self_attn.o_proj.weight", h + "attn.wo.weight");
    // what the layer's ingredients add (only HorizonForCausalLM has them)
    const attn::AttentionSpec& s = specs[l];
    if (s.qk_norm != attn::QKNorm::None) {
      out.emplace_back(p + "self_attn.q_norm.weight", h + "attn.q_norm.weight");
      out.emplace_back(p + "self_attn.k_norm.weight", h + "attn.k_norm.weight");
    }
    if (s.gate != attn::OutputGate::None) out.emplace_back(p + "self_attn.gate_proj.weight", h + "attn.wg.weight");
    if (s.diff) out.emplace_back(p + "self_attn.lambda_proj.weight", h + "attn.wl.weight");
    if (s.logit.kind == attn::LogitKind::LogN && s.logit.logn_learnable)
      out.emplace_back(p + "self_attn.logn_c", h + "attn.logn_c");
    if (s.sink) out.emplace_back(p + "self_attn.sinks", h + "attn.sink");
    if (s.forget) {
      out.emplace_back(p + "self_attn.forget_proj.weight", h + "attn.forget_w");
      out.emplace_back(p + "self_attn.forget_proj.bias", h + "attn.forget_b");
    }
    if (s.pos.kind == attn::PosKind::Rope && s.pos.rope_angles == attn::RopeAngles::Accumulated) {
      out.emplace_back(p + "self_attn.angle_proj.weight", h + "attn.angle_w");
      out.emplace_back(p + "self_attn.angle_proj.bias", h + "attn.angle_b");
    }
    if (s.pos.kind == attn::PosKind::Rope && s.pos.learned_freqs != attn::LearnedFreqs::None)
      out.emplace_back(p + "self_attn.freq_factors", h + "attn.freq_factors");
    if (s.additive_rates()) {  // GRAPE-A: the gates' directions, and omega's w when it is learned
      if (s.additive != attn::AdditiveKind::Query) out.emplace_back(p + "self_attn.additive_u", h + "attn.additive_u");
      if (s.additive != attn::AdditiveKind::Key) out.emplace_back(p + "self_attn.additive_v", h + "attn.additive_v");
      if (s.additive_learned_slope) out.emplace_back(p + "self_attn.additive_w", h + "attn.additive_w");
    }
    out.emplace_back(p + "post_attention_layernorm.weight", h + "norm2.weight");
    if (c.mlp == nn::MlpKind::SwiGLU) {
      out.emplace_back(p + "mlp.gate_proj.weight", h + "mlp.w1.weight");
      out.emplace_back(p + "mlp.up_proj.weight", h + "mlp.w3.weight");
    } else {  // relu2 / gelu: one input projection
      out.emplace_back(p + "mlp.up_proj.weight", h + "mlp.w1.weight");
    }
    out.emplace_back(p + "mlp.down_proj.weight", h + "mlp.w2.weight");
  }
  out.emplace_back("model.norm.weight", "norm.weight");
  if (!c.tie_embeddings) out.emplace_back("lm_head.weight", "head.weight");
  return out;
}

std::map<std::string, Shape> parameter_shapes(const nn::ModelConfig& c) {
  const int64_t V = c.vocab_size, C = c.d_model, H = c.n_heads, Hkv = c.kv_heads(), D = c.hdim(), F = c.hidden();
  std::map<std::string, Shape> s{{"embed.weight", {V, C}}, {"norm.weight", {C}}};
  if (!c.tie_embeddings) s["head.weight"] = {V, C};
  const std::vector<attn::AttentionSpec> specs = c.layer_specs();
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string h = "layers." + std::to_string(l) + ".";
    s[h + "norm1.weight"] = {C};
    s[h + "norm2.weight"] = {C};
    const attn::AttentionSpec& a = specs[l];
    const int64_t Ha = a.attn_heads(H);  // DIFF V2: 2H query heads
    s[h + "attn.wq.weight"] = {Ha * D, C};
    s[h + "attn.wk.weight"] = {Hkv * D, C};
    s[h + "attn.wv.weight"] = {Hkv * D, C};
    s[h + "attn.wo.weight"] = {C, H * D};
    if (c.qkv_bias) {
      s[h + "attn.wq.bias"] = {Ha * D};
      s[h + "attn.wk.bias"] = {Hkv * D};
      s[h + "attn.wv.bias"] = {Hkv * D};
    }
    s[h + "mlp.w1.weight"] = {F, C};
    if (c.mlp == nn::MlpKind::SwiGLU) s[h + "mlp.w3.weight"] = {F, C};
    s[h + "mlp.w2.weight"] = {C, F};
    if (a.qk_norm == attn::QKNorm::Full) {
      s[h + "attn.q_norm.weight"] = {Ha * D};
      s[h + "attn.k_norm.weight"] = {Hkv * D};
    } else if (a.qk_norm == attn::QKNorm::PerHead) {
      s[h + "attn.q_norm.weight"] = {D};
      s[h + "attn.k_norm.weight"] = {D};
    }
    if (a.gate != attn::OutputGate::None) s[h + "attn.wg.weight"] = {a.gate == attn::OutputGate::Head ? H : H * D, C};
    if (a.diff) s[h + "attn.wl.weight"] = {H, C};
    if (a.logit.kind == attn::LogitKind::LogN && a.logit.logn_learnable) s[h + "attn.logn_c"] = {Ha};
    if (a.sink) s[h + "attn.sink"] = {Ha};
    if (a.forget) {
      s[h + "attn.forget_w"] = {Ha, C};
      s[h + "attn.forget_b"] = {Ha};
    }
    if (a.pos.kind == attn::PosKind::Rope && a.pos.rope_angles == attn::RopeAngles::Accumulated) {
      const int64_t G = a.pos.angles_per_head ? Hkv : 1;
      s[h + "attn.angle_w"] = {G * (D / 2), C};
      s[h + "attn.angle_b"] = {G * (D / 2)};
    }
    if (a.pos.kind == attn::PosKind::Rope && a.pos.learned_freqs != attn::LearnedFreqs::None)
      s[h + "attn.freq_factors"] = {(a.pos.learned_freqs == attn::LearnedFreqs::Head ? Hkv : 1) * (D / 2)};
    if (a.additive_rates()) {
      if (a.additive != attn::AdditiveKind::Query) s[h + "attn.additive_u"] = {Ha, D};
      if (a.additive != attn::AdditiveKind::Key) s[h + "attn.additive_v"] = {Ha, D};
      if (a.additive_learned_slope) s[h + "attn.additive_w"] = {Ha};
    }
  }
  return s;
}

std::string tokenizer_file(const std::string& dir) {
  for (const char* f : {"tokenizer.json", "tokenizer.model"}) {
    std::error_code ec;
    if (fs::is_regular_file(fs::path(dir) / f, ec)) return (fs::path(dir) / f).string();
  }
  return "";
}

std::map<std::string, Tensor> import_weights(const std::string& dir, const nn::ModelConfig& c, DType dtype,
                                             ImportReport* report) {
  const io::SafetensorsSet set = io::SafetensorsSet::open_dir(dir);
  const auto shapes = parameter_shapes(c);
  std::map<std::string, Tensor> out;
  std::set<std::string> used;
  std::vector<std::string> skipped;
  for (const auto& [hf, hz] : parameter_names(c)) {
    if (!set.has(hf))
      throw HfError(dir + ": tensor '" + hf + "' (Horizon's " + hz + ") is missing; the weights do not match config.json");
    const Shape& want = shapes.at(hz);
    const io::TensorEntry& e = set.entry(hf);
    if (e.shape != want)
      throw HfError(set.file_of(hf) + ": tensor '" + hf + "' has shape " + shape_str(e.shape) + " but the model (" +
                    dir + "/config.json, or the recipe's model section) implies " + shape_str(want));
    if (e.dtype != "F32" && e.dtype != "F64" && e.dtype != "BF16" && e.dtype != "F16")
      throw HfError(set.file_of(hf) + ": tensor '" + hf + "' holds " + e.dtype +
                    " values; a weight is a float (F32, F64, BF16 or F16): casting integers would load nonsense");
    Tensor t = set.load(hf);
    const int64_t bad = t.first_non_finite();
    if (bad >= 0)
      throw HfError(set.file_of(hf) + ": tensor '" + hf + "' element " + std::to_string(bad) + " of " +
                    shape_str(t.shape()) + " is " + std::to_string(t.at_flat(bad)) +
                    ": weights must be finite (a diverged or damaged model)");
    out[hz] = t.dtype() == dtype ? t : t.to(dtype);
    used.insert(hf);
  }
  std::vector<std::string> unexpected;
  for (const auto& name : set.names()) {
    if (used.count(name)) continue;
    const std::string inv = ".rotary_emb.inv_freq";
    if (name.size() > inv.size() && name.compare(name.size() - inv.size(), inv.size(), inv) == 0) {
      skipped.push_back(name + " (derived from config.json)");
      continue;
    }
    const std::string obias = ".self_attn.o_proj.bias";
    if (name.size() > obias.size() && name.compare(name.size() - obias.size(), obias.size(), obias) == 0) {
      // attention_bias = true (Llama, SmolLM3) also biases o_proj; Horizon has no such bias, so it
      // must be zero (as Horizon's own exports write it)
      const std::vector<double> v = set.load(name).to_vector();
      for (double x : v)
        if (x != 0.0)
          throw HfError(set.file_of(name) + ": " + name + " is not zero: Horizon's attention output projection has no "
                        "bias (only q/k/v biases, model.qkv_bias), so this checkpoint cannot be imported exactly");
      skipped.push_back(name + " (zero o_proj bias)");
      continue;
    }
    if (name == "lm_head.weight" && c.tie_embeddings) {
      const Tensor head = set.load(name).to(dtype), emb = out.at("embed.weight");
      if (head.shape() != emb.shape() ||
          std::memcmp(head.raw_data(), emb.raw_data(), emb.numel() * dtype_size(dtype)) != 0)
        throw HfError(dir + ": lm_head.weight differs from model.embed_tokens.weight although tie_word_embeddings is "
                            "true; set tie_word_embeddings to false in config.json if the head is separate");
      skipped.push_back(name + " (equal to the tied embedding)");
      continue;
    }
    unexpected.push_back(name);
  }
  if (!unexpected.empty()) {
    std::string list;
    for (size_t i = 0; i < unexpected.size() && i < 5; ++i) list += (i ? ", '" : "'") + unexpected[i] + "'";
    throw HfError(dir + ": " + std::to_string(unexpected.size()) + " tensor(s) have no place in the model config.json " +
                  "describes: " + list + (unexpected.size() > 5 ? ", ..." : "") +
                  " (a different architecture, adapters, or a config.json that does not belong to these weights)");
  }
  if (report) {
    for (const auto& [hz, t] : out) report->tensors.push_back(hz);
    report->skipped = skipped;
  }
  return out;
}

Imported import_dir(const std::string& dir, DType dtype) {
  Imported im;
  im.cfg = import_config_dir(dir, &im.report);
  im.weights = import_weights(dir, im.cfg, dtype, &im.report);
  return im;
}

// ---- byte tokenizer as a Hugging Face tokenizer ----------------------------------------------------
namespace {

// GPT-2's byte -> unicode code point map (printable bytes map to themselves).
std::vector<uint32_t> byte_to_unicode() {
  std::vector<uint32_t> cp(256, 0);
  std::vector<bool> direct(256, false);
  for (int b = '!'; b <= '~'; ++b) direct[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
  uint32_t n = 0;
  for (int b = 0; b < 256; ++b) cp[b] = direct[b] ? static_cast<uint32_t>(b) : 256 + n++;
  return cp;
}

std::string utf8(uint32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

const char* const kByteSpecials[] = {"<|horizon_bos|>", "<|horizon_eos|>", "<|horizon_pad|>"};

// Every file of an export is written whole or not at all (core/file.h), as its weights are.
void write_text(const fs::path& p, const std::string& text) { write_file_atomic(p.string(), text); }

// generation_config.json as transformers' GenerationConfig.from_model_config writes it: the special
// token ids exactly as the exported config.json has them (a null one left out), nothing else, so
// generate() decodes greedily as `horizon generate` does unless the call asks otherwise.
std::string generation_config(const std::string& config_json) {
  const json c = json::parse(config_json);
  json g = json::object();
  g["_from_model_config"] = true;
  for (const char* k : {"bos_token_id", "eos_token_id", "pad_token_id"})
    if (c.contains(k) && !c[k].is_null()) g[k] = c[k];
  if (c.contains("transformers_version")) g["transformers_version"] = c["transformers_version"];
  return g.dump(2) + "\n";
}

// The tokenizer_config.json / special_tokens_map.json beside an exported tokenizer file, rewritten
// with the keys Horizon understands only: the special tokens (as their text), the tokenizer's class
// and the length and BOS/EOS flags transformers reads. Everything else is left out by name in
// `warnings`, above all an auto_map: it names tokenizer code in another repository, which a user who
// loads the export with trust_remote_code=True (as a HorizonForCausalLM export asks) would run.
json exported_tokenizer_config(const fs::path& src, bool with_settings, std::vector<std::string>& warnings) {
  static const std::set<std::string> kTokens = {"bos_token", "eos_token", "pad_token", "unk_token"};
  static const std::set<std::string> kFlags = {"add_bos_token", "add_eos_token", "clean_up_tokenization_spaces"};
  const json in = data::hf::parse_json_file(src.string());
  if (!in.is_object()) throw HfError(src.string() + ": expected a JSON object");
  json out = json::object();
  std::vector<std::string> dropped;
  for (auto it = in.begin(); it != in.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    auto wrong = [&](const char* want) {
      throw HfError(src.string() + ": " + k + ": expected " + want + ", got " +
                    v.dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 80));
    };
    if (kTokens.count(k)) {
      if (v.is_null() || v.is_string()) out[k] = v;
      else if (v.is_object() && v.contains("content") && v["content"].is_string()) out[k] = v["content"];
      else wrong("a token string, null or {\"content\": ...}");
    } else if (with_settings && kFlags.count(k)) {
      if (!v.is_boolean()) wrong("true or false");
      out[k] = v;
    } else if (with_settings && k == "model_max_length") {
      if (!v.is_number()) wrong("a number");
      out[k] = v;
    } else if (with_settings && k == "tokenizer_class") {
      // a class transformers defines (PreTrainedTokenizerFast, LlamaTokenizerFast...), named plainly
      const std::string name = v.is_string() ? v.get<std::string>() : std::string();
      const bool plain = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
      });
      if (!plain) wrong("the name of a tokenizer class");
      out[k] = v;
    } else if (k == "auto_map") {
      warnings.push_back(src.string() + ": left out auto_map " +
                         v.dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 200) +
                         ": it names tokenizer code from another repository, which loading the export with "
                         "trust_remote_code=True would run");
    } else {
      dropped.push_back(k);
    }
  }
  if (!dropped.empty()) {
    std::string names;
    for (const auto& d : dropped) names += (names.empty() ? "" : ", ") + d;
    warnings.push_back(src.string() + ": left out keys Horizon does not read: " + names);
  }
  return out;
}

}  // namespace

std::string byte_tokenizer_json() {
  json vocab = json::object();
  const auto cp = byte_to_unicode();
  for (int b = 0; b < 256; ++b) vocab[utf8(cp[b])] = b;
  json added = json::array();
  for (int i = 0; i < 3; ++i)
    added.push_back({{"id", data::ByteTokenizer::kBos + i},
                     {"content", kByteSpecials[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  json t = {{"version", "1.0"},
            {"truncation", nullptr},
            {"padding", nullptr},
            {"added_tokens", added},
            {"normalizer", nullptr},
            {"pre_tokenizer", byte_level},
            {"post_processor", nullptr},
            {"decoder", byte_level},
            {"model",
             {{"type", "BPE"},
              {"dropout", nullptr},
              {"unk_token", nullptr},
              {"continuing_subword_prefix", nullptr},
              {"end_of_word_suffix", nullptr},
              {"fuse_unk", false},
              {"byte_fallback", false},
              {"ignore_merges", false},
              {"vocab", vocab},
              {"merges", json::array()}}}};
  return t.dump(1) + "\n";
}

std::string tokenizer_spec(const std::string& dir) {
  const std::string f = tokenizer_file(dir);
  if (f.empty() || fs::path(f).filename() != "tokenizer.json") return f;
  std::string text;  // a regular file (core/file.h); the byte tokenizer's file is a few KB
  const std::string byte = byte_tokenizer_json();
  if (const std::string why = read_file_capped(f, 1 << 20, text); !why.empty() && why.rfind("the file holds", 0) != 0)
    throw HfError(f + ": " + why);
  return text == byte ? "byte" : f;
}

ExportReport export_dir(const nn::ModelConfig& c, const std::map<std::string, Tensor>& weights, const std::string& tokenizer,
                        const std::string& out_dir, const ExportOptions& opt) {
  SpecialTokens st;
  if (!tokenizer.empty()) {
    const auto tok = data::make_tokenizer(tokenizer);
    HZ_CHECK(tok->vocab_size() <= c.vocab_size, HfError, "export: the tokenizer '", tokenizer, "' has ", tok->vocab_size(),
             " tokens but the model's vocabulary is ", c.vocab_size);
    st = {tok->bos(), tok->eos(), tok->pad()};
  }
  ExportReport rep;
  // a stock architecture where one expresses the model, else Horizon's own (remote code); decided
  // and refused before touching the disk
  std::string config, stock_refusal;
  if (opt.target != ExportTarget::Horizon) {
    try {
      config = export_config(c, st, opt.store, &rep);
    } catch (const HfError& e) {
      if (opt.target == ExportTarget::Stock) throw;
      stock_refusal = e.what();
    }
  }
  const bool horizon = config.empty();
  if (horizon) config = horizon_config(c, st, opt.store, &rep);
  rep.dir = out_dir;
  const fs::path d(out_dir);
  std::error_code ec;
  if (fs::exists(d, ec) && !(fs::is_directory(d, ec) && fs::is_empty(d, ec)))
    throw HfError(out_dir + ": exists and is not an empty directory; export into a new directory");
  const std::string card = opt.model_card ? opt.model_card(rep.architecture) : std::string();

  std::map<std::string, Tensor> hf;
  const auto shapes = parameter_shapes(c);
  for (const auto& [hfname, hz] : parameter_names(c)) {
    auto it = weights.find(hz);
    if (it == weights.end()) throw HfError("export: the model has no parameter '" + hz + "'");
    if (it->second.shape() != shapes.at(hz))
      throw HfError("export: parameter '" + hz + "' has shape " + shape_str(it->second.shape()) + ", config implies " +
                    shape_str(shapes.at(hz)));
    hf[hfname] = it->second;
  }
  for (const auto& [hz, t] : weights)
    if (!shapes.count(hz)) throw HfError("export: parameter '" + hz + "' has no counterpart in " + rep.architecture);
  // the biases the architecture has and the model does not, as zeros (hf/qwen2.cpp, hf/smollm3.cpp)
  find_architecture(rep.architecture)->zero_tensors(c, weights.at("embed.weight").dtype(), hf);
  rep.files = io::save_safetensors_dir(out_dir, hf, {{"format", "pt"}}, opt.store, opt.max_shard_bytes);
  write_text(d / "config.json", config);
  rep.files.push_back((d / "config.json").string());
  write_text(d / "generation_config.json", generation_config(config));
  rep.files.push_back((d / "generation_config.json").string());
  if (!card.empty()) {
    write_text(d / "README.md", card);
    rep.files.push_back((d / "README.md").string());
  }
  if (horizon) {
    write_text(d / "configuration_horizon.py", configuration_horizon_py());
    write_text(d / "modeling_horizon.py", modeling_horizon_py());
    write_text(d / "horizon_fields.json", horizon_fields_json());  // configuration_horizon.py's defaults and checks
    rep.files.push_back((d / "configuration_horizon.py").string());
    rep.files.push_back((d / "modeling_horizon.py").string());
    rep.files.push_back((d / "horizon_fields.json").string());
    rep.notes.push_back("load with AutoModelForCausalLM.from_pretrained(dir, trust_remote_code=True): the model's code "
                        "is modeling_horizon.py");
    if (!stock_refusal.empty()) {  // the first reason the stock architectures gave
      const size_t a = stock_refusal.find("\n  - ");
      const std::string first = a == std::string::npos ? stock_refusal : stock_refusal.substr(a + 5);
      const size_t b = first.find('\n');
      rep.notes.push_back("no stock architecture expresses it: " + first.substr(0, b) +
                          (b != std::string::npos ? " (and more)" : ""));
    }
  }
  if (tokenizer.empty()) {
    rep.notes.push_back("no tokenizer written (the model has none)");
  } else if (tokenizer == "byte") {
    write_text(d / "tokenizer.json", byte_tokenizer_json());
    const json tc = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                     {"bos_token", kByteSpecials[0]},
                     {"eos_token", kByteSpecials[1]},
                     {"pad_token", kByteSpecials[2]},
                     {"add_bos_token", false},
                     {"add_eos_token", false},
                     {"clean_up_tokenization_spaces", false},
                     {"model_max_length", c.train_len}};
    write_text(d / "tokenizer_config.json", tc.dump(2) + "\n");
    rep.files.push_back((d / "tokenizer.json").string());
    rep.files.push_back((d / "tokenizer_config.json").string());
    rep.notes.push_back("Horizon's byte tokenizer written as tokenizer.json (byte-level BPE without merges; ids 0-255 = "
                        "bytes, 256/257/258 = <|horizon_bos|>/<|horizon_eos|>/<|horizon_pad|>)");
  } else {
    const fs::path src(tokenizer);
    const std::string name = src.extension() == ".model" ? "tokenizer.model" : "tokenizer.json";
    const fs::path tmp = d / (name + ".tmp");  // complete or absent, as every file of the export
    fs::copy_file(src, tmp, fs::copy_options::overwrite_existing, ec);
    if (!ec) fs::rename(tmp, d / name, ec);
    if (ec) {
      fs::remove(tmp, ec);
      throw HfError(out_dir + ": cannot copy the tokenizer " + tokenizer + ": " + ec.message());
    }
    rep.files.push_back((d / name).string());
    // the files beside it rewritten with what Horizon understands, never copied: an auto_map there
    // would make the export run another repository's code
    for (const char* extra : {"tokenizer_config.json", "special_tokens_map.json"})
      if (fs::exists(src.parent_path() / extra, ec)) {
        const json kept = exported_tokenizer_config(src.parent_path() / extra,
                                                    std::string(extra) == "tokenizer_config.json", rep.warnings);
        write_text(d / extra, kept.dump(2) + "\n");
        rep.files.push_back((d / extra).string());
      }
  }
  return rep;
}

}  // namespace hz::hf
