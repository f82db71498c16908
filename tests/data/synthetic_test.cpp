// Horizon data tests: passkey and multi-key retrieval examples and the synthetic loader.
#include <gtest/gtest.h>

#include <cctype>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "data/synthetic.h"
#include "data/tokenizer.h"
#include "tests/data/data_test_util.h"

namespace {

using hz::Generator;
using hz::data::ByteTokenizer;
using hz::data::SyntheticExample;

// Checks the mask alignment independently of the generator: weights[i] == 1 exactly for the
// positions whose next token belongs to the trailing answer, and those tokens spell the answer.
void expect_answer_where_weights_say(const ByteTokenizer& tok, const SyntheticExample& ex, int64_t length) {
  ASSERT_EQ(static_cast<int64_t>(ex.tokens.size()), length);
  ASSERT_EQ(static_cast<int64_t>(ex.weights.size()), length);
  ASSERT_EQ(ex.answer.size(), 7u);
  for (char c : ex.answer) EXPECT_TRUE(std::isdigit(static_cast<unsigned char>(c))) << ex.answer;
  std::string from_mask;
  int64_t first = -1, ones = 0;
  for (int64_t i = 0; i < length; ++i) {
    const float w = ex.weights[static_cast<size_t>(i)];
    EXPECT_TRUE(w == 0.0f || w == 1.0f);
    if (w == 1.0f) {
      ASSERT_LT(i + 1, length) << "the last position has no next token";
      if (first < 0) first = i;
      EXPECT_EQ(i, first + ones) << "mask is not contiguous";
      from_mask.push_back(static_cast<char>(ex.tokens[static_cast<size_t>(i + 1)]));
      ++ones;
    }
  }
  EXPECT_EQ(from_mask, ex.answer);
  EXPECT_EQ(first + 1, ex.answer_begin);
  EXPECT_EQ(ex.answer_begin + 7, length);  // the answer ends the example
  const std::vector<int32_t> tail(ex.tokens.begin() + ex.answer_begin, ex.tokens.end());
  EXPECT_EQ(tok.decode(tail), ex.answer);
}

TEST(Passkey, ExactLengthAndAnswerWhereWeightsSay) {
  ByteTokenizer tok;
  for (int64_t length : {112, 113, 150, 257, 1000, 4097}) {
    for (double depth : {0.0, 0.3, 0.5, 0.99, 1.0}) {
      Generator g(1234, static_cast<uint64_t>(length));
      const SyntheticExample ex = hz::data::make_passkey(tok, g, length, depth);
      expect_answer_where_weights_say(tok, ex, length);
      const std::string text = tok.decode(ex.tokens);
      const std::string needle =
          "The pass key is " + ex.answer + ". Remember it. " + ex.answer + " is the pass key. ";
      EXPECT_NE(text.find(needle), std::string::npos) << text;
      const std::string q = "What is the pass key? The pass key is " + ex.answer;
      EXPECT_EQ(text.substr(text.size() - q.size()), q);
    }
  }
}

TEST(Passkey, DepthMovesTheNeedle) {
  ByteTokenizer tok;
  const int64_t length = 2000;
  std::vector<size_t> where;
  for (double depth : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    Generator g(99, 0);
    const std::string text = tok.decode(hz::data::make_passkey(tok, g, length, depth).tokens);
    where.push_back(text.find("The pass key is "));
  }
  EXPECT_EQ(where.front(), 0u);  // depth 0: before all filler
  for (size_t i = 1; i < where.size(); ++i) EXPECT_GT(where[i], where[i - 1]) << i;
  // depth d puts the needle about d of the way through the filler (sentence granularity)
  const double filler = static_cast<double>(length - 63 - 38 - 7);  // needle, question, answer
  EXPECT_NEAR(static_cast<double>(where[2]), 0.5 * filler, 25.0);
  // depth 1: the needle is the last thing before the question
  Generator g(99, 0);
  const auto ex = hz::data::make_passkey(tok, g, length, 1.0);
  const std::string text = tok.decode(ex.tokens);
  const std::string tail = "is the pass key. What is the pass key?";
  EXPECT_NE(text.find(tail), std::string::npos);
}

TEST(Passkey, SameSeedSameExampleOtherSeedOtherKey) {
  ByteTokenizer tok;
  Generator a(5, 17), b(5, 17);
  const auto x = hz::data::make_passkey(tok, a, 300, 0.4);
  const auto y = hz::data::make_passkey(tok, b, 300, 0.4);
  EXPECT_EQ(x.tokens, y.tokens);
  EXPECT_EQ(x.weights, y.weights);
  EXPECT_EQ(x.answer, y.answer);
  EXPECT_EQ(a.offset(), b.offset());
  EXPECT_GT(a.offset(), 0u);  // the draws advanced the generator
  std::set<std::string> keys;
  for (uint64_t s = 0; s < 20; ++s) {
    Generator g(s, 0);
    keys.insert(hz::data::make_passkey(tok, g, 300, 0.4).answer);
  }
  EXPECT_GE(keys.size(), 19u);
}

TEST(Passkey, TooShortOrBadDepthIsRefused) {
  ByteTokenizer tok;
  Generator g(1, 0);
  const std::string msg = hzdt::error_message<hz::ValueError>([&] { hz::data::make_passkey(tok, g, 50, 0.5); });
  EXPECT_NE(msg.find("108"), std::string::npos) << msg;  // the minimum length: 63 + 38 + 7
  EXPECT_NO_THROW(hz::data::make_passkey(tok, g, 108, 0.5));
  EXPECT_THROW(hz::data::make_passkey(tok, g, 500, 1.5), hz::ValueError);
  EXPECT_THROW(hz::data::make_passkey(tok, g, 500, -0.1), hz::ValueError);
}

TEST(KvRetrieval, NeedlesSpreadAndTheAskedValueIsTheAnswer) {
  ByteTokenizer tok;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    const int64_t length = 3000;
    Generator g(seed, 0);
    const SyntheticExample ex = hz::data::make_kv_retrieval(tok, g, length, 4);
    expect_answer_where_weights_say(tok, ex, length);
    const std::string text = tok.decode(ex.tokens);
    // four needles "The value of key KKKK is VVVVVVV. " (+ one in the question's answer clause)
    std::vector<size_t> at;
    std::vector<std::string> keys;
    for (size_t p = text.find("The value of key "); p != std::string::npos; p = text.find("The value of key ", p + 1))
      at.push_back(p);
    ASSERT_EQ(at.size(), 5u) << text;
    for (size_t i = 0; i < 4; ++i) {
      const std::string key = text.substr(at[i] + 17, 4);
      for (char c : key) EXPECT_TRUE(c >= 'A' && c <= 'Z') << key;
      keys.push_back(key);
    }
    EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), 4u);
    // spread: needle i lies in the i-th quarter of the filler (up to needle lengths)
    EXPECT_LT(at[0], static_cast<size_t>(0.25 * length + 40));
    EXPECT_GT(at[3], static_cast<size_t>(0.75 * length - 200));
    // the question asks one of the keys, and its needle holds the answer
    const size_t q = text.find("What is the value of key ");
    ASSERT_NE(q, std::string::npos);
    const std::string asked = text.substr(q + 25, 4);
    const size_t needle = text.find("The value of key " + asked + " is " + ex.answer + ". ");
    EXPECT_NE(needle, std::string::npos) << asked << " " << ex.answer;
    EXPECT_LT(needle, q);
  }
  Generator g(1, 0);
  EXPECT_THROW(hz::data::make_kv_retrieval(tok, g, 100, 4), hz::ValueError);
  EXPECT_THROW(hz::data::make_kv_retrieval(tok, g, 1000, 0), hz::ValueError);
  for (int n : {1, 2, 7}) {
    Generator h(3, 0);
    const auto ex = hz::data::make_kv_retrieval(tok, h, 1500, n);
    expect_answer_where_weights_say(tok, ex, 1500);
  }
}

TEST(SyntheticLoader, BatchesAlignWithExamplesAndCursorRestores) {
  auto tok = std::make_shared<const ByteTokenizer>();
  for (const char* task : {"passkey", "kv"}) {
    const int64_t T = 400, B = 3;
    hz::data::SyntheticLoader ld(task, tok, T, B, 2024);
    const hz::data::Batch b0 = ld.next();
    ASSERT_EQ(b0.tokens.shape(), (hz::Shape{B, T}));
    EXPECT_EQ(b0.tokens.dtype(), hz::DType::I64);
    EXPECT_EQ(b0.weights.dtype(), hz::DType::F32);
    const auto tk = b0.tokens.to_vector(), tg = b0.targets.to_vector(), w = b0.weights.to_vector();
    for (int64_t r = 0; r < B; ++r) {
      // example r from Generator(seed, r), length T + 1
      const SyntheticExample ex = ld.example(r);
      ASSERT_EQ(static_cast<int64_t>(ex.tokens.size()), T + 1);
      double wsum = 0;
      for (int64_t t = 0; t < T; ++t) {
        EXPECT_EQ(tk[r * T + t], ex.tokens[t]);
        EXPECT_EQ(tg[r * T + t], ex.tokens[t + 1]);
        if (t + 1 < T) {
          EXPECT_EQ(tg[r * T + t], tk[r * T + t + 1]);
        }
        wsum += w[r * T + t];
        if (w[r * T + t] == 1.0) {
          EXPECT_TRUE(std::isdigit(static_cast<int>(tg[r * T + t])));
        }
      }
      EXPECT_EQ(wsum, 7.0);  // the seven answer digits are the weighted targets
      // the weighted targets are the last 7 targets, and they spell the answer
      std::string ans;
      for (int64_t t = T - 7; t < T; ++t) ans.push_back(static_cast<char>(tg[r * T + t]));
      EXPECT_EQ(ans, ex.answer);
    }
    if (std::string(task) == "passkey") {  // the stream draws a depth per example
      std::set<size_t> where;
      for (int64_t k = 0; k < 6; ++k) {
        const auto ex = ld.example(k);
        where.insert(tok->decode(ex.tokens).find("The pass key is"));
      }
      EXPECT_GE(where.size(), 4u);
    }
    ld.next();
    const auto saved = ld.cursor();
    EXPECT_EQ(saved.epoch, 0);
    EXPECT_EQ(saved.index, 2 * B);
    const auto x = ld.next();
    hz::data::SyntheticLoader other(task, tok, T, B, 2024);
    other.restore(saved);
    const auto y = other.next();
    EXPECT_EQ(x.tokens.to_vector(), y.tokens.to_vector());
    EXPECT_EQ(x.targets.to_vector(), y.targets.to_vector());
    EXPECT_EQ(x.weights.to_vector(), y.weights.to_vector());
    hz::data::SyntheticLoader seed2(task, tok, T, B, 2025);
    EXPECT_NE(seed2.next().tokens.to_vector(), b0.tokens.to_vector());
    EXPECT_THROW(other.restore({1, 0}), hz::ValueError);
  }
}

TEST(SyntheticLoader, DataParallelRanksDealTheOneRankStreamOut) {
  // rank d of 3 reads global batches d, d + 3, ...: together the ranks of a step read what one
  // rank with batch 3 B reads, no example twice
  auto tok = std::make_shared<const ByteTokenizer>();
  const int64_t T = 256, B = 2, W = 3;
  hz::data::SyntheticLoader one("kv", tok, T, B * W, 7);
  std::vector<hz::data::SyntheticLoader> ranks;
  for (int64_t d = 0; d < W; ++d) ranks.emplace_back("kv", tok, T, B, 7, d, W);
  for (int step = 0; step < 3; ++step) {
    const std::vector<double> whole = one.next().tokens.to_vector();
    for (int64_t d = 0; d < W; ++d) {
      const std::vector<double> part = ranks[d].next().tokens.to_vector();
      EXPECT_EQ(part, std::vector<double>(whole.begin() + d * B * T, whole.begin() + (d + 1) * B * T))
          << "step " << step << " rank " << d;
    }
  }
  // the cursor counts this rank's examples and restores the rank's own stream
  EXPECT_EQ(ranks[1].cursor().index, 3 * B);
  hz::data::SyntheticLoader again("kv", tok, T, B, 7, 1, W);
  again.restore(ranks[1].cursor());
  EXPECT_EQ(again.next().tokens.to_vector(), ranks[1].next().tokens.to_vector());
  EXPECT_THROW(hz::data::SyntheticLoader("kv", tok, T, B, 7, 3, 3), hz::ValueError);
}

TEST(SyntheticLoader, RejectsUnknownTaskAndShortSequences) {
  auto tok = std::make_shared<const ByteTokenizer>();
  const std::string msg =
      hzdt::error_message<hz::ValueError>([&] { hz::data::SyntheticLoader("needle", tok, 512, 2, 1); });
  EXPECT_NE(msg.find("needle"), std::string::npos) << msg;
  EXPECT_NE(msg.find("passkey"), std::string::npos) << msg;
  EXPECT_NE(msg.find("kv"), std::string::npos) << msg;
  EXPECT_THROW(hz::data::SyntheticLoader("passkey", tok, 64, 2, 1), hz::ValueError);
  EXPECT_THROW(hz::data::SyntheticLoader("passkey", nullptr, 512, 2, 1), hz::ValueError);
  EXPECT_THROW(hz::data::SyntheticLoader("kv", tok, 512, 0, 1), hz::ValueError);
}

}  // namespace
