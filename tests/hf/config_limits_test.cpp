// Issue 19: config.json values out of range are refused by name (HfError naming the file and the
// field), never imported into a model that scores NaN or silently drops a setting.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "hf/config.h"

using json = nlohmann::json;

namespace {

json llama_config() {
  std::ifstream in(std::string(HZ_SOURCE_DIR) + "/tests/fixtures/hf/llama/config.json");
  return json::parse(in);
}

const std::string kWhere = "/models/x/config.json";

// The HfError's message for importing `j` (fails the test when it is accepted).
std::string refusal(const json& j) {
  try {
    (void)hz::hf::import_config(j.dump(), kWhere);
  } catch (const hz::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted: " << j.dump();
  return {};
}

void expect_refused(const json& j, const std::string& field, const std::string& what) {
  const std::string msg = refusal(j);
  EXPECT_EQ(msg.rfind(kWhere, 0), 0u) << msg;
  EXPECT_NE(msg.find(field), std::string::npos) << msg;
  EXPECT_NE(msg.find(what), std::string::npos) << msg;
}

}  // namespace

TEST(ConfigLimits, FixtureIsAccepted) { EXPECT_NO_THROW((void)hz::hf::import_config(llama_config().dump(), kWhere)); }

TEST(ConfigLimits, NormEpsMustBePositiveAndFinite) {
  for (double eps : {-1e308, 0.0, -1e-6, 2.0}) {
    json j = llama_config();
    j["rms_norm_eps"] = eps;
    expect_refused(j, "rms_norm_eps", "must be a positive number below 1");
  }
  json j = llama_config();
  j["rms_norm_eps"] = 1e-5;
  EXPECT_NO_THROW((void)hz::hf::import_config(j.dump(), kWhere));
}

TEST(ConfigLimits, InfiniteNumbersAreRefused) {
  json j = llama_config();
  std::string text = j.dump();
  const auto at = text.find("\"rms_norm_eps\":");
  ASSERT_NE(at, std::string::npos);
  const auto end = text.find_first_of(",}", at);
  text.replace(at, end - at, "\"rms_norm_eps\":1e999");
  try {
    (void)hz::hf::import_config(text, kWhere);
    ADD_FAILURE() << "accepted 1e999";
  } catch (const hz::Error& e) {
    EXPECT_NE(std::string(e.what()).find(kWhere), std::string::npos) << e.what();
  }
}

TEST(ConfigLimits, RopeThetaAndFactorsMustBePositive) {
  json j = llama_config();
  j["rope_theta"] = -10000.0;
  expect_refused(j, "rope_theta", "must be positive");
  j = llama_config();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", -2.0}};
  expect_refused(j, "rope_scaling.factor", "must be positive");
  j = llama_config();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 4.0}, {"high_freq_factor", 1.0},
                       {"original_max_position_embeddings", 8192}};
  expect_refused(j, "rope_scaling.high_freq_factor", "must exceed low_freq_factor");
  j = llama_config();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 0}};
  expect_refused(j, "rope_scaling.original_max_position_embeddings", "positive integer");
}

TEST(ConfigLimits, NullRopeTypeIsRefusedByName) {  // was: the scaling silently dropped
  json j = llama_config();
  j["rope_scaling"] = {{"type", nullptr}, {"factor", 4.0}};
  expect_refused(j, "rope_scaling.type", "is null");
  j = llama_config();
  j["rope_scaling"] = {{"rope_type", nullptr}, {"factor", 4.0}};
  expect_refused(j, "rope_scaling.rope_type", "is null");
}

TEST(ConfigLimits, SizesAreBounded) {
  json j = llama_config();
  j["hidden_size"] = int64_t{1} << 40;
  expect_refused(j, "hidden_size", "larger than Horizon accepts");
  j = llama_config();
  j["num_attention_heads"] = -4;
  expect_refused(j, "num_attention_heads", "must be positive");
  j = llama_config();
  j["vocab_size"] = 18446744073709551615ull;  // wraps to -1 as int64
  expect_refused(j, "vocab_size", "must be positive");
}

TEST(ConfigLimits, DeepNestingIsRefusedBeforeParsing) {  // was: a stack overflow in dump()
  json j = llama_config();
  std::string text = j.dump();
  text.insert(text.size() - 1, ",\"x\":" + std::string(100000, '[') + std::string(100000, ']'));
  try {
    (void)hz::hf::import_config(text, kWhere);
    ADD_FAILURE() << "accepted";
  } catch (const hz::Error& e) {
    EXPECT_NE(std::string(e.what()).find(kWhere), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("nested deeper"), std::string::npos) << e.what();
  }
}
