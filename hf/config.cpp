// Hugging Face config.json <-> Horizon model config (see hf/config.h for the mapping).
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <type_traits>

#include "attention/spec_fields.h"
#include "core/json_guard.h"
#include "hf/architecture.h"
#include "hf/config.h"
#include "hf/hf.h"  // tokenizer_file

namespace hz::hf {

namespace {

constexpr uint64_t kMaxConfigBytes = 16ull << 20;  // config.json (real ones: a few KB)

// Fields a transformers config may carry that leave the forward pass unchanged, with the reason.
const std::map<std::string, std::string>& harmless_fields() {
  static const std::map<std::string, std::string> m = [] {
    std::map<std::string, std::string> h{
        {"_name_or_path", "provenance"},
        {"transformers_version", "provenance"},
        {"use_cache", "key/value cache during generation"},
        {"dtype", "storage dtype; weights are converted on import"},
        {"torch_dtype", "storage dtype; weights are converted on import"},
        {"bos_token_id", "a tokenizer special (the tokenizer file defines it)"},
        {"eos_token_id", "a tokenizer special (the tokenizer file defines it)"},
        {"pad_token_id", "a tokenizer special (the tokenizer file defines it)"},
        {"sep_token_id", "a tokenizer special"},
        {"decoder_start_token_id", "encoder-decoder generation only"},
        {"pretraining_tp", "transformers 4 split the same matmuls into slices; same math"},
        {"tokenizer_class", "names the tokenizer class"},
        {"return_dict", "output container"},
        {"output_hidden_states", "output container"},
        {"output_attentions", "output container"},
        {"torchscript", "export option"},
        {"use_bfloat16", "legacy storage flag"},
        {"tf_legacy_loss", "TensorFlow loss option"},
        {"pruned_heads", "must be empty (checked)"},
        {"chunk_size_feed_forward", "memory option, same math"},
        {"is_encoder_decoder", "must be false (checked)"},
        {"is_decoder", "decoder flag"},
        {"add_cross_attention", "must be false (checked)"},
        {"cross_attention_hidden_size", "cross attention is off"},
        {"tie_encoder_decoder", "encoder-decoder only"},
        {"finetuning_task", "metadata"},
        {"id2label", "classification heads only"},
        {"label2id", "classification heads only"},
        {"num_labels", "classification heads only"},
        {"problem_type", "classification heads only"},
        {"prefix", "generation prompt prefix"},
        {"task_specific_params", "generation presets"},
        {"_attn_implementation_autoset", "kernel choice, same math"},
        {"attn_implementation", "kernel choice, same math"},
        {"is_llama_config", "a marker of nanotron's conversion (SmolLM2)"},
    };
    for (const char* g : {"max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
                          "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
                          "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
                          "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
                          "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
                          "suppress_tokens", "begin_suppress_tokens"})
      h[g] = "generation default (sampling), not the model";
    return h;
  }();
  return m;
}

// The RoPE parameters of one config (rope_scaling or rope_parameters) as a variant reads them: each
// read marks its key used (the rest are reported as ignored) and refuses a bad value by its key.
struct RopeParams {
  Fields& c;
  const json& p;
  std::string src;  // "rope_scaling" or "rope_parameters"
  int64_t max_pos;  // max_position_embeddings
  std::set<std::string> used{"rope_type", "type", "rope_theta", "partial_rotary_factor"};

  const json* get(const std::string& k) {
    used.insert(k);
    return p.contains(k) && !p[k].is_null() ? &p[k] : nullptr;
  }
  double number(const std::string& k, std::optional<double> def) {
    const json* v = get(k);
    if (!v) {
      if (!def) c.fail(src + "." + k, "is missing");
      return *def;
    }
    if (!v->is_number()) c.fail(src + "." + k, "must be a number, got " + v->dump());
    const double x = v->get<double>();
    if (!std::isfinite(x)) c.fail(src + "." + k, "must be a finite number, got " + v->dump());
    return x;
  }
  // factors, thetas, lengths: > 0 (a zero or negative one divides by zero or flips the frequencies)
  double positive(const std::string& k, std::optional<double> def) {
    const double x = number(k, def);
    if (!(x > 0)) c.fail(src + "." + k, "must be positive, got " + num(x));
    return x;
  }
  // original_max_position_embeddings: a positive integer below 2^31 (written as a number), read from
  // the parameters, else from the config's top level, else `fallback`
  int64_t original_context(int64_t fallback) {
    const std::string k = "original_max_position_embeddings";
    if (!get(k)) return c.integer(k, fallback);
    const double x = number(k, 0);
    if (!(x >= 1 && x < 2147483648.0) || x != std::floor(x))
      c.fail(src + "." + k, "must be a positive integer below 2^31, got " + num(x));
    return static_cast<int64_t>(x);
  }
  // LongRoPE's lists: one positive finite factor per frequency pair
  std::vector<double> factors(const std::string& k) {
    const json* v = get(k);
    if (!v || !v->is_array() || v->empty() || v->size() > 65536)
      c.fail(src + "." + k, "must be a list of positive numbers, one per frequency pair");
    std::vector<double> out;
    for (const json& x : *v) {
      if (!x.is_number() || !(x.get<double>() > 0) || !std::isfinite(x.get<double>()))
        c.fail(src + "." + k, "holds " + x.dump() + "; every factor must be a positive finite number");
      out.push_back(x.get<double>());
    }
    return out;
  }
  void mapped(const std::string& k, const std::string& value, const std::string& to) { c.mapped(src + "." + k, value, to); }
};

// transformers' rope types, one reader each: what it sets in the RoPE layers' spec.
void read_default(RopeParams& r, attn::PositionSpec&) { r.mapped("rope_type", "default", "pos: rope (no scaling)"); }

void read_linear(RopeParams& r, attn::PositionSpec& pos) {
  pos.scaling = attn::RopeScaling::PI;
  pos.factor = r.positive("factor", std::nullopt);
  r.mapped("rope_type", "linear", "rope_scaling: pi");
  r.mapped("factor", num(pos.factor), "rope_factor (positions divided by it)");
}

void read_dynamic(RopeParams& r, attn::PositionSpec& pos) {
  pos.scaling = attn::RopeScaling::DynamicNTK;
  pos.factor = r.positive("factor", std::nullopt);
  pos.original_context = r.max_pos;
  r.mapped("rope_type", "dynamic", "rope_scaling: dynamic_ntk (s = factor T/C - (factor - 1) past C)");
  r.mapped("factor", num(pos.factor), "rope_factor");
  r.c.mapped("max_position_embeddings", std::to_string(r.max_pos), "rope_original_context C of dynamic_ntk");
}

void read_yarn(RopeParams& r, attn::PositionSpec& pos) {
  const int64_t orig = r.original_context(r.max_pos);
  if (orig <= 0) r.c.fail("original_max_position_embeddings", "must be positive, got " + std::to_string(orig));
  const double factor = r.get("factor") ? r.positive("factor", 0) : static_cast<double>(r.max_pos) / orig;
  const double bf = r.get("beta_fast") ? r.number("beta_fast", 32) : 32.0;
  const double bs = r.get("beta_slow") ? r.number("beta_slow", 1) : 1.0;
  bool truncate = true;
  if (const json* t = r.get("truncate")) {
    if (!t->is_boolean()) r.c.fail(r.src + ".truncate", "must be true or false");
    truncate = t->get<bool>();
  }
  auto get_mscale = [](double s, double m) { return s <= 1 ? 1.0 : 0.1 * m * std::log(s) + 1.0; };
  double af = 0;
  if (r.get("attention_factor")) af = r.number("attention_factor", 0);
  const double ms = r.get("mscale") ? r.number("mscale", 0) : 0, msa = r.get("mscale_all_dim") ? r.number("mscale_all_dim", 0) : 0;
  if (af == 0 && ms != 0 && msa != 0) af = get_mscale(factor, ms) / get_mscale(factor, msa);
  if (factor <= 1.0) {
    if (af != 0 && af != 1.0)
      r.c.fail(r.src, "yarn with factor " + num(factor) + " <= 1 but an attention factor " + num(af) +
                          ": Horizon's YaRN is the identity there; refused");
    r.mapped("rope_type", "yarn", "pos: rope (factor <= 1: no scaling)");
    return;
  }
  pos.scaling = attn::RopeScaling::YaRN;
  pos.factor = factor;
  pos.original_context = orig;
  pos.yarn_beta = bf == 0 ? 32.0 : bf;  // transformers: `beta_fast or 32`
  pos.yarn_alpha = bs == 0 ? 1.0 : bs;
  pos.yarn_ramp = attn::YarnRamp::Index;
  pos.yarn_truncate = truncate;
  pos.yarn_mscale = af;
  r.mapped("rope_type", "yarn", "rope_scaling: yarn, yarn_ramp: index (transformers' ramp over pair indices)");
  r.mapped("factor", num(factor), "rope_factor");
  r.mapped("original_max_position_embeddings", std::to_string(orig), "rope_original_context");
  r.mapped("beta_fast", num(pos.yarn_beta), "yarn_beta");
  r.mapped("beta_slow", num(pos.yarn_alpha), "yarn_alpha");
  r.mapped("truncate", truncate ? "true" : "false", "yarn_truncate");
  r.mapped("attention_factor", af > 0 ? num(af) : "auto", af > 0 ? "yarn_mscale" : "yarn_mscale 0 (0.1 ln s + 1)");
}

void read_llama3(RopeParams& r, attn::PositionSpec& pos) {
  pos.scaling = attn::RopeScaling::Llama3;
  pos.factor = r.positive("factor", std::nullopt);
  pos.llama3_low_freq_factor = r.positive("low_freq_factor", std::nullopt);
  pos.llama3_high_freq_factor = r.positive("high_freq_factor", std::nullopt);
  if (!(pos.llama3_high_freq_factor > pos.llama3_low_freq_factor))
    r.c.fail(r.src + ".high_freq_factor", "(" + num(pos.llama3_high_freq_factor) + ") must exceed low_freq_factor (" +
                                              num(pos.llama3_low_freq_factor) + "): the smoothing divides by their difference");
  pos.original_context = r.original_context(r.max_pos);
  if (pos.original_context <= 0)
    r.c.fail("original_max_position_embeddings", "must be positive, got " + std::to_string(pos.original_context));
  r.mapped("rope_type", "llama3", "rope_scaling: llama3");
  r.mapped("factor", num(pos.factor), "rope_factor");
  r.mapped("low_freq_factor", num(pos.llama3_low_freq_factor), "llama3_low_freq_factor");
  r.mapped("high_freq_factor", num(pos.llama3_high_freq_factor), "llama3_high_freq_factor");
  r.mapped("original_max_position_embeddings", std::to_string(pos.original_context), "rope_original_context");
  if (pos.factor <= 1.0) pos.scaling = attn::RopeScaling::None;
}

// LongRoPE (Phi-3's): inv_freq_m / lambda_m, the long factors past original_max_position_embeddings
void read_longrope(RopeParams& r, attn::PositionSpec& pos) {
  pos.longrope_long_factors = r.factors("long_factor");
  pos.longrope_short_factors = r.factors("short_factor");
  pos.original_context = r.original_context(0);
  if (pos.original_context <= 0) r.c.fail(r.src + ".original_max_position_embeddings", "is missing (LongRoPE switches factors there)");
  // transformers: factor, else max_position_embeddings / original_max_position_embeddings (Phi-3)
  pos.factor = r.get("factor") ? r.positive("factor", 0) : static_cast<double>(r.max_pos) / pos.original_context;
  if (pos.factor < 1.0) r.c.fail(r.src + ".factor", "= " + num(pos.factor) + " < 1: LongRoPE extends a context; refused");
  if (r.get("attention_factor")) pos.yarn_mscale = r.positive("attention_factor", 0);
  pos.scaling = attn::RopeScaling::LongRoPE;
  r.mapped("rope_type", "longrope", "rope_scaling: longrope");
  r.mapped("long_factor", std::to_string(pos.longrope_long_factors.size()) + " values", "longrope_long_factors");
  r.mapped("short_factor", std::to_string(pos.longrope_short_factors.size()) + " values", "longrope_short_factors");
  r.mapped("factor", num(pos.factor), "rope_factor (the attention factor's s)");
  r.mapped("original_max_position_embeddings", std::to_string(pos.original_context), "rope_original_context");
  r.mapped("attention_factor", pos.yarn_mscale > 0 ? num(pos.yarn_mscale) : "auto",
           pos.yarn_mscale > 0 ? "yarn_mscale" : "yarn_mscale 0 (sqrt(1 + ln s / ln C))");
}

struct RopeVariant {
  const char* type;  // transformers' rope_type
  void (*read)(RopeParams&, attn::PositionSpec&);
};
constexpr RopeVariant kRopeVariants[] = {{"default", read_default}, {"linear", read_linear}, {"dynamic", read_dynamic},
                                         {"yarn", read_yarn},       {"llama3", read_llama3}, {"longrope", read_longrope}};

std::string rope_type_names() {  // "default, linear, ..., llama3 and longrope"
  std::string s;
  const size_t n = std::size(kRopeVariants);
  for (size_t i = 0; i < n; ++i) s += (i == 0 ? "" : i + 1 == n ? " and " : ", ") + std::string(kRopeVariants[i].type);
  return s;
}

// rope_parameters / rope_scaling / rope_theta / partial_rotary_factor -> the RoPE layers' spec.
attn::PositionSpec import_rope(Fields& c, int64_t max_pos) {
  const json* rs = c.find("rope_scaling");
  const json* rp = c.find("rope_parameters");
  const json* params = rs ? rs : rp;  // transformers: a legacy rope_scaling replaces rope_parameters
  const std::string src = rs ? "rope_scaling" : "rope_parameters";
  if (params && !params->is_object()) c.fail(src, "must be an object, got " + params->dump());
  if (rs && rp && *rp != *rs) {
    json a = *rp, b = *rs;
    a.erase("rope_theta");
    b.erase("rope_theta");
    if (a != b) c.ignored("rope_parameters", rp->dump(), "rope_scaling takes precedence (as in transformers)");
  }
  const json empty = json::object();
  const json& p = params ? *params : empty;
  for (const char* lt : {"full_attention", "sliding_attention"})
    if (p.contains(lt) && p[lt].is_object())
      c.fail(src, "holds RoPE parameters per layer type; Horizon imports one RoPE setting per model");
  static const std::set<std::string> known{"rope_type", "type", "rope_theta", "factor", "original_max_position_embeddings",
                                           "beta_fast", "beta_slow", "truncate", "attention_factor", "mscale",
                                           "mscale_all_dim", "low_freq_factor", "high_freq_factor",
                                           "partial_rotary_factor", "long_factor", "short_factor"};
  for (auto it = p.begin(); it != p.end(); ++it)
    if (!known.count(it.key()))
      c.fail(src + "." + it.key(), "= " + it.value().dump() + " is not a RoPE parameter Horizon knows; refused (it may change the frequencies)");
  // rope_type (or legacy type) of a dict that is given: null drops the scaling silently in
  // Horizon and makes transformers fail, so it is refused by name
  for (const char* k : {"rope_type", "type"}) {
    if (!p.contains(k)) continue;
    if (p[k].is_null()) c.fail(src + "." + k, "is null; give the RoPE type (" + rope_type_names() + ")");
    if (!p[k].is_string()) c.fail(src + "." + k, "must be a string, got " + p[k].dump());
    break;  // transformers reads rope_type first, type only without it
  }
  RopeParams r{c, p, src, max_pos};
  attn::PositionSpec pos;
  pos.kind = attn::PosKind::Rope;
  const json* theta_in = r.get("rope_theta");
  const double top_theta = c.number("rope_theta", 10000.0);
  if (!(top_theta > 0)) c.fail("rope_theta", "must be positive, got " + num(top_theta));
  pos.rope_base = theta_in ? r.positive("rope_theta", 0) : top_theta;
  c.mapped(theta_in ? src + ".rope_theta" : "rope_theta", num(pos.rope_base), "layer kinds' rope_base");
  const json* prf = r.get("partial_rotary_factor");
  const double partial = prf ? r.number("partial_rotary_factor", 1.0) : c.number("partial_rotary_factor", 1.0);
  if (partial != 1.0)
    c.fail("partial_rotary_factor", "= " + num(partial) +
                                        ": transformers then rotates only the first dims of each head at standard "
                                        "frequencies, which no Horizon position encoding computes (p-RoPE keeps "
                                        "log-spaced frequencies); refused");
  std::string type = "default";
  if (const json* t = r.get("rope_type")) type = show(*t);
  else if (const json* t2 = r.get("type")) type = show(*t2);
  const RopeVariant* v = std::find_if(std::begin(kRopeVariants), std::end(kRopeVariants),
                                      [&](const RopeVariant& x) { return type == x.type; });
  if (v == std::end(kRopeVariants))
    c.fail(src + ".rope_type", "'" + type + "' is not supported; Horizon imports " + rope_type_names() + " RoPE");
  v->read(r, pos);
  for (auto it = p.begin(); it != p.end(); ++it)
    if (!r.used.count(it.key()))
      c.ignored(src + "." + it.key(), show(it.value()), "not used by rope_type " + type + " (transformers ignores it too)");
  return pos;
}

}  // namespace

std::string show(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

std::string num(double v) { return fmt::format("{:g}", v); }

void Fields::finish(const std::string& arch) {
  std::vector<std::string> unknown;
  for (auto it = j_.begin(); it != j_.end(); ++it) {
    const std::string& k = it.key();
    if (used_.count(k)) continue;
    if (k == "quantization_config")
      throw HfError(where_ + ": quantization_config: a quantized checkpoint (" + show(it.value()).substr(0, 80) +
                    "); Horizon imports full-precision weights only (dequantize with transformers first)");
    if (k == "auto_map")
      throw HfError(where_ + ": auto_map: the checkpoint needs custom modeling code (trust_remote_code), so "
                             "its math is not the standard " + arch + "; Horizon does not import it");
    auto h = harmless_fields().find(k);
    if (h == harmless_fields().end()) {
      unknown.push_back(k);
      continue;
    }
    const json& v = it.value();
    if ((k == "pruned_heads" && !v.is_null() && !v.empty()) || (k == "is_encoder_decoder" && v == true) ||
        (k == "add_cross_attention" && v == true))
      throw HfError(where_ + ": " + k + " = " + v.dump() + " changes the model; Horizon imports plain decoders only");
    ignored(k, show(v), h->second);
  }
  if (!unknown.empty()) {
    std::string list;
    for (const auto& k : unknown) list += (list.empty() ? "'" : ", '") + k + "' = " + show(j_.at(k)).substr(0, 60);
    throw HfError(where_ + ": field" + (unknown.size() > 1 ? "s " : " ") + list + " not understood by Horizon's " + arch +
                  " importer: " + (unknown.size() > 1 ? "they" : "it") +
                  " may change what the model computes, so the import is refused. If you know a field is "
                  "inert, remove it from config.json");
  }
}

std::vector<std::string> layer_types(Fields& c, int64_t n) {
  const json* lt = c.find("layer_types");
  if (!lt) return {};
  if (!lt->is_array() || static_cast<int64_t>(lt->size()) != n)
    c.fail("layer_types", "must list one type per layer (" + std::to_string(n) + "), got " + lt->dump().substr(0, 80));
  std::vector<std::string> out;
  for (const auto& x : *lt) {
    if (!x.is_string() || (x != "full_attention" && x != "sliding_attention"))
      c.fail("layer_types", "entries must be full_attention or sliding_attention, got " + x.dump());
    out.push_back(x.get<std::string>());
  }
  return out;
}

int64_t sliding_window(Fields& c, int64_t class_default) {
  if (!c.has("sliding_window")) return class_default;
  const json* v = c.find("sliding_window");
  if (!v) return 0;
  if (!v->is_number_integer() || v->get<int64_t>() <= 0) c.fail("sliding_window", "must be a positive integer or null, got " + v->dump());
  return v->get<int64_t>();
}

void import_attention_mlp_bias(Fields& c, nn::ModelConfig& m) {
  if (c.boolean("attention_bias", false)) {
    m.qkv_bias = true;
    c.mapped("attention_bias", "true", "model.qkv_bias: true; o_proj biases must be zero (checked on the weights: "
                                       "Horizon's output projection has none)");
  } else {
    c.checked("attention_bias", "false", "bias-free q/k/v/o projections");
  }
  if (c.boolean("mlp_bias", false)) c.fail("mlp_bias", "= true: Horizon's MLP projections are bias-free; refused");
  c.checked("mlp_bias", "false", "bias-free MLP");
}

std::string apply_layer_types(Fields& c, const std::vector<std::string>& lt, bool use_sw, int64_t w,
                              std::vector<int64_t>& window) {
  std::string marks;
  for (size_t i = 0; i < lt.size(); ++i) {
    const bool sliding = lt[i] == "sliding_attention";
    if (sliding && !(use_sw && w > 0))
      c.fail("layer_types", "marks layer " + std::to_string(i) + " sliding_attention but use_sliding_window is " +
                                (use_sw ? "true" : "false") + " and sliding_window " + (w ? std::to_string(w) : "null") +
                                ": transformers' attention backends disagree on what that computes; refused");
    window[i] = sliding ? w : 0;
    marks += sliding ? 'W' : 'F';
  }
  return marks;
}

const std::vector<const Architecture*>& architectures() {
  static const std::vector<const Architecture*> all{&kLlama, &kMistral, &kQwen2, &kSmolLM3, &kHorizon};
  return all;
}

std::vector<std::string> architecture_names() {
  std::vector<std::string> v;
  for (const Architecture* a : architectures()) v.push_back(a->name);
  return v;
}

const Architecture* find_architecture(const std::string& name) {
  for (const Architecture* a : architectures())
    if (name == a->name) return a;
  return nullptr;
}

std::string ImportReport::str() const {
  std::ostringstream os;
  os << "source: " << source << "\narchitecture: " << architecture << "\n";
  auto block = [&](const char* title, const std::vector<FieldNote>& v) {
    if (v.empty()) return;
    os << title << "\n";
    for (const auto& f : v) os << fmt::format("  {:<40} {:<20} -> {}\n", f.field, f.value.substr(0, 20), f.effect);
  };
  block("mapped (config.json -> Horizon):", mapped);
  block("checked (must hold for Horizon to compute the same):", checked);
  block("read, no effect on the forward pass:", ignored);
  if (!tensors.empty()) os << "tensors loaded: " << tensors.size() << "\n";
  for (const auto& s : skipped) os << "  skipped: " << s << "\n";
  os << "tokenizer: " << (tokenizer.empty() ? std::string("none in the directory") : tokenizer) << "\n";
  return os.str();
}

namespace {
nn::ModelConfig import_config_impl(const std::string& text, const std::string& where, ImportReport* report) {
  ImportReport r;
  r.source = where;
  if (const std::string deep = json_depth_problem(text); !deep.empty()) throw HfError(where + ": " + deep);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw HfError(where + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw HfError(where + ": config.json must be a JSON object");
  Fields c(j, where, r);

  // ---- architecture ---------------------------------------------------------------------------
  std::string arch;
  if (const json* a = c.find("architectures")) {
    if (!a->is_array() || a->size() != 1 || !(*a)[0].is_string())
      c.fail("architectures", "must list exactly one architecture, got " + a->dump());
    arch = (*a)[0].get<std::string>();
  }
  const std::string mt = c.string("model_type", "");
  const Architecture* A = nullptr;
  for (const Architecture* x : architectures())
    if (arch == x->name || (arch.empty() && mt == x->model_type)) A = x;
  if (!A)
    throw HfError(where + ": architecture '" + (arch.empty() ? "model_type " + mt : arch) +
                  "' is not supported; Horizon imports LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                  "SmolLM3ForCausalLM and its own HorizonForCausalLM exports");
  if (!mt.empty() && mt != A->model_type)
    c.fail("model_type", "is '" + mt + "' but architectures names " + A->name);
  r.architecture = A->name;
  c.checked("architectures", A->name, "decoder with SwiGLU MLP, RMSNorm, pre-norm blocks");

  // ---- dimensions -------------------------------------------------------------------------------
  nn::ModelConfig m;
  // Sizes: positive and below a bound far above any real model (so a corrupt value is refused
  // here, not as an allocation of petabytes later).
  auto positive = [&](const char* k, int64_t v) {
    static const std::map<std::string, int64_t> upper{
        {"vocab_size", (int64_t{1} << 31) - 1}, {"hidden_size", int64_t{1} << 20},
        {"num_hidden_layers", 10000},           {"num_attention_heads", int64_t{1} << 16},
        {"num_key_value_heads", int64_t{1} << 16}, {"head_dim", int64_t{1} << 16},
        {"intermediate_size", int64_t{1} << 22}, {"max_position_embeddings", int64_t{1} << 26}};
    if (v <= 0) c.fail(k, "must be positive, got " + std::to_string(v));
    const auto u = upper.find(k);
    if (u != upper.end() && v > u->second)
      c.fail(k, "= " + std::to_string(v) + " is larger than Horizon accepts (at most " + std::to_string(u->second) +
                    "); the config.json is corrupt");
    return v;
  };
  m.vocab_size = positive("vocab_size", c.integer("vocab_size"));
  c.mapped("vocab_size", std::to_string(m.vocab_size), "model.vocab_size");
  m.d_model = positive("hidden_size", c.integer("hidden_size"));
  c.mapped("hidden_size", std::to_string(m.d_model), "model.d_model");
  m.n_layers = positive("num_hidden_layers", c.integer("num_hidden_layers"));
  c.mapped("num_hidden_layers", std::to_string(m.n_layers), "model.n_layers");
  m.n_heads = positive("num_attention_heads", c.integer("num_attention_heads"));
  c.mapped("num_attention_heads", std::to_string(m.n_heads), "model.n_heads");
  m.n_kv_heads = positive("num_key_value_heads", c.integer("num_key_value_heads", m.n_heads));
  c.mapped("num_key_value_heads", std::to_string(m.n_kv_heads), "model.n_kv_heads");
  if (m.d_model % m.n_heads != 0 && !(c.has("head_dim") && !j["head_dim"].is_null()))
    c.fail("hidden_size", "(" + std::to_string(m.d_model) + ") is not divisible by num_attention_heads and no head_dim is given");
  const int64_t hd = positive("head_dim", c.integer("head_dim", m.d_model / m.n_heads));
  m.head_dim = hd;
  c.mapped("head_dim", std::to_string(hd), "model.head_dim");
  m.mlp = nn::MlpKind::SwiGLU;
  m.mlp_hidden = positive("intermediate_size", c.integer("intermediate_size"));
  c.mapped("intermediate_size", std::to_string(m.mlp_hidden), "model.mlp_hidden (mlp: swiglu)");
  const std::string act = c.string("hidden_act", "silu");
  if (A == &kHorizon && (act == "relu2" || act == "gelu")) {
    m.mlp = nn::parse_mlp(act);
    c.mapped("hidden_act", act, std::string("model.mlp: ") + act + " (up_proj, down_proj)");
  } else if (act != "silu" && act != "swish")
    c.fail("hidden_act", "= '" + act + "': the MLP would be gated by " + act +
                             "; Horizon's SwiGLU gates with silu, and no Horizon MLP computes " + act + "(gate) * up; refused");
  else
    c.checked("hidden_act", act, "SwiGLU gate activation silu");
  m.norm_eps = c.number("rms_norm_eps", 1e-6);
  if (!(m.norm_eps > 0 && m.norm_eps < 1))
    c.fail("rms_norm_eps", "must be a positive number below 1, got " + num(m.norm_eps) +
                               " (RMSNorm divides by sqrt(mean(x^2) + eps))");
  c.mapped("rms_norm_eps", num(m.norm_eps), "model.norm_eps");
  m.tie_embeddings = c.boolean("tie_word_embeddings", A->tie_default);
  c.mapped("tie_word_embeddings", m.tie_embeddings ? "true" : "false", "model.tie_embeddings");
  m.init_std = c.number("initializer_range", 0.02);
  if (!(m.init_std >= 0)) c.fail("initializer_range", "must be >= 0, got " + num(m.init_std));
  c.mapped("initializer_range", num(m.init_std), "model.init_std (initialises only parameters Horizon adds)");
  const int64_t max_pos = positive("max_position_embeddings", c.integer("max_position_embeddings", A->max_pos_default));
  m.train_len = max_pos;
  r.max_position_embeddings = max_pos;
  c.mapped("max_position_embeddings", std::to_string(max_pos), "data.seq_len of a converted checkpoint");
  const double dropout = c.number("attention_dropout", 0.0);
  if (!(dropout >= 0 && dropout <= 1)) c.fail("attention_dropout", "must be in [0, 1], got " + num(dropout));
  c.ignored("attention_dropout", num(dropout), dropout > 0 ? "training only; Horizon trains without dropout" : "training only");

  if (c.has("rope_interleaved")) {  // nanotron's conversions (SmolLM2) record the pair layout
    if (c.boolean("rope_interleaved", false))
      c.fail("rope_interleaved", "= true: interleaved RoPE pairs (2m, 2m+1), while transformers' " + std::string(A->name) +
                                     " (and Horizon) rotate the halves (m, m + D/2); refused");
    c.checked("rope_interleaved", "false", "rotate-half pairs (m, m + D/2), as transformers and Horizon");
  }

  // ---- biases (the architecture's fields) -------------------------------------------------------
  A->import_biases(c, m);

  if (A == &kHorizon) {  // Horizon's own export: every layer kind's fields (hf/horizon.cpp)
    import_horizon_layers(c, m);
  } else {
    // ---- position encoding and windows, per layer (the architecture's fields) -----------------
    const attn::PositionSpec rope = import_rope(c, max_pos);
    const int64_t n = m.n_layers;
    LayerLayout layout{std::vector<bool>(n, true), std::vector<int64_t>(n, 0)};
    A->import_layers(c, layout);
    const std::vector<bool>& use_rope = layout.use_rope;
    const std::vector<int64_t>& window = layout.window;

    // ---- layer kinds -------------------------------------------------------------------------------
    std::vector<std::string> names(n);
    m.kinds.clear();
    for (int64_t i = 0; i < n; ++i) {
      std::string name = std::string(use_rope[i] ? "rope" : "nope") + (window[i] ? "_swa" : "");
      names[i] = name;
      bool known = false;
      for (const auto& k : m.kinds) known |= k.name == name;
      if (known) continue;
      attn::AttentionSpec s;
      if (use_rope[i]) s.pos = rope;
      else s.pos.kind = attn::PosKind::None;
      if (window[i]) {
        s.mask.kind = attn::MaskKind::Window;
        s.mask.window = window[i];
      }
      m.kinds.push_back({name, s});
    }
    std::sort(m.kinds.begin(), m.kinds.end(), [](const nn::LayerKind& a, const nn::LayerKind& b) { return a.name > b.name; });
    int64_t period = n;
    for (int64_t p = 1; p < n; ++p) {
      bool ok = true;
      for (int64_t i = p; i < n && ok; ++i) ok = names[i] == names[i % p];
      if (ok) {
        period = p;
        break;
      }
    }
    m.overrides.clear();
    if (period < n || n == 1) {
      m.pattern.assign(names.begin(), names.begin() + period);
    } else {  // no repetition: the most common kind, the others as overrides
      std::map<std::string, int64_t> count;
      for (const auto& s : names) ++count[s];
      std::string common = names[0];
      for (const auto& [s, k] : count)
        if (k > count[common]) common = s;
      m.pattern = {common};
      for (int64_t i = 0; i < n; ++i)
        if (names[i] != common) m.overrides[i] = names[i];
    }

  }

  c.finish(A->name);
  try {
    m.validate();
  } catch (const ValueError& e) {
    throw HfError(where + ": the imported model is not valid: " + e.what());
  }
  if (report) *report = r;
  return m;
}
}  // namespace

nn::ModelConfig import_config(const std::string& text, const std::string& where, ImportReport* report) {
  try {
    return import_config_impl(text, where, report);
  } catch (const nlohmann::json::exception& e) {  // a value of the wrong JSON type somewhere not checked by name
    throw HfError(where + ": a value has the wrong type or range (" + e.what() + ")");
  }
}

nn::ModelConfig import_config_dir(const std::string& dir, ImportReport* report) {
  const std::string path = dir + "/config.json";
  std::string text;
  if (const std::string why = read_file_capped(path, kMaxConfigBytes, text); !why.empty())
    throw HfError(path + ": " + why + (why.rfind("cannot open", 0) == 0 ? " (is '" + dir + "' a Hugging Face model directory?)" : ""));
  nn::ModelConfig c = import_config(text, path, report);
  if (report) report->tokenizer = tokenizer_file(dir);
  return c;
}

// ---- export ---------------------------------------------------------------------------------------
json common_config(const Architecture& A, const nn::ModelConfig& c, const SpecialTokens& tok, io::StoreAs store) {
  json j = json::object();
  j["architectures"] = {A.name};
  j["model_type"] = A.model_type;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.d_model;
  j["intermediate_size"] = c.hidden();
  j["num_hidden_layers"] = c.n_layers;
  j["num_attention_heads"] = c.n_heads;
  j["num_key_value_heads"] = c.kv_heads();
  j["head_dim"] = c.hdim();
  j["rms_norm_eps"] = c.norm_eps;
  j["tie_word_embeddings"] = c.tie_embeddings;
  j["initializer_range"] = c.init_std;
  j["use_cache"] = true;
  j["bos_token_id"] = tok.bos >= 0 ? json(tok.bos) : json(nullptr);
  j["eos_token_id"] = tok.eos >= 0 ? json(tok.eos) : json(nullptr);
  j["pad_token_id"] = tok.pad >= 0 ? json(tok.pad) : json(nullptr);
  j["dtype"] = store == io::StoreAs::BF16 ? "bfloat16" : store == io::StoreAs::F16 ? "float16" : "float32";
  return j;
}

namespace {

std::string leaf(const std::string& path) { return path.substr(path.rfind('.') + 1); }

// A layer's refusals, from the field table (attention/spec_fields.h): each field the table marks refused,
// at a value no stock architecture expresses, as "<what> (<field> = <value>): <why>" from the table's
// words "<what>: <why>".
struct StockRefusals {
  const attn::AttentionSpec& s;
  const std::string& at;  // "layer L (kind 'K'): "
  std::vector<std::string>& why;
  void refuse(const std::string& path, const std::string& value, const std::string& words) {
    const size_t colon = words.find(": ");
    why.push_back(at + words.substr(0, colon) + " (" + leaf(path) + " = " + value + ")" +
                  (colon == std::string::npos ? "" : words.substr(colon)));
  }
  template <class T>
  static std::string value(const T& v) {
    if constexpr (std::is_same_v<T, std::vector<int64_t>> || std::is_same_v<T, std::vector<double>>)
      return "a list of " + std::to_string(v.size());
    else return json(v).dump();
  }
  template <class T>
  void operator()(const std::string& path, T& v, const attn::SpecField& f, const T& dflt) {
    if (f.stock == attn::Stock::Refused && v != dflt && (!f.when || f.when(s))) refuse(path, value(v), f.refusal);
  }
  template <class E, class P, class N>
  void enumeration(const std::string& path, E& v, const attn::SpecField& f, P, N name, const E&) {
    const char* words = f.value_refusals ? f.value_refusals[static_cast<int>(v)] : nullptr;
    if (f.stock == attn::Stock::Refused && words && (!f.when || f.when(s))) refuse(path, name(v), words);
  }
};

// Stock architectures have one RoPE setting per model: the fields the export writes as rope_theta and
// rope_parameters agree on every RoPE layer.
bool same_rope(const attn::PositionSpec& a, const attn::PositionSpec& b) {
  return a.rope_base == b.rope_base && a.scaling == b.scaling && a.factor == b.factor &&
         a.original_context == b.original_context && a.yarn_alpha == b.yarn_alpha && a.yarn_beta == b.yarn_beta &&
         a.yarn_ramp == b.yarn_ramp && a.yarn_truncate == b.yarn_truncate && a.yarn_mscale == b.yarn_mscale &&
         a.llama3_low_freq_factor == b.llama3_low_freq_factor && a.llama3_high_freq_factor == b.llama3_high_freq_factor;
}

// The layers as a stock config describes them (which rotate, which slide), the one RoPE setting and the
// one window it has, with every reason a layer cannot be described so.
struct StockLayers {
  LayerLayout layers;
  const attn::PositionSpec* rope = nullptr;  // the first RoPE layer's (into the caller's specs)
  int64_t window = 0;                        // the one sliding window (0: none)
};

StockLayers stock_layers(const nn::ModelConfig& c, const std::vector<attn::AttentionSpec>& specs,
                         std::vector<std::string>& why) {
  const std::vector<std::string> kind_names = c.layer_kind_names();
  const int64_t n = c.n_layers;
  StockLayers out{{std::vector<bool>(n), std::vector<int64_t>(n)}};
  bool pos_mismatch = false, window_mismatch = false;
  for (int64_t l = 0; l < n; ++l) {
    const attn::AttentionSpec& s = specs[l];
    const std::string at = "layer " + std::to_string(l) + " (kind '" + kind_names[l] + "'): ";
    attn::AttentionSpec fields = s;  // the table visits a mutable spec
    StockRefusals r{fields, at, why};
    attn::visit_spec_fields_with_defaults("layer_kinds." + kind_names[l], fields, r);
    // what the stock config does express: NoPE or RoPE layers, causal or sliding ones
    out.layers.use_rope[l] = s.pos.kind == attn::PosKind::Rope;
    if (s.pos.kind == attn::PosKind::Rope) {
      if (!out.rope) out.rope = &s.pos;
      else if (!same_rope(s.pos, *out.rope)) pos_mismatch = true;
    }
    out.layers.window[l] = s.mask.kind == attn::MaskKind::Window ? s.mask.window : 0;
    if (s.mask.kind == attn::MaskKind::Window) {
      if (out.window && out.window != s.mask.window) window_mismatch = true;
      out.window = out.window ? out.window : s.mask.window;
    }
  }
  if (pos_mismatch)
    why.push_back("the RoPE layers use different RoPE settings (base or scaling); these architectures have one "
                  "rope_theta / scaling per model");
  if (window_mismatch) why.push_back("the windowed layers use different windows; these architectures have one sliding_window");
  return out;
}

// rope_parameters (transformers 5) with rope_theta, and the max_position_embeddings they imply.
struct RopeParams {
  json rp = json::object();
  double theta = 10000.0;
  int64_t max_pos = 0;
};

RopeParams rope_parameters(const nn::ModelConfig& c, const attn::PositionSpec* rope, ExportReport& rep,
                           std::vector<std::string>& why) {
  RopeParams r;
  r.max_pos = c.train_len;
  if (!rope) {
    r.rp = {{"rope_type", "default"}, {"rope_theta", r.theta}};
    return r;
  }
  const attn::PositionSpec& p = *rope;
  json& rp = r.rp;
  r.theta = p.rope_base;
  const int64_t D = c.hdim();
  const int64_t orig = p.original_context > 0 ? p.original_context : c.train_len;
  auto extended = [&] { return std::max<int64_t>(c.train_len, static_cast<int64_t>(std::llround(orig * p.factor))); };
  switch (p.scaling) {
    case attn::RopeScaling::None: rp["rope_type"] = "default"; break;
    case attn::RopeScaling::PI:
      rp = {{"rope_type", "linear"}, {"factor", p.factor}};
      if (p.factor <= 1.0) rp = {{"rope_type", "default"}};
      break;
    case attn::RopeScaling::NTK:
      rp["rope_type"] = "default";
      if (p.factor > 1.0) {
        r.theta = p.rope_base * std::pow(p.factor, static_cast<double>(D) / (D - 2));
        rep.notes.push_back(fmt::format("static NTK x{:g} folded into rope_theta = {:.17g} (base {:g} * s^(d/(d-2)))",
                                        p.factor, r.theta, p.rope_base));
      }
      break;
    case attn::RopeScaling::DynamicNTK:
      rp = {{"rope_type", "dynamic"}, {"factor", p.factor}};
      r.max_pos = orig;
      rep.notes.push_back("dynamic NTK: max_position_embeddings = " + std::to_string(orig) +
                          " is the context C it scales beyond");
      break;
    case attn::RopeScaling::YaRN:
      if (p.yarn_ramp != attn::YarnRamp::Index) {
        why.push_back("YaRN with the rotations ramp (the paper's, docs/methods.md: linear in rotations r_m): transformers implements "
                      "only the index ramp (linear in the pair index); use yarn_ramp: index, or export without scaling");
      } else if (p.factor > 1.0) {
        rp = {{"rope_type", "yarn"},
              {"factor", p.factor},
              {"original_max_position_embeddings", orig},
              {"beta_fast", p.yarn_beta},
              {"beta_slow", p.yarn_alpha},
              {"truncate", p.yarn_truncate}};
        if (p.yarn_mscale > 0) rp["attention_factor"] = p.yarn_mscale;
        r.max_pos = extended();
      } else {
        rp["rope_type"] = "default";
      }
      break;
    case attn::RopeScaling::Llama3:
      rp = {{"rope_type", "llama3"},
            {"factor", p.factor},
            {"low_freq_factor", p.llama3_low_freq_factor},
            {"high_freq_factor", p.llama3_high_freq_factor},
            {"original_max_position_embeddings", orig}};
      if (p.factor <= 1.0) rp = {{"rope_type", "default"}};
      r.max_pos = extended();
      break;
    case attn::RopeScaling::LongRoPE:
      rp = {{"rope_type", "longrope"},
            {"long_factor", p.longrope_long_factors},
            {"short_factor", p.longrope_short_factors.empty() ? std::vector<double>(D / 2, 1.0) : p.longrope_short_factors},
            {"factor", p.factor},
            {"original_max_position_embeddings", orig}};
      if (p.yarn_mscale > 0) rp["attention_factor"] = p.yarn_mscale;
      r.max_pos = extended();
      break;
    default: break;
  }
  rp["rope_theta"] = r.theta;
  return r;
}

// The stock config.json: the architecture that expresses the layers, the shared fields, RoPE in both
// layouts and the architecture's own fields.
std::string stock_config(const nn::ModelConfig& c, const SpecialTokens& tok, io::StoreAs store, const StockLayers& L,
                         const RopeParams& r, ExportReport& rep) {
  const int64_t n = c.n_layers;
  bool any_nope = false, any_window = false, all_window = true;
  for (int64_t l = 0; l < n; ++l) {
    any_nope |= !L.layers.use_rope[l];
    any_window |= L.layers.window[l] > 0;
    all_window &= L.layers.window[l] > 0;
  }
  // the architecture that expresses the model: per-layer NoPE needs SmolLM3, q/k/v biases Qwen2,
  // then Llama (no window), Mistral (a window on every layer) or SmolLM3 (windows on some layers)
  const Architecture* A = any_nope ? &kSmolLM3
                          : c.qkv_bias ? &kQwen2
                          : !any_window ? &kLlama
                          : all_window ? &kMistral
                                       : &kSmolLM3;
  rep.architecture = A->name;
  json j = common_config(*A, c, tok, store);
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = r.max_pos;
  j["attention_dropout"] = 0.0;
  // both layouts: transformers 5 reads rope_parameters, transformers 4 rope_theta / rope_scaling
  j["rope_parameters"] = r.rp;
  j["rope_theta"] = r.theta;
  if (r.rp["rope_type"] == "default") {
    j["rope_scaling"] = nullptr;
  } else {
    json legacy = r.rp;
    legacy.erase("rope_theta");
    legacy["type"] = r.rp["rope_type"];
    j["rope_scaling"] = legacy;
  }
  std::vector<std::string> lt;
  for (int64_t l = 0; l < n; ++l) lt.push_back(L.layers.window[l] ? "sliding_attention" : "full_attention");
  A->export_fields(ExportLayout{c, L.layers, lt, L.window, any_window}, j, rep);
  for (auto it = j.begin(); it != j.end(); ++it) rep.config.push_back({it.key(), show(it.value()), ""});
  return j.dump(2) + "\n";
}

}  // namespace

std::string export_config(const nn::ModelConfig& c, const SpecialTokens& tok, io::StoreAs store, ExportReport* report) {
  ExportReport rep;
  std::vector<std::string> why;
  if (c.mlp != nn::MlpKind::SwiGLU)
    why.push_back(std::string("MLP ") + nn::mlp_name(c.mlp) +
                  ": the Llama family's MLP is SwiGLU (down(silu(gate x) * up x)); no standard architecture there "
                  "computes " + nn::mlp_name(c.mlp));
  const std::vector<attn::AttentionSpec> specs = c.layer_specs();
  const StockLayers layers = stock_layers(c, specs, why);
  const RopeParams rope = rope_parameters(c, layers.rope, rep, why);
  if (!why.empty()) {
    std::string msg = "no standard Hugging Face architecture expresses this model:";
    for (const auto& w : why) msg += "\n  - " + w;
    throw HfError(msg);
  }
  std::string text = stock_config(c, tok, store, layers, rope, rep);
  if (report) *report = rep;
  return text;
}

}  // namespace hz::hf
