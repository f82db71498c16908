// Horizon data tests: the byte tokenizer and the tokenizer factory.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "data/tokenizer.h"
#include "tests/data/data_test_util.h"

namespace {

using hz::data::ByteTokenizer;

TEST(ByteTokenizer, RoundTripsEveryByteIncludingNulAndHighBytes) {
  std::string text;
  for (int b = 255; b >= 0; --b) text.push_back(static_cast<char>(b));  // 0xff .. 0x00, "\0" last
  text += std::string("caf\xc3\xa9 \0x", 7);                                  // UTF-8 and an embedded NUL
  ByteTokenizer tok;
  const std::vector<int32_t> ids = tok.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    EXPECT_EQ(ids[i], static_cast<int32_t>(static_cast<unsigned char>(text[i]))) << i;
    EXPECT_GE(ids[i], 0);
    EXPECT_LT(ids[i], 256);
  }
  EXPECT_EQ(ids[0], 255);
  EXPECT_EQ(ids[255], 0);
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_TRUE(tok.encode("").empty());
  EXPECT_EQ(tok.decode({}), "");
}

TEST(ByteTokenizer, SpecialIdsAndVocab) {
  ByteTokenizer tok;
  EXPECT_EQ(tok.vocab_size(), 259);
  EXPECT_EQ(tok.bos(), 256);
  EXPECT_EQ(tok.eos(), 257);
  EXPECT_EQ(tok.pad(), 258);
  EXPECT_EQ(tok.name(), "byte");
  // decode skips the specials wherever they are
  EXPECT_EQ(tok.decode({256, 'H', 257, 'i', 258, 258}), "Hi");
  EXPECT_EQ(tok.decode({256, 257, 258}), "");
  // encode never produces a special
  for (int32_t id : tok.encode("hello\n\xff")) EXPECT_LT(id, 256);
}

TEST(ByteTokenizer, DecodeRejectsIdsOutsideTheVocabulary) {
  ByteTokenizer tok;
  EXPECT_THROW(tok.decode({'a', 259}), hz::ValueError);
  const std::string msg = hzdt::error_message<hz::ValueError>([&] { tok.decode({-1}); });
  EXPECT_NE(msg.find("-1"), std::string::npos) << msg;
}

TEST(MakeTokenizer, KnownAndUnknownNames) {
  auto tok = hz::data::make_tokenizer("byte");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->name(), "byte");
  EXPECT_EQ(tok->vocab_size(), 259);
  EXPECT_EQ(tok->decode(tok->encode("abc")), "abc");
  const std::string msg = hzdt::error_message<hz::ValueError>([] { hz::data::make_tokenizer("bpe50k"); });
  EXPECT_NE(msg.find("bpe50k"), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte"), std::string::npos) << msg;  // lists the known ones
  EXPECT_NE(msg.find("tokenizer.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find(".model"), std::string::npos) << msg;
  EXPECT_EQ(hz::data::tokenizer_names().front(), "byte");
}

}  // namespace
