// Horizon data tests: JSONL corpora, llm.c / nanoGPT token files, and preparing shards from every
// source (the same documents as text and as token files give the same shards and batches).
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/error.h"
#include "data/corpus.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "data/token_files.h"
#include "data/tokenizer.h"
#include "tests/data/data_test_util.h"

namespace {

using json = nlohmann::json;
const std::string kFix = std::string(HZ_SOURCE_DIR) + "/tests/data/fixtures/";
const std::string kJsonl = kFix + "corpus/docs.jsonl";

std::unique_ptr<hz::data::Tokenizer> tok(const std::string& name) {
  return hz::data::make_tokenizer(kFix + "tokenizers/" + name + "/tokenizer.json");
}

const json& expected() {
  static const json j = json::parse(hzdt::read_bytes(kFix + "corpus/expected.json"));
  return j;
}

std::string le32(int32_t v) {
  std::string s(4, '\0');
  std::memcpy(&s[0], &v, 4);
  return s;
}
std::string llmc_header(int32_t magic, int32_t version, int32_t n) {
  std::string h = le32(magic) + le32(version) + le32(n);
  return h + std::string(1024 - h.size(), '\0');
}

TEST(Jsonl, OneDocumentPerLineNamedByFileAndLine) {
  hzdt::TempDir dir;
  hzdt::write_bytes(dir.file("b.jsonl"), "{\"body\": \"second file\", \"n\": 1}\n");
  hzdt::write_bytes(dir.file("a.jsonl"),
                    "{\"body\": \"first \\u00e9\\n\", \"x\": [1, 2]}\n\n   \n{\"body\": \"\", \"y\": null}\r\n"
                    "{\"body\": \"last line without newline\"}");
  const auto docs = hz::data::load_jsonl({dir.file("*.jsonl")}, "body");
  ASSERT_EQ(docs.size(), 4u);
  EXPECT_EQ(docs[0].name, dir.file("a.jsonl") + ":1");
  EXPECT_EQ(docs[0].text, "first \xc3\xa9\n");
  EXPECT_EQ(docs[1].name, dir.file("a.jsonl") + ":4");  // blank lines skipped, numbering kept
  EXPECT_EQ(docs[1].text, "");
  EXPECT_EQ(docs[2].name, dir.file("a.jsonl") + ":5");
  EXPECT_EQ(docs[3].text, "second file");
  const auto fixture = hz::data::load_jsonl({kJsonl}, "text");
  EXPECT_EQ(fixture.size(), expected()["gpt2_style"].size());
}

TEST(Jsonl, BadLinesNameTheFileLineAndField) {
  hzdt::TempDir dir;
  const auto err = [&](const std::string& content, const std::string& field = "text") {
    hzdt::write_bytes(dir.file("c.jsonl"), content);
    return hzdt::error_message<hz::ValueError>([&] { hz::data::load_jsonl({dir.file("c.jsonl")}, field); });
  };
  std::string msg = err("{\"text\": \"ok\"}\n{\"txt\": \"typo\", \"id\": 3}\n");
  EXPECT_NE(msg.find("c.jsonl:2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"text\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("id, txt"), std::string::npos) << msg;  // the keys it does have
  msg = err("{\"text\": \"ok\"}\n{\"text\": \"unterminated}\n");
  EXPECT_NE(msg.find("c.jsonl:2"), std::string::npos) << msg;
  msg = err("[1, 2]\n");
  EXPECT_NE(msg.find("c.jsonl:1"), std::string::npos) << msg;
  msg = err("{\"text\": 42}\n");
  EXPECT_NE(msg.find("not a string"), std::string::npos) << msg;
  msg = err("{\"text\": \"bad \xff byte\"}\n");  // JSON strings must be UTF-8
  EXPECT_NE(msg.find("c.jsonl:1"), std::string::npos) << msg;
  msg = hzdt::error_message<hz::ValueError>([&] { hz::data::load_jsonl({dir.file("none*.jsonl")}, "text"); });
  EXPECT_NE(msg.find("none*.jsonl"), std::string::npos) << msg;
}

TEST(TokenFiles, ReadTheFormatsLlmcAndNanoGptWrite) {
  const auto gpt2 = tok("gpt2_style");
  const auto llama3 = tok("llama3_style");
  const auto g_docs = expected()["gpt2_style"].get<std::vector<std::vector<int32_t>>>();
  const auto l_docs = expected()["llama3_style"].get<std::vector<std::vector<int32_t>>>();
  const auto eot = gpt2->eos();
  using hz::data::TokenFormat;
  for (auto fmt : {TokenFormat::Auto, TokenFormat::LlmC}) {
    const auto f = hz::data::read_token_file(kFix + "corpus/gpt2_style.llmc.bin", fmt, gpt2->vocab_size());
    EXPECT_EQ(f.format, "llm.c GPT-2 (uint16)");
    EXPECT_EQ(f.tokens.front(), eot);  // llm.c: the delimiter before every document
    EXPECT_EQ(hz::data::split_documents(f.tokens, {gpt2->eos(), gpt2->bos()}), g_docs);
  }
  for (auto fmt : {TokenFormat::Auto, TokenFormat::NanoGpt}) {
    const auto f = hz::data::read_token_file(kFix + "corpus/gpt2_style.nanogpt.bin", fmt, gpt2->vocab_size());
    EXPECT_EQ(f.format, "nanoGPT (uint16)");
    EXPECT_EQ(f.tokens.back(), eot);  // nanoGPT: the delimiter after every document
    EXPECT_EQ(hz::data::split_documents(f.tokens, {eot}), g_docs);
  }
  const auto f = hz::data::read_token_file(kFix + "corpus/llama3_style.llmc.bin", TokenFormat::Auto, llama3->vocab_size());
  EXPECT_EQ(f.format, "llm.c Llama 3 (uint32)");
  EXPECT_EQ(f.tokens.front(), llama3->bos());
  EXPECT_EQ(hz::data::split_documents(f.tokens, {llama3->eos(), llama3->bos()}), l_docs);
  EXPECT_EQ(hz::data::split_documents({7, 7, 1, 7, 2, 3, 7}, {7}), (std::vector<std::vector<int32_t>>{{1}, {2, 3}}));
  EXPECT_EQ(hz::data::parse_token_format("nanogpt"), TokenFormat::NanoGpt);
  EXPECT_THROW(hz::data::parse_token_format("npy"), hz::ValueError);
}

TEST(TokenFiles, CorruptFilesAreRefusedBeforeTraining) {
  hzdt::TempDir dir;
  using hz::data::TokenFormat;
  const auto err = [&](const std::string& bytes, TokenFormat fmt = TokenFormat::Auto, int64_t vocab = 1000) {
    hzdt::write_bytes(dir.file("t.bin"), bytes);
    return hzdt::error_message<hz::ValueError>([&] { hz::data::read_token_file(dir.file("t.bin"), fmt, vocab); });
  };
  const std::string two_tokens = std::string("\x05\x00\x06\x00", 4);
  std::string msg = err(llmc_header(20240520, 1, 2).substr(0, 600));
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("t.bin"), std::string::npos) << msg;
  msg = err(llmc_header(12345, 1, 2) + two_tokens, TokenFormat::LlmC);
  EXPECT_NE(msg.find("bad magic 12345"), std::string::npos) << msg;
  msg = err(llmc_header(20240520, 2, 2) + two_tokens);
  EXPECT_NE(msg.find("version 2"), std::string::npos) << msg;
  msg = err(llmc_header(20240520, 1, 3) + two_tokens);  // header promises 3 tokens, the file has 2
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  msg = err(llmc_header(20240520, 1, 1) + two_tokens);
  EXPECT_NE(msg.find("longer than its header says"), std::string::npos) << msg;
  msg = err(llmc_header(20240801, 7, 1) + two_tokens.substr(0, 2));
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  msg = err(two_tokens + "\x01");
  EXPECT_NE(msg.find("odd size"), std::string::npos) << msg;
  msg = err(llmc_header(20240520, 1, 2) + std::string("\x05\x00\xe8\x03", 4));  // id 1000 in a vocabulary of 1000
  EXPECT_NE(msg.find("id 1000 at token 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("vocabulary"), std::string::npos) << msg;
  // valid files read back
  hzdt::write_bytes(dir.file("ok.bin"), llmc_header(20240801, 7, 2) + le32(70000) + le32(3));
  EXPECT_EQ(hz::data::read_token_file(dir.file("ok.bin"), TokenFormat::Auto, 70001).tokens, (std::vector<int32_t>{70000, 3}));
  EXPECT_THROW(hz::data::read_token_file(dir.file("ok.bin"), TokenFormat::Auto, 70000), hz::ValueError);
}

// The shards of a prepared corpus, as bytes.
std::pair<std::string, std::string> shard_bytes(const hz::data::PrepareResult& r) {
  return {hzdt::read_bytes(r.train_path), hzdt::read_bytes(r.val_path)};
}

TEST(PrepareSource, TextAndTokenFilesOfTheSameDocumentsGiveTheSameShardsAndBatches) {
  hzdt::TempDir dir;
  const auto gpt2 = tok("gpt2_style");
  hz::data::CorpusSpec spec;
  spec.val_fraction = 0.2;
  spec.seed = 11;
  spec.source = "jsonl";
  spec.files = {kJsonl};
  const auto from_text = hz::data::prepare_source(spec, *gpt2, dir.file("text"));
  EXPECT_EQ(from_text.val_docs, 6);  // round(0.2 * 32)
  EXPECT_GT(from_text.bytes_per_token(), 1.5);
  EXPECT_EQ(from_text.train_bytes + from_text.val_bytes, 9367);
  spec.source = "tokens";
  for (const char* bin : {"gpt2_style.llmc.bin", "gpt2_style.nanogpt.bin"}) {
    spec.files = {kFix + "corpus/" + bin};
    const auto from_bin = hz::data::prepare_source(spec, *gpt2, dir.file(bin));
    EXPECT_EQ(shard_bytes(from_bin), shard_bytes(from_text)) << bin;
    EXPECT_EQ(from_bin.bytes_per_token(), 0.0);  // pre-tokenized: no text bytes
    hz::data::Loader a(hz::data::Shard::open(from_text.train_path), 16, 4, 5, 0, 1, gpt2->eos());
    hz::data::Loader b(hz::data::Shard::open(from_bin.train_path), 16, 4, 5, 0, 1, gpt2->eos());
    for (int k = 0; k < 5; ++k) {
      const auto x = a.next(), y = b.next();
      EXPECT_EQ(x.tokens.to_vector(), y.tokens.to_vector());
      EXPECT_EQ(x.targets.to_vector(), y.targets.to_vector());
    }
  }
  // Llama 3: uint32 llm.c file vs JSONL with the Llama-3-style tokenizer
  const auto llama3 = tok("llama3_style");
  spec.source = "jsonl";
  spec.files = {kJsonl};
  const auto l_text = hz::data::prepare_source(spec, *llama3, dir.file("l_text"));
  spec.source = "tokens";
  spec.files = {kFix + "corpus/llama3_style.llmc.bin"};
  EXPECT_EQ(shard_bytes(hz::data::prepare_source(spec, *llama3, dir.file("l_bin"))), shard_bytes(l_text));
  // ids of another tokenizer: refused, naming the file
  const auto small = hz::data::make_tokenizer(kFix + "tokenizers/roberta_style/tokenizer.json");  // 801 ids
  spec.files = {kFix + "corpus/gpt2_style.llmc.bin"};
  const std::string msg = hzdt::error_message<hz::ValueError>([&] { hz::data::prepare_source(spec, *small, dir.file("x")); });
  EXPECT_NE(msg.find("gpt2_style.llmc.bin"), std::string::npos) << msg;
}

TEST(PrepareSource, ExplicitValidationFilesAndThreadIndependence) {
  hzdt::TempDir dir;
  const auto gpt2 = tok("gpt2_style");
  // split the fixture into two JSONL files: the second is the validation set
  const std::string all = hzdt::read_bytes(kJsonl);
  size_t cut = 0;
  for (int i = 0; i < 28; ++i) cut = all.find('\n', cut) + 1;
  hzdt::write_bytes(dir.file("train.jsonl"), all.substr(0, cut));
  hzdt::write_bytes(dir.file("val.jsonl"), all.substr(cut));
  hz::data::CorpusSpec spec;
  spec.source = "jsonl";
  spec.files = {dir.file("train.jsonl")};
  spec.val_files = {dir.file("val.jsonl")};
  const auto r = hz::data::prepare_source(spec, *gpt2, dir.file("out"));
  EXPECT_EQ(r.train_docs, 28);
  EXPECT_EQ(r.val_docs, 4);
  const auto val = hz::data::Shard::open(r.val_path);
  const auto want = expected()["gpt2_style"].get<std::vector<std::vector<int32_t>>>();
  for (int d = 0; d < 4; ++d) EXPECT_EQ(val->doc(d), want[static_cast<size_t>(28 + d)]);
  const json meta = json::parse(hzdt::read_bytes(dir.file("out/meta.json")));
  EXPECT_EQ(meta["tokenizer_fingerprint"], gpt2->fingerprint());
  EXPECT_EQ(meta["val"]["documents"][0], dir.file("val.jsonl") + ":1");
  EXPECT_EQ(meta["val"]["tokens"].get<int64_t>(), r.val_tokens);
#ifdef _OPENMP
  // the shards do not depend on the number of threads that tokenized them
  spec.val_files.clear();
  spec.val_fraction = 0.1;
  std::vector<std::pair<std::string, std::string>> outs;
  std::vector<std::string> stages;
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    const auto p = hz::data::prepare_source(spec, *gpt2, dir.file("t" + std::to_string(threads)),
                                            [&](const hz::data::PrepareProgress& pr) { stages.push_back(pr.stage); });
    outs.push_back(shard_bytes(p));
  }
  omp_set_num_threads(omp_get_num_procs());
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(stages.front(), "reading");
  EXPECT_EQ(stages.back(), "writing");
#endif
}

TEST(PrepareSource, ErrorsNameWhatIsWrong) {
  hzdt::TempDir dir;
  hz::data::ByteTokenizer byte;
  hz::data::CorpusSpec spec;
  spec.source = "parquet";
  EXPECT_NE(hzdt::error_message<hz::ValueError>([&] { hz::data::prepare_source(spec, byte, dir.path()); }).find("parquet"),
            std::string::npos);
  spec.source = "jsonl";
  spec.files = {kJsonl};
  spec.text_field = "body";
  const std::string msg = hzdt::error_message<hz::ValueError>([&] { hz::data::prepare_source(spec, byte, dir.path()); });
  EXPECT_NE(msg.find("docs.jsonl:1"), std::string::npos) << msg;
  // a document the tokenizer cannot encode is named
  hzdt::write_bytes(dir.file("bad.txt"), "fine\xff");
  spec.source = "files";
  spec.files = {dir.file("bad.txt")};
  const auto gpt2 = tok("gpt2_style");
  const std::string m2 = hzdt::error_message<hz::ValueError>([&] { hz::data::prepare_source(spec, *gpt2, dir.file("o")); });
  EXPECT_NE(m2.find("bad.txt"), std::string::npos) << m2;
  EXPECT_NE(m2.find("UTF-8"), std::string::npos) << m2;
}

}  // namespace
