// Hugging Face import / export. The fixtures (scripts/fixtures/make_hf_fixtures.py) are tiny random models
// saved by transformers with the log-probabilities transformers computes from the saved directory
// (fp32, eager attention). Horizon must reproduce them per token to 1e-5, reproduce transformers'
// RoPE frequencies for every scaling, round-trip the weights bit for bit, and refuse what it
// cannot compute the same, by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "attention/rope.h"
#include "data/tokenizer.h"
#include "eval/score.h"
#include "io/safetensors.h"
#include "hf/hf.h"
#include "study/hf_models.h"
#include "tests/data/data_test_util.h"
#include "train/recipe.h"

namespace fs = std::filesystem;
using hz::Tensor;
using namespace hz::train;
namespace hf = hz::hf;
using json = nlohmann::json;

namespace {

const std::string kHF = std::string(HZ_SOURCE_DIR) + "/tests/fixtures/hf/";

json read_json(const std::string& p) {
  std::ifstream in(p);
  return json::parse(in);
}

using hzdt::TempDir;  // a fresh directory under /tmp, removed afterwards

bool has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// Max |Horizon log p - transformers log p| over the fixture's tokens: in f32 against transformers
// fp32, or in f64 against transformers computed in float64 throughout.
double parity(const std::string& name, hz::DType dt = hz::DType::F32) {
  const hf::Imported im = hf::import_dir(kHF + name, dt);
  hz::nn::ModelConfig c = im.cfg;
  c.dtype = dt;
  hz::nn::Transformer m(c, 0);
  m.load_state_dict(im.weights, /*strict=*/true);
  const json ex = read_json(kHF + name + "/expected_logprobs.json");
  const auto ids = ex["ids"].get<std::vector<int64_t>>();
  const auto want = ex[dt == hz::DType::F64 ? "logprobs_f64" : "logprobs"].get<std::vector<double>>();
  const std::vector<double> nll = hz::eval::token_nll(m, ids);
  EXPECT_EQ(nll.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(-nll[i] - want[i]));
  return worst;
}

// config.json of a fixture with edits applied, as text.
std::string edited_config(const std::string& name, const std::function<void(json&)>& f) {
  json j = read_json(kHF + name + "/config.json");
  f(j);
  return j.dump();
}

std::string import_error(const std::string& text) {
  try {
    hf::import_config(text, "config.json");
  } catch (const hf::HfError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(HfImport, LogProbsMatchTransformersPerArchitecture) {
  for (const char* name : {"llama", "llama_bpe", "mistral", "qwen2", "smollm3", "rope_linear", "rope_dynamic", "rope_yarn",
                           "rope_yarn_exact", "rope_llama3", "rope_longrope"}) {
    const double d = parity(name), d64 = parity(name, hz::DType::F64);
    std::printf("  parity %-16s max |log p diff|: f32 %.3g   f64 %.3g\n", name, d, d64);
    EXPECT_LE(d, 1e-5) << name;
    EXPECT_LE(d64, 1e-10) << name;  // the same math: only float64 rounding is left
  }
}

// A directory with a real tokenizer: the recipe takes its tokenizer.json, which encodes the
// fixture's text to the ids the `tokenizers` library gave (those transformers scored).
TEST(HfImport, TakesTheDirectorysTokenizer) {
  const std::string dir = kHF + "llama_bpe";
  const Recipe r = hz::study::hf_recipe(dir, {});
  EXPECT_EQ(fs::path(r.data.tokenizer).filename(), "tokenizer.json");
  const auto tok = hz::data::make_tokenizer(r.data.tokenizer);
  EXPECT_EQ(tok->vocab_size(), r.model.cfg.vocab_size);
  const json ex = read_json(dir + "/expected_logprobs.json");
  const std::string text = ex["text"].get<std::string>();
  std::vector<int64_t> got;
  for (int32_t t : tok->encode(text)) got.push_back(t);
  EXPECT_EQ(got, ex["ids"].get<std::vector<int64_t>>());
  EXPECT_EQ(tok->decode(tok->encode(text)), text);
}

TEST(HfImport, MapsEveryArchitecture) {
  hf::ImportReport rep;
  const auto llama = hf::import_config_dir(kHF + "llama", &rep);
  EXPECT_EQ(rep.architecture, "LlamaForCausalLM");
  EXPECT_EQ(llama.vocab_size, 259);
  EXPECT_EQ(llama.n_kv_heads, 2);
  EXPECT_TRUE(llama.tie_embeddings);
  EXPECT_EQ(llama.norm_eps, 1e-5);
  EXPECT_EQ(llama.pattern, (std::vector<std::string>{"rope"}));
  EXPECT_EQ(llama.kind("rope").attn.pos.rope_base, 10000.0);
  EXPECT_TRUE(has(rep.str(), "num_key_value_heads")) << rep.str();

  const auto mistral = hf::import_config_dir(kHF + "mistral");
  EXPECT_EQ(mistral.hdim(), 16);  // head_dim != hidden_size / heads
  EXPECT_EQ(mistral.pattern, (std::vector<std::string>{"rope_swa"}));
  EXPECT_EQ(mistral.kind("rope_swa").attn.mask.window, 6);
  EXPECT_FALSE(mistral.tie_embeddings);

  const auto qwen = hf::import_config_dir(kHF + "qwen2");
  EXPECT_TRUE(qwen.qkv_bias);
  EXPECT_EQ(qwen.layer_kind_names(), (std::vector<std::string>{"rope", "rope_swa", "rope_swa"}));
  EXPECT_EQ(qwen.kind("rope_swa").attn.mask.window, 5);

  const auto smol = hf::import_config_dir(kHF + "smollm3");
  EXPECT_EQ(smol.layer_kind_names(), (std::vector<std::string>{"rope", "rope", "rope", "nope"}));
  EXPECT_EQ(smol.kind("nope").attn.pos.kind, hz::attn::PosKind::None);

  const auto yarn = hf::import_config_dir(kHF + "rope_yarn");
  const auto& p = yarn.kind("rope").attn.pos;
  EXPECT_EQ(p.scaling, hz::attn::RopeScaling::YaRN);
  EXPECT_EQ(p.yarn_ramp, hz::attn::YarnRamp::Index);
  EXPECT_EQ(p.factor, 4.0);
  EXPECT_EQ(p.original_context, 256);
  const auto lin = hf::import_config_dir(kHF + "rope_linear");  // the transformers-4 layout
  EXPECT_EQ(lin.kind("rope").attn.pos.scaling, hz::attn::RopeScaling::PI);
  EXPECT_EQ(lin.kind("rope").attn.pos.factor, 2.0);
}

// Horizon's frequency tables equal transformers' inv_freq (computed in float32) for every scaling.
TEST(HfImport, RopeFrequenciesMatchTransformers) {
  for (const char* name : {"rope_linear", "rope_dynamic", "rope_yarn", "rope_yarn_exact", "rope_llama3", "rope_longrope"}) {
    const auto c = hf::import_config_dir(kHF + name);
    const json ex = read_json(kHF + name + "/expected_logprobs.json");
    const auto hf_inv = ex["inv_freq"].get<std::vector<double>>();
    // transformers' dynamic table is the one for the longest sequence it saw (48 tokens)
    const auto f = hz::attn::rope_frequencies(c.kind("rope").attn.pos, c.hdim(), 48);
    ASSERT_EQ(f.inv_freq.size(), hf_inv.size()) << name;
    for (size_t m = 0; m < hf_inv.size(); ++m)
      EXPECT_NEAR(f.inv_freq[m], hf_inv[m], 4e-7 * hf_inv[m]) << name << " pair " << m;  // f32 rounding
    EXPECT_NEAR(f.mscale, ex["attention_scaling"].get<double>(), 1e-12) << name;
  }
  // the two YaRN ramps differ between their ends: the paper's (rotations) is not transformers'
  auto c = hf::import_config_dir(kHF + "rope_yarn");
  auto pos = c.kind("rope").attn.pos;
  const auto index = hz::attn::rope_frequencies(pos, c.hdim(), 48);
  pos.yarn_ramp = hz::attn::YarnRamp::Rotations;
  const auto rot = hz::attn::rope_frequencies(pos, c.hdim(), 48);
  double diff = 0;
  for (size_t m = 0; m < index.inv_freq.size(); ++m) diff = std::max(diff, std::abs(index.inv_freq[m] - rot.inv_freq[m]));
  EXPECT_GT(diff, 1e-3);
}

TEST(HfImport, RefusesWhatItCannotComputeTheSame) {
  using F = std::function<void(json&)>;
  const std::vector<std::pair<F, std::string>> cases{
      {[](json& j) { j["architectures"] = {"GPT2LMHeadModel"}; }, "architecture 'GPT2LMHeadModel' is not supported"},
      {[](json& j) { j["frobnicate"] = 3; }, "'frobnicate' = 3 not understood"},
      {[](json& j) { j["partial_rotary_factor"] = 0.5; }, "partial_rotary_factor = 0.5"},
      {[](json& j) { j["hidden_act"] = "gelu"; }, "hidden_act = 'gelu'"},
      {[](json& j) { j["mlp_bias"] = true; }, "mlp_bias = true"},
      {[](json& j) { j["rope_parameters"]["rope_type"] = "mrope"; }, "'mrope' is not supported"},
      {[](json& j) { j["rope_parameters"]["rope_type"] = "longrope"; }, "rope_parameters.long_factor must be a list"},
      {[](json& j) {
         j["rope_parameters"] = {{"rope_type", "longrope"}, {"long_factor", {1, -2}}, {"short_factor", {1, 1}},
                                 {"original_max_position_embeddings", 16}};
       },
       "every factor must be a positive finite number"},
      {[](json& j) { j["rope_parameters"]["wobble"] = 1; }, "rope_parameters.wobble"},
      {[](json& j) { j["quantization_config"] = {{"quant_method", "gptq"}}; }, "quantized checkpoint"},
      {[](json& j) { j["auto_map"] = {{"AutoModel", "x.Y"}}; }, "custom modeling code"},
      {[](json& j) { j["model_type"] = "mistral"; }, "model_type is 'mistral' but architectures names LlamaForCausalLM"},
      {[](json& j) { j["num_attention_heads"] = 3; }, "must be divisible by n_kv_heads"},
      {[](json& j) { j.erase("hidden_size"); }, "hidden_size is missing"},
      {[](json& j) { j["vocab_size"] = "many"; }, "vocab_size must be an integer"},
  };
  for (const auto& [edit, want] : cases) {
    const std::string e = import_error(edited_config("llama", edit));
    EXPECT_TRUE(has(e, want)) << "want '" << want << "', got: " << e;
  }
  EXPECT_TRUE(has(import_error(edited_config("qwen2", [](json& j) { j["use_sliding_window"] = false; })),
                  "marks layer 1 sliding_attention but use_sliding_window is false"));
  EXPECT_TRUE(has(import_error("{not json"), "not valid JSON"));
  EXPECT_TRUE(has(import_error(edited_config("llama", [](json& j) { j["rope_interleaved"] = true; })), "interleaved RoPE pairs"));
  // fields of real configs that transformers ignores: SmolLM2 (nanotron) and SmolLM3-3B
  EXPECT_EQ(import_error(edited_config("llama", [](json& j) {
              j["rope_interleaved"] = false;
              j["is_llama_config"] = true;
            })),
            "(no error)");
  EXPECT_EQ(import_error(edited_config("smollm3", [](json& j) { j["max_window_layers"] = 28; })), "(no error)");
  EXPECT_TRUE(has(import_error(edited_config("llama", [](json& j) { j["max_window_layers"] = 28; })), "not understood"));
  // inert fields are accepted and reported as such
  hf::ImportReport rep;
  hf::import_config(edited_config("llama", [](json& j) { j["temperature"] = 0.7; }), "config.json", &rep);
  bool noted = false;
  for (const auto& f : rep.ignored) noted |= f.field == "temperature";
  EXPECT_TRUE(noted);
}

TEST(HfImport, RefusesWeightsThatDoNotMatchTheConfig) {
  TempDir d;
  auto copy = [&](const std::string& name, const std::string& as = "") {
    const std::string dst = d.file(as.empty() ? name : as);
    fs::copy(kHF + name, dst, fs::copy_options::recursive);
    return dst;
  };
  auto error = [](const std::string& dir) -> std::string {
    try {
      hf::import_dir(dir);
    } catch (const hz::Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  const std::string dir = copy("llama");
  const hz::io::SafetensorsFile f = hz::io::SafetensorsFile::open(dir + "/model.safetensors");
  std::map<std::string, Tensor> all;
  for (const auto& e : f.entries()) all[e.name] = f.load(e.name);

  auto write = [&](std::map<std::string, Tensor> t) {
    fs::remove(dir + "/model.safetensors");
    hz::io::save_safetensors(dir + "/model.safetensors", t, {{"format", "pt"}});
  };
  auto t = all;
  t.erase("model.layers.1.mlp.up_proj.weight");
  write(t);
  EXPECT_TRUE(has(error(dir), "tensor 'model.layers.1.mlp.up_proj.weight' (Horizon's layers.1.mlp.w3.weight) is missing")) << error(dir);
  t = all;
  t["model.layers.0.self_attn.rotary_emb.inv_freq"] = Tensor::ones({4});  // old checkpoints: skipped
  t["lm_head.weight"] = all.at("model.embed_tokens.weight");              // tied and equal: skipped
  write(t);
  EXPECT_EQ(error(dir), "(no error)");
  t["lm_head.weight"] = Tensor::zeros(all.at("model.embed_tokens.weight").shape());
  write(t);
  EXPECT_TRUE(has(error(dir), "lm_head.weight differs from model.embed_tokens.weight")) << error(dir);
  t = all;
  t["model.layers.0.self_attn.q_proj.lora_A.weight"] = Tensor::ones({2, 2});
  write(t);
  EXPECT_TRUE(has(error(dir), "have no place in the model")) << error(dir);
  // issue 36: integer weights were cast (eval loss 127 instead of 5.5); +inf in q_proj scored finite
  t = all;
  t["model.layers.0.self_attn.q_proj.weight"] = all.at("model.layers.0.self_attn.q_proj.weight").to(hz::DType::I32);
  write(t);
  EXPECT_TRUE(has(error(dir), "tensor 'model.layers.0.self_attn.q_proj.weight' holds I32 values")) << error(dir);
  for (const double bad : {INFINITY, -INFINITY, NAN}) {
    t = all;
    Tensor q = all.at("model.layers.1.self_attn.q_proj.weight").clone();
    q.set({3, 5}, bad);
    t["model.layers.1.self_attn.q_proj.weight"] = q;
    write(t);
    EXPECT_TRUE(has(error(dir), "tensor 'model.layers.1.self_attn.q_proj.weight' element 101 of (32, 32) is")) << error(dir);
  }
  write(all);
  json cfg = read_json(dir + "/config.json");
  cfg["intermediate_size"] = 40;
  std::ofstream(dir + "/config.json", std::ios::trunc) << cfg.dump();
  EXPECT_TRUE(has(error(dir), "has shape (32, 32) but the model")) << error(dir);
  // attention_bias = true (Llama): q/k/v biases load, o_proj biases must be zero
  const std::string biased = copy("llama", "llama_bias");
  json cb = read_json(biased + "/config.json");
  cb["attention_bias"] = true;
  std::ofstream(biased + "/config.json", std::ios::trunc) << cb.dump();
  t = all;
  for (const char* l : {"0", "1"}) {
    const std::string p = std::string("model.layers.") + l + ".self_attn.";
    t[p + "q_proj.bias"] = Tensor::full({32}, 0.1);
    t[p + "k_proj.bias"] = Tensor::full({16}, 0.2);
    t[p + "v_proj.bias"] = Tensor::full({16}, 0.3);
    t[p + "o_proj.bias"] = Tensor::zeros({32});
  }
  fs::remove(biased + "/model.safetensors");
  hz::io::save_safetensors(biased + "/model.safetensors", t, {{"format", "pt"}});
  EXPECT_EQ(error(biased), "(no error)");
  EXPECT_TRUE(hf::import_dir(biased).cfg.qkv_bias);
  t["model.layers.1.self_attn.o_proj.bias"] = Tensor::full({32}, 0.5);
  fs::remove(biased + "/model.safetensors");
  hz::io::save_safetensors(biased + "/model.safetensors", t, {{"format", "pt"}});
  EXPECT_TRUE(has(error(biased), "model.layers.1.self_attn.o_proj.bias is not zero")) << error(biased);
  // a truncated shard is caught by the safetensors reader
  const std::string smol = copy("smollm3");
  fs::resize_file(smol + "/model-00002-of-00004.safetensors", fs::file_size(smol + "/model-00002-of-00004.safetensors") - 3);
  EXPECT_TRUE(has(error(smol), "the file is truncated")) << error(smol);
}

// Import -> export -> import: the architecture, the config and every weight come back bit for bit,
// and the stored bytes equal the original files' when exported in their dtype.
TEST(HfExport, RoundTripIsBitIdentical) {
  TempDir d;
  const std::vector<std::tuple<std::string, std::string, hz::io::StoreAs>> cases{
      {"llama", "LlamaForCausalLM", hz::io::StoreAs::F32},
      {"mistral", "MistralForCausalLM", hz::io::StoreAs::BF16},
      {"qwen2", "Qwen2ForCausalLM", hz::io::StoreAs::F16},
      {"smollm3", "SmolLM3ForCausalLM", hz::io::StoreAs::BF16},
      {"rope_yarn_exact", "LlamaForCausalLM", hz::io::StoreAs::BF16},
      {"rope_llama3", "LlamaForCausalLM", hz::io::StoreAs::BF16},
      {"rope_dynamic", "LlamaForCausalLM", hz::io::StoreAs::BF16},
      {"rope_longrope", "LlamaForCausalLM", hz::io::StoreAs::BF16},
  };
  for (const auto& [name, arch, store] : cases) {
    const hf::Imported a = hf::import_dir(kHF + name);
    hf::ExportOptions opt;
    opt.store = store;
    opt.max_shard_bytes = name == "smollm3" ? 20000 : opt.max_shard_bytes;
    const std::string out = d.file(name);
    const hf::ExportReport rep = hf::export_dir(a.cfg, a.weights, name == "llama" ? "byte" : "", out, opt);
    EXPECT_EQ(rep.architecture, arch) << name;
    const hf::Imported b = hf::import_dir(out);
    EXPECT_EQ(b.report.architecture, arch) << name;
    Recipe ra, rb;
    ra.model.cfg = a.cfg;
    rb.model.cfg = b.cfg;
    EXPECT_EQ(to_yaml(ra), to_yaml(rb)) << name;  // every model field
    ASSERT_EQ(a.weights.size(), b.weights.size()) << name;
    for (const auto& [k, t] : a.weights) {
      const Tensor& u = b.weights.at(k);
      ASSERT_EQ(t.shape(), u.shape()) << name << " " << k;
      EXPECT_EQ(std::memcmp(t.raw_data(), u.raw_data(), t.numel() * 4), 0) << name << " " << k;
    }
    // stored bytes equal the transformers-written originals, tensor by tensor
    const auto orig = hz::io::SafetensorsSet::open_dir(kHF + name), mine = hz::io::SafetensorsSet::open_dir(out);
    EXPECT_EQ(orig.names(), mine.names()) << name;
    for (const auto& n : orig.names()) {
      const auto& e = orig.entry(n);
      ASSERT_EQ(mine.entry(n).dtype, e.dtype) << name << " " << n;
      EXPECT_EQ(std::memcmp(orig.bytes(n), mine.bytes(n), e.end - e.begin), 0) << name << " " << n;
    }
  }
  EXPECT_EQ(hf::tokenizer_spec(d.file("llama")), "byte");  // the byte tokenizer written is recognised
}

TEST(HfExport, RefusesWhatNoStandardArchitectureExpresses) {
  auto refusal = [](const std::function<void(hz::nn::ModelConfig&)>& f) -> std::string {
    hz::nn::ModelConfig c;
    c.kinds = {{"rope", {}}};
    c.pattern = {"rope"};
    f(c);
    try {
      hf::export_config(c, {}, hz::io::StoreAs::F32);
    } catch (const hf::HfError& e) {
      return e.what();
    }
    return "(no error)";
  };
  using C = hz::nn::ModelConfig;
  EXPECT_TRUE(has(refusal([](C& c) { c.kinds[0].attn.mask.kind = hz::attn::MaskKind::Scope; }), "SCOPE per-head scopes"));
  EXPECT_TRUE(has(refusal([](C& c) { c.kinds[0].attn.logit.kind = hz::attn::LogitKind::ScaleInvariant; }), "scale_invariant logits"));
  EXPECT_TRUE(has(refusal([](C& c) { c.kinds[0].attn.qk_norm = hz::attn::QKNorm::Full; }), "whole-projection QK-norm"));
  EXPECT_TRUE(has(refusal([](C& c) { c.kinds[0].attn.gate = hz::attn::OutputGate::Head; }), "gated attention output"));
  EXPECT_TRUE(has(refusal([](C& c) { c.kinds[0].attn.sink = true; }), "attention sinks"));
  EXPECT_TRUE(has(refusal([](C& c) { c.kinds[0].attn.forget = true; }), "FoX forget gates"));
  EXPECT_TRUE(has(refusal([](C& c) { c.kinds[0].attn.logit.qtemp_alpha = 0.1; }), "Llama 4's position temperature"));
  EXPECT_TRUE(has(refusal([](C& c) { c.kinds[0].attn.mask.chunk = 8; }), "chunked attention"));
  EXPECT_TRUE(has(refusal([](C& c) { c.kinds[0].attn.diff = true; }), "DIFF Transformer V2"));
  EXPECT_TRUE(has(refusal([](C& c) { c.kinds[0].attn.mask.prefix = 8; }), "prefix-LM"));
  EXPECT_TRUE(has(refusal([](C& c) {
                    c.kinds[0].attn.mask.kind = hz::attn::MaskKind::Window;
                    c.kinds[0].attn.mask.window = 8;
                    c.kinds[0].attn.mask.sink_tokens = 4;
                  }),
                  "sink tokens"));
  EXPECT_TRUE(has(refusal([](C& c) { c.kinds[0].attn.pos.kind = hz::attn::PosKind::Alibi; }), "ALiBi"));
  EXPECT_TRUE(has(refusal([](C& c) { c.kinds[0].attn.pos.kind = hz::attn::PosKind::PRope; }), "p-RoPE"));
  EXPECT_TRUE(has(refusal([](C& c) { c.mlp = hz::nn::MlpKind::ReLU2; }), "MLP relu2"));
  EXPECT_TRUE(has(refusal([](C& c) { c.kinds[0].attn.pos.rope_freq_factors.assign(c.hdim() / 2, 0.5); }),
                  "per-pair RoPE frequency factors"));
  EXPECT_TRUE(has(refusal([](C& c) {
                    c.kinds[0].attn.pos.scaling = hz::attn::RopeScaling::YaRN;
                    c.kinds[0].attn.pos.factor = 4;
                  }),
                  "rotations ramp"));
  EXPECT_TRUE(has(refusal([](C& c) {
                    c.kinds.push_back({"fast", {}});
                    c.kinds[1].attn.pos.rope_base = 500;
                    c.pattern = {"rope", "fast"};
                  }),
                  "different RoPE settings"));
  // several reasons at once are all named
  const std::string both = refusal([](C& c) {
    c.mlp = hz::nn::MlpKind::GELU;
    c.kinds[0].attn.qk_norm = hz::attn::QKNorm::Full;
  });
  EXPECT_TRUE(has(both, "MLP gelu") && has(both, "QK-norm")) << both;
  // what each architecture expresses
  auto arch = [](const std::function<void(C&)>& f) {
    C c;
    c.n_layers = 4;
    c.train_len = 256;
    hz::attn::AttentionSpec rope, swa, nope;
    swa.mask.kind = hz::attn::MaskKind::Window;
    swa.mask.window = 64;
    nope.pos.kind = hz::attn::PosKind::None;
    c.kinds = {{"rope", rope}, {"swa", swa}, {"nope", nope}};
    c.pattern = {"rope"};
    f(c);
    hf::ExportReport r;
    hf::export_config(c, {}, hz::io::StoreAs::F32, &r);
    return r.architecture;
  };
  EXPECT_EQ(arch([](C&) {}), "LlamaForCausalLM");
  EXPECT_EQ(arch([](C& c) { c.pattern = {"swa"}; }), "MistralForCausalLM");
  EXPECT_EQ(arch([](C& c) { c.qkv_bias = true; }), "Qwen2ForCausalLM");
  EXPECT_EQ(arch([](C& c) { c.pattern = {"nope", "swa", "swa", "swa"}; }), "SmolLM3ForCausalLM");  // SWAN
  EXPECT_EQ(arch([](C& c) { c.pattern = {"rope", "swa"}; }), "SmolLM3ForCausalLM");
  EXPECT_EQ(arch([](C& c) { c.pattern = {"nope"}; }), "SmolLM3ForCausalLM");  // DroPE without QK-norm
}

TEST(HfImport, RecipeTakesTheModelFromInitFrom) {
  // the step above the parser (study/hf_models.h) reads the directory; train::parse_recipe reads nothing
  using hz::study::resolve_recipe;
  const std::string yaml = "checkpoint: {init_from: " + kHF + "qwen2}\ndata: {seq_len: 16}\n";
  const Recipe r = resolve_recipe(yaml, "r.yaml");
  EXPECT_TRUE(r.model.cfg.qkv_bias);
  EXPECT_EQ(r.model.cfg.n_layers, 3);
  EXPECT_EQ(r.model.cfg.vocab_size, 96);
  EXPECT_EQ(r.data.tokenizer, "");  // the directory has no tokenizer
  // fields the recipe gives win over config.json
  const Recipe o = resolve_recipe(yaml, "r.yaml", {"model.n_layers=1"});
  EXPECT_EQ(o.model.cfg.n_layers, 1);
  EXPECT_TRUE(o.model.cfg.qkv_bias);
  // the resolved recipe (a run's config.yaml) parses to the same model without reading config.json
  const Recipe again = resolve_recipe(to_yaml(r), "config.yaml", {"checkpoint.init_from=/nonexistent"});
  Recipe ma, mb;
  ma.model = r.model;
  mb.model = again.model;
  EXPECT_EQ(to_yaml(ma), to_yaml(mb));
  // the directory's tokenizer becomes data.tokenizer: the file's path (hz::data::make_tokenizer
  // reads it), or "byte" for the tokenizer.json Horizon writes for its byte tokenizer
  TempDir d;
  fs::copy_file(kHF + "llama/config.json", d.file("config.json"));
  std::ofstream(d.file("tokenizer.json")) << "{}";
  EXPECT_EQ(resolve_recipe("checkpoint: {init_from: " + d.path() + "}\n", "r.yaml").data.tokenizer, d.file("tokenizer.json"));
  std::ofstream(d.file("tokenizer.json"), std::ios::trunc) << hf::byte_tokenizer_json();
  EXPECT_EQ(resolve_recipe("checkpoint: {init_from: " + d.path() + "}\n", "r.yaml").data.tokenizer, "byte");
  EXPECT_EQ(resolve_recipe("checkpoint: {init_from: " + d.path() + "}\ndata: {tokenizer: x.model}\n", "r.yaml").data.tokenizer,
            "x.model");  // the recipe wins
  // a path that is no run leaves the recipe's model section alone
  const Recipe plain = resolve_recipe("checkpoint: {init_from: runs/x}\n", "r.yaml");
  EXPECT_EQ(plain.model.cfg.n_layers, hz::nn::ModelConfig().n_layers);
  EXPECT_EQ(plain.data.tokenizer, "byte");
  // a Horizon run (its directory, or a checkpoint in it) fills what the recipe leaves out from the
  // run's config.yaml: a fine-tuning recipe trains the run's model
  TempDir run;
  const Recipe trained = parse_recipe(
      "model:\n  n_layers: 3\n  d_model: 48\n  layer_kinds:\n    f: {pos: none, forget: true}\n  pattern: [f]\n"
      "data: {tokenizer: byte}\n",
      "trained.yaml");
  std::ofstream(run.file("config.yaml")) << to_yaml(trained);
  fs::create_directories(run.file("checkpoints"));
  std::ofstream(run.file("checkpoints/step_4.h5")) << "";
  for (const std::string& from : {run.path(), run.file("checkpoints/step_4.h5")}) {
    const Recipe ft = resolve_recipe("checkpoint: {init_from: " + from + "}\nmodel: {n_layers: 2}\n", "ft.yaml");
    EXPECT_EQ(ft.model.cfg.n_layers, 2) << from;  // the recipe wins
    EXPECT_EQ(ft.model.cfg.d_model, 48) << from;
    ASSERT_EQ(ft.model.cfg.layer_kind_names(), std::vector<std::string>({"f", "f"})) << from;
    EXPECT_TRUE(ft.model.cfg.kinds.at(0).attn.forget) << from;
  }
  // a run that dropped its positions (DroPE at step 2): a checkpoint after the drop holds the NoPE
  // model, one at the drop step still the RoPE one; the run directory starts from its latest
  const Recipe dropped = parse_recipe(
      "model:\n  n_layers: 2\n  layer_kinds:\n    r: {pos: rope}\n  pattern: [r]\ntrain: {steps: 4}\nschedule: {warmup_steps: 0}\n"
      "drope: {at_step: 2, qk_norm: true}\n", "dropped.yaml");
  std::ofstream(run.file("config.yaml"), std::ios::trunc) << to_yaml(dropped);
  std::ofstream(run.file("checkpoints/step_2.h5")) << "";
  auto pos_from = [&](const std::string& from) {
    return resolve_recipe("checkpoint: {init_from: " + from + "}\n", "ft.yaml").model.cfg.kinds.at(0).attn.pos.kind;
  };
  EXPECT_EQ(pos_from(run.file("checkpoints/step_4.h5")), hz::attn::PosKind::None);
  EXPECT_EQ(pos_from(run.file("checkpoints/step_2.h5")), hz::attn::PosKind::Rope);
  EXPECT_EQ(pos_from(run.path()), hz::attn::PosKind::None);  // its latest: step 4
  std::ofstream(run.file("config.yaml"), std::ios::trunc) << "model: {n_layers: nope}\n";
  try {
    resolve_recipe("checkpoint: {init_from: " + run.path() + "}\n", "ft.yaml");
    ADD_FAILURE() << "a run whose config.yaml does not load was accepted";
  } catch (const hz::train::RecipeError& e) {
    EXPECT_NE(std::string(e.what()).find("does not load"), std::string::npos) << e.what();
  }
  // the parser alone reads nothing: the same text gets the defaults, and says which directory a
  // step above must fill the model from
  const Recipe pure = parse_recipe(yaml, "r.yaml");
  EXPECT_FALSE(pure.model.cfg.qkv_bias);
  EXPECT_EQ(pure.model.cfg.n_layers, hz::nn::ModelConfig().n_layers);
  EXPECT_EQ(hz::train::model_fill_dir(yaml, "r.yaml"), kHF + "qwen2");
  EXPECT_EQ(hz::train::model_fill_dir(to_yaml(r), "config.yaml"), "");  // a complete model section needs none
}

TEST(HfImport, ShapesWithoutBuildingTheModel) {
  for (const char* name : {"llama", "mistral", "qwen2", "smollm3"}) {
    const auto c = hf::import_config_dir(kHF + name);
    const hz::nn::Transformer m(c, 0);
    std::map<std::string, hz::Shape> built;
    for (const auto& [k, v] : m.named_parameters()) built[k] = v->shape();
    EXPECT_EQ(hf::parameter_shapes(c), built) << name;
  }
}

// A model no stock architecture expresses, with every ingredient: several layer kinds (a repeating
// pattern and an override), GQA, q/k/v biases, an untied head, a relu2 MLP.
hz::nn::ModelConfig every_ingredient() {
  using namespace hz::attn;
  hz::nn::ModelConfig c;
  c.vocab_size = 259;  // the byte tokenizer's
  c.d_model = 32;
  c.n_layers = 5;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 8;  // explicit, as import writes them
  c.mlp_hidden = 128;
  c.mlp = hz::nn::MlpKind::ReLU2;
  c.qkv_bias = true;
  c.tie_embeddings = false;
  c.train_len = 64;
  AttentionSpec a, b, cc, d, e;
  a.pos.scaling = RopeScaling::YaRN;  // the rotations ramp, which transformers' YaRN lacks
  a.pos.factor = 4;
  a.qk_norm = QKNorm::PerHead;
  a.gate = OutputGate::Head;
  a.sink = true;
  b.pos.kind = PosKind::Alibi;
  b.mask.kind = MaskKind::Scope;
  b.mask.scope_train_len = 64;
  b.logit.kind = LogitKind::LogN;
  b.logit.logn_c = 0.3;
  b.forget = true;
  b.forget_bias = 2;
  cc.pos.kind = PosKind::PRope;
  cc.pos.prope_base_eff = 300;
  cc.mask.kind = MaskKind::Window;
  cc.mask.window = 8;
  cc.mask.sink_tokens = 2;
  cc.logit.kind = LogitKind::ScaleInvariant;
  cc.gate = OutputGate::Element;
  cc.qk_norm = QKNorm::Full;
  d.pos.kind = PosKind::None;
  d.logit.kind = LogitKind::SwanRow;
  d.logit.swan_a = 100;
  d.logit.qtemp_alpha = 0.1;
  d.logit.qtemp_beta = 16;
  d.mask.prefix = 5;
  e.pos.rope_fraction = 0.5;
  e.pos.rope_select = RopeSelect::Uniform;
  e.pos.rope_freq_factors = {1, 0.75, 0.5, 0.25};
  e.logit.kind = LogitKind::Temperature;
  e.logit.temp_c = 0.4;
  e.diff = true;  // DIFF V2: 2H query heads, a lambda projection
  cc.additive = AdditiveKind::Alibi;     // ALiBi beside p-RoPE
  d.additive = AdditiveKind::QueryKey;   // GRAPE-A: both gates, learned omega
  e.additive = AdditiveKind::Key;        // per attention head of DIFF V2, fixed omega (no parameter)
  e.additive_learned_slope = false;
  c.kinds = {{"a", a}, {"b", b}, {"c", cc}, {"d", d}, {"e", e}};
  c.pattern = {"a", "b", "c", "d"};
  c.overrides = {{4, "e"}};
  c.validate();
  return c;
}

TEST(HfExport, HorizonForCausalLMCarriesEveryIngredientBitForBit) {
  TempDir d;
  const hz::nn::ModelConfig c = every_ingredient();
  const hz::nn::Transformer m(c, 7);
  std::map<std::string, hz::Shape> built;
  for (const auto& [k, v] : m.named_parameters()) built[k] = v->shape();
  EXPECT_EQ(hf::parameter_shapes(c), built);  // every parameter has its Hugging Face name
  const auto weights = m.state_dict();
  // the stock exporter refuses it; the default writes HorizonForCausalLM and its code
  hf::ExportOptions stock;
  stock.target = hf::ExportTarget::Stock;
  EXPECT_THROW(hf::export_dir(c, weights, "byte", d.file("stock"), stock), hf::HfError);
  EXPECT_FALSE(fs::exists(d.file("stock")));
  const hf::ExportReport rep = hf::export_dir(c, weights, "byte", d.file("out"));
  EXPECT_EQ(rep.architecture, "HorizonForCausalLM");
  for (const char* f : {"config.json", "configuration_horizon.py", "modeling_horizon.py", "model.safetensors", "tokenizer.json"})
    EXPECT_TRUE(fs::exists(d.file("out") + "/" + f)) << f;
  std::ifstream py(d.file("out") + "/modeling_horizon.py");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(py), {}), hf::modeling_horizon_py());
  const json cfg = read_json(d.file("out") + "/config.json");
  EXPECT_EQ(cfg["auto_map"]["AutoModelForCausalLM"], "modeling_horizon.HorizonForCausalLM");
  EXPECT_EQ(cfg["layer_kinds"]["a"]["yarn_ramp"], "rotations");
  EXPECT_EQ(cfg["layer_overrides"]["4"], "e");
  EXPECT_TRUE(has(cfg["window_convention"].get<std::string>(), "window_left = W - 1"));
  // import reads back the same model, every field and every weight bit
  const hf::Imported back = hf::import_dir(d.file("out"));
  EXPECT_EQ(back.report.architecture, "HorizonForCausalLM");
  Recipe ra, rb;
  ra.model.cfg = c;
  rb.model.cfg = back.cfg;
  EXPECT_EQ(to_yaml(ra), to_yaml(rb));
  EXPECT_EQ(back.cfg.kinds[1].attn.mask.scope_train_len, 64);
  ASSERT_EQ(back.weights.size(), weights.size());
  for (const auto& [k, t] : weights)
    EXPECT_EQ(std::memcmp(t.raw_data(), back.weights.at(k).raw_data(), t.numel() * 4), 0) << k;
  // and exports the same config.json again (import -> export -> import is a fixed point)
  hf::export_dir(back.cfg, back.weights, "byte", d.file("again"));
  EXPECT_EQ(read_json(d.file("again") + "/config.json"), cfg);
  // forced remote code for a model Llama expresses
  hz::nn::ModelConfig plain;
  plain.kinds = {{"rope", {}}};
  plain.pattern = {"rope"};
  hf::ExportOptions remote;
  remote.target = hf::ExportTarget::Horizon;
  EXPECT_EQ(hf::export_dir(plain, hz::nn::Transformer(plain, 0).state_dict(), "", d.file("remote"), remote).architecture,
            "HorizonForCausalLM");
}

TEST(HfImport, RefusesABadHorizonLayerKindByName) {
  TempDir d;
  const hz::nn::ModelConfig c = every_ingredient();
  hf::export_dir(c, hz::nn::Transformer(c, 0).state_dict(), "", d.file("out"));
  const json good = read_json(d.file("out") + "/config.json");
  auto refusal = [&](const std::function<void(json&)>& edit) -> std::string {
    json j = good;
    edit(j);
    try {
      hf::import_config(j.dump(), "config.json");
    } catch (const hf::HfError& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_TRUE(has(refusal([](json& j) { j["layer_kinds"]["a"]["frobnicate"] = 1; }), "layer_kinds.a.frobnicate is not a field"));
  EXPECT_TRUE(has(refusal([](json& j) { j["layer_kinds"]["b"]["mask"] = "diagonal"; }), "layer_kinds.b.mask"));
  EXPECT_TRUE(has(refusal([](json& j) { j["layer_kinds"]["c"]["window"] = -3; }), "layer_kinds.c.window"));
  EXPECT_TRUE(has(refusal([](json& j) { j["layer_kinds"]["c"]["tau"] = "big"; }), "must be a number"));
  EXPECT_TRUE(has(refusal([](json& j) { j["layer_pattern"] = {"a", "zz"}; }), "not in layer_kinds"));
  EXPECT_TRUE(has(refusal([](json& j) { j["layer_overrides"]["9"] = "a"; }), "not a layer index"));
  EXPECT_TRUE(has(refusal([](json& j) { j["auto_map"]["AutoModelForCausalLM"] = "evil.Model"; }), "not the code Horizon exports"));
  EXPECT_TRUE(has(refusal([](json& j) { j["hidden_act"] = "tanh"; }), "hidden_act"));
  EXPECT_TRUE(has(refusal([](json& j) { j["train_length"] = 65; }), "train_length"));
  EXPECT_TRUE(has(refusal([](json& j) { j["layer_kinds"]["a"]["rope_factor"] = 0; }), "out of range"));
  EXPECT_EQ(refusal([](json&) {}), "(no error)");
}

// convert to-hf copied tokenizer_config.json and special_tokens_map.json verbatim, an auto_map
// included: loading the export with trust_remote_code=True (as a HorizonForCausalLM export asks) then
// ran tokenizer code from another repository. The export keeps the keys Horizon understands and says
// what it left out, the auto_map by name.
TEST(HfExport, TokenizerConfigKeepsOnlyWhatHorizonReadsAndDropsAForeignAutoMap) {
  TempDir d;
  fs::create_directories(d.file("tok"));
  fs::copy_file(std::string(HZ_SOURCE_DIR) + "/tests/data/fixtures/tokenizers/llama2_style/tokenizer.json",
                d.file("tok") + "/tokenizer.json");
  std::ofstream(d.file("tok") + "/tokenizer_config.json")
      << R"({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": {"content": "<s>", "lstrip": false},)"
      << R"( "eos_token": "</s>", "pad_token": null, "model_max_length": 2048, "add_bos_token": true,)"
      << R"( "auto_map": {"AutoTokenizer": ["evil/repo--tokenization_evil.EvilTokenizer", null]},)"
      << R"( "chat_template": "{{ messages }}"})";
  std::ofstream(d.file("tok") + "/special_tokens_map.json")
      << R"({"bos_token": "<s>", "eos_token": "</s>", "auto_map": {"AutoTokenizer": "x.Y"}, "tokenizer_class": "X"})";
  hz::nn::ModelConfig plain;
  plain.vocab_size = 1024;  // the fixture's 956 tokens
  plain.kinds = {{"rope", {}}};
  plain.pattern = {"rope"};
  const hf::ExportReport rep =
      hf::export_dir(plain, hz::nn::Transformer(plain, 0).state_dict(), d.file("tok") + "/tokenizer.json", d.file("out"));
  const json tc = read_json(d.file("out") + "/tokenizer_config.json");
  EXPECT_EQ(tc, json::parse(R"({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
                                "pad_token": null, "model_max_length": 2048, "add_bos_token": true})"));
  const json sm = read_json(d.file("out") + "/special_tokens_map.json");
  EXPECT_EQ(sm, json::parse(R"({"bos_token": "<s>", "eos_token": "</s>"})"));
  std::string all;
  for (const auto& w : rep.warnings) all += w + "\n";
  EXPECT_TRUE(has(all, d.file("tok") + "/tokenizer_config.json: left out auto_map")) << all;
  EXPECT_TRUE(has(all, "evil/repo--tokenization_evil.EvilTokenizer")) << all;
  EXPECT_TRUE(has(all, "trust_remote_code=True")) << all;
  EXPECT_TRUE(has(all, "left out keys Horizon does not read: chat_template")) << all;
  EXPECT_TRUE(has(all, d.file("tok") + "/special_tokens_map.json: left out auto_map")) << all;
  EXPECT_TRUE(has(all, "special_tokens_map.json: left out keys Horizon does not read: tokenizer_class")) << all;
  // a value of the wrong type is refused naming the file and the key
  std::ofstream(d.file("tok") + "/tokenizer_config.json", std::ios::trunc) << R"({"add_bos_token": "yes"})";
  try {
    hf::export_dir(plain, hz::nn::Transformer(plain, 0).state_dict(), d.file("tok") + "/tokenizer.json", d.file("bad"));
    FAIL() << "a number read as a token";
  } catch (const hf::HfError& e) {
    EXPECT_TRUE(has(e.what(), d.file("tok") + "/tokenizer_config.json: add_bos_token: expected true or false")) << e.what();
  }
}
