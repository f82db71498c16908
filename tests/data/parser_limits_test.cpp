// Issue 19: tokenizer.json ids and nesting, and JSONL nesting, are range-checked: a refusal is a
// ValueError naming the file and what is wrong; never exit 3, a wrapped id or gigabytes allocated.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "data/corpus.h"
#include "data/tokenizer.h"
#include "data_test_util.h"

using json = nlohmann::json;

namespace {

const std::string kGpt2 = std::string(HZ_SOURCE_DIR) + "/tests/data/fixtures/tokenizers/gpt2_style/tokenizer.json";

json gpt2() { return json::parse(hzdt::read_bytes(kGpt2)); }

std::string refusal_of(const hzdt::TempDir& d, const std::string& text) {
  const std::string p = d.file("tokenizer.json");
  hzdt::write_bytes(p, text);
  const std::string msg = hzdt::error_message<hz::ValueError>([&] { (void)hz::data::make_tokenizer(p); });
  EXPECT_NE(msg.find(p), std::string::npos) << msg;
  return msg;
}

}  // namespace

TEST(TokenizerLimits, HugeVocabularyIdsAreRefused) {
  // 2^31-1 and 2e9 were exit 3, 3e8 grew the process to 24 GB
  for (const int64_t id : {int64_t{2147483647}, int64_t{2000000000}, int64_t{300000000}, int64_t{-3}}) {
    hzdt::TempDir d;
    json j = gpt2();
    j["model"]["vocab"]["zzz-extra"] = id;
    const std::string msg = refusal_of(d, j.dump());
    EXPECT_NE(msg.find("model.vocab.zzz-extra"), std::string::npos) << msg;
    EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
  }
}

TEST(TokenizerLimits, IdsAboveTwoToThe32DoNotWrap) {
  hzdt::TempDir d;
  json j = gpt2();
  j["model"]["vocab"]["zzz-extra"] = uint64_t{4294967296} + 5;  // used to become id 5
  const std::string msg = refusal_of(d, j.dump());
  EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
  j["model"]["vocab"]["zzz-extra"] = 18446744073709551615ull;
  EXPECT_NE(refusal_of(d, j.dump()).find("out of range"), std::string::npos);
}

TEST(TokenizerLimits, PostProcessorIdsAreChecked) {
  hzdt::TempDir d;
  json j = gpt2();
  j["post_processor"] = {{"type", "RobertaProcessing"}, {"cls", {"<s>", uint64_t{4294967296}}}, {"sep", {"</s>", 0}}};
  const std::string msg = refusal_of(d, j.dump());
  EXPECT_NE(msg.find("post_processor.cls[1]"), std::string::npos) << msg;
}

TEST(TokenizerLimits, DeepMergesAreRefusedBeforeParsing) {  // was: a stack overflow in dump()
  hzdt::TempDir d;
  std::string text = gpt2().dump();
  const auto at = text.find("\"merges\":[");
  ASSERT_NE(at, std::string::npos);
  text.insert(at + 10, std::string(100000, '[') + std::string(100000, ']') + ",");
  const std::string msg = refusal_of(d, text);
  EXPECT_NE(msg.find("nested deeper than 64"), std::string::npos) << msg;
}

TEST(TokenizerLimits, WrongTypesAreValueErrors) {
  hzdt::TempDir d;
  json j = gpt2();
  j["model"]["dropout"] = "high";
  EXPECT_NE(refusal_of(d, j.dump()).find("model.dropout"), std::string::npos);
}

TEST(JsonlLimits, DeepLineIsRefusedNamingFileAndLine) {
  hzdt::TempDir d;
  const std::string p = d.file("docs.jsonl");
  hzdt::write_bytes(p, "{\"text\": \"ok\"}\n{\"text\": " + std::string(100000, '[') + std::string(100000, ']') + "}\n");
  const std::string msg = hzdt::error_message<hz::ValueError>([&] { (void)hz::data::load_jsonl({p}, "text"); });
  EXPECT_NE(msg.find(p + ":2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("nested deeper"), std::string::npos) << msg;
}
