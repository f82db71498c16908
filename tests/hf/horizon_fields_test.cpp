// horizon_fields.json (hf/remote/): the table of an attention layer kind's fields that
// configuration_horizon.py reads, generated from attention/spec_fields.h. The committed copy must be what
// the table produces, so a field added without regenerating fails here. Regenerate with
//   HZ_WRITE_FIELDS_JSON=1 build/hz_test_hf --gtest_filter='HorizonFields.*'
// The stock export's refusals come from the same table (hf/config.cpp): each names the field and its value.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "attention/spec_fields.h"
#include "hf/config.h"
#include "hf/hf.h"

namespace hf = hz::hf;
using json = nlohmann::json;

namespace {

const std::string kCommitted = std::string(HZ_SOURCE_DIR) + "/hf/remote/horizon_fields.json";

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string refusal(const std::function<void(hz::attn::AttentionSpec&)>& f) {
  hz::nn::ModelConfig c;
  c.kinds = {{"k", {}}};
  c.pattern = {"k"};
  f(c.kinds[0].attn);
  try {
    hf::export_config(c, {}, hz::io::StoreAs::F32);
  } catch (const hf::HfError& e) {
    return e.what();
  }
  return "(exported)";
}

}  // namespace

TEST(HorizonFields, CommittedJsonIsWhatTheTableProduces) {
  const std::string now = hf::horizon_fields_json();
  if (const char* w = std::getenv("HZ_WRITE_FIELDS_JSON"); w && std::string(w) == "1") {
    std::ofstream(kCommitted, std::ios::binary) << now;
    GTEST_SKIP() << "wrote " << kCommitted;
  }
  EXPECT_EQ(read_text(kCommitted), now)
      << kCommitted << " differs from the field table (attention/spec_fields.h); regenerate it: "
      << "HZ_WRITE_FIELDS_JSON=1 build/hz_test_hf --gtest_filter='HorizonFields.*'";
}

TEST(HorizonFields, EachFieldWithItsKeyDefaultTypeAndRange) {
  const json j = json::parse(hf::horizon_fields_json());
  const json& fields = j.at("fields");
  std::map<std::string, json> by_name;
  for (const json& f : fields) by_name[f.at("name").get<std::string>()] = f;
  EXPECT_EQ(by_name.size(), fields.size());
  const json& chunk = by_name.at("chunk");
  EXPECT_EQ(chunk.at("config_key"), "layer_kinds.<kind>.chunk");
  EXPECT_EQ(chunk.at("type"), "int");
  EXPECT_EQ(chunk.at("default"), 0);
  EXPECT_EQ(chunk.at("range").at("lo"), 0);
  EXPECT_EQ(chunk.at("range").at("hi"), 16777216);
  EXPECT_EQ(chunk.at("role"), "architecture");
  EXPECT_EQ(chunk.at("stock"), "refused");
  const json& base = by_name.at("rope_base");
  EXPECT_EQ(base.at("default"), 10000.0);
  EXPECT_TRUE(base.at("range").at("lo_open").get<bool>());
  EXPECT_TRUE(base.at("range").at("hi").is_null());  // no upper bound: null, not an infinity JSON cannot hold
  EXPECT_EQ(by_name.at("logit").at("choices"), json({"identity", "scale_invariant", "logn", "swan_row", "temperature"}));
  EXPECT_EQ(by_name.at("tau").at("stock"), "via logit");
  EXPECT_EQ(by_name.at("rope_freq_factors").at("type"), "float_list");
  EXPECT_EQ(by_name.at("rope_scaling").at("role"), "inference-time");
  EXPECT_EQ(j.at("int_ceiling"), 1099511627776);
}

// A refused field is named with its value beside the table's words; a field read only under another's
// setting refuses nothing by itself.
TEST(HorizonFields, StockRefusalsNameTheFieldAndItsValue) {
  using S = hz::attn::AttentionSpec;
  const std::string chunk = refusal([](S& s) { s.mask.chunk = 8; });
  EXPECT_NE(chunk.find("layer 0 (kind 'k'): chunked attention (chunk = 8): Llama, Mistral"), std::string::npos) << chunk;
  const std::string qk = refusal([](S& s) { s.qk_norm = hz::attn::QKNorm::PerHead; });
  EXPECT_NE(qk.find("per-head QK-norm (qk_norm = per_head): Horizon exports"), std::string::npos) << qk;
  const std::string partial = refusal([](S& s) { s.pos.rope_fraction = 0.5; });
  EXPECT_NE(partial.find("partial RoPE (rope_fraction = 0.5)"), std::string::npos) << partial;
  // partial RoPE on a NoPE layer rotates nothing; temperature 1 is the identity; tau without its transform
  EXPECT_EQ(refusal([](S& s) {
              s.pos.kind = hz::attn::PosKind::None;
              s.pos.rope_fraction = 0.5;
            }),
            "(exported)");
  EXPECT_EQ(refusal([](S& s) { s.logit.kind = hz::attn::LogitKind::Temperature; }), "(exported)");
  EXPECT_EQ(refusal([](S& s) { s.logit.tau = 3; }), "(exported)");
  const std::string temp = refusal([](S& s) {
    s.logit.kind = hz::attn::LogitKind::Temperature;
    s.logit.beta = 2;
  });
  EXPECT_NE(temp.find("temperature logits (logit = temperature)"), std::string::npos) << temp;
}

// GRAPE's additive form: refused by the stock export with its words (HorizonForCausalLM computes it)
TEST(HorizonFields, AdditiveFormRefusals) {
  using S = hz::attn::AttentionSpec;
  const std::string alibi = refusal([](S& s) { s.additive = hz::attn::AdditiveKind::Alibi; });
  EXPECT_NE(alibi.find("(additive = alibi): no Llama-family architecture adds position biases"), std::string::npos) << alibi;
  const std::string key = refusal([](S& s) { s.additive = hz::attn::AdditiveKind::Key; });
  EXPECT_NE(key.find("(additive = key): no Llama-family architecture adds a gated distance bias"), std::string::npos) << key;
}
