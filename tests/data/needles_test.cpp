// data/needles: RULER needle formats on the Bible haystack, token-exact lengths, depths, the
// training examples and the containment scorer's edge cases.
#include <gtest/gtest.h>

#include <algorithm>

#include "data/needles.h"

using namespace hz;
using namespace hz::data;

namespace {

int count(const std::string& s, const std::string& sub) {
  int n = 0;
  for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + 1)) ++n;
  return n;
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  size_t a = 0;
  while (a <= s.size()) {
    size_t b = s.find('\n', a);
    if (b == std::string::npos) b = s.size();
    out.push_back(s.substr(a, b - a));
    a = b + 1;
  }
  return out;
}

const ByteTokenizer kTok;

}  // namespace

TEST(Needles, BibleVersesLoad) {
  const auto& v = bible_verses();
  ASSERT_GT(v.size(), 30000u);
  EXPECT_EQ(v[0].rfind("In the beginning God created", 0), 0u);
}

TEST(Needles, SingleNumberRulerFormatAndLength) {
  Generator g(1, 0);
  const NeedleExample ex = make_needle(kTok, bible_verses(), NeedleTask::SingleNumber, NeedleFormat::Ruler, g, 1024, 0.5, 12);
  ASSERT_EQ(ex.answers.size(), 1u);
  EXPECT_EQ(ex.answers[0].size(), 7u);
  EXPECT_EQ(ex.prompt_text.rfind("A special magic number is hidden within the following text. Make sure to memorize it. "
                                 "I will quiz you about the number afterwards.\n", 0), 0u);
  EXPECT_EQ(count(ex.prompt_text, "One of the special magic numbers for "), 1);
  EXPECT_NE(ex.prompt_text.find(" is: " + ex.answers[0] + ".\n"), std::string::npos);
  EXPECT_NE(ex.prompt_text.find("\nWhat is the special magic number for "), std::string::npos);
  const std::string tail = " mentioned in the provided text is";
  EXPECT_EQ(ex.prompt_text.substr(ex.prompt_text.size() - tail.size()), tail);
  EXPECT_EQ(ex.answer_text, " " + ex.answers[0] + ".");
  // token-exact: fits length - budget, and is the longest such haystack (one more verse would not fit)
  EXPECT_LE(static_cast<int64_t>(ex.prompt.size()), 1024 - 12);
  EXPECT_GT(static_cast<int64_t>(ex.prompt.size()) + 200, 1024 - 12);  // a verse is < 200 bytes
  EXPECT_GT(ex.haystack_lines, 3);
  // the needle line sits at half of the haystack lines
  EXPECT_NEAR(static_cast<double>(ex.needle_line), 0.5 * ex.haystack_lines, 1.0);
}

TEST(Needles, DepthZeroAndOne) {
  for (double depth : {0.0, 1.0}) {
    Generator g(2, 0);
    const NeedleExample ex = make_needle(kTok, bible_verses(), NeedleTask::Passkey, NeedleFormat::Ruler, g, 600, depth, 10);
    const auto ls = lines_of(ex.prompt_text);
    // line 0: instruction; the needle is the first context line (depth 0) or the last (depth 1)
    const std::string needle = "The pass key is " + ex.answers[0] + ". Remember it. " + ex.answers[0] + " is the pass key.";
    if (depth == 0) EXPECT_EQ(ls[1], needle);
    else EXPECT_EQ(ls[ls.size() - 2], needle);
    EXPECT_EQ(ls.back(), "What is the pass key? The pass key is");
  }
}

TEST(Needles, MultiKeyMultiValueMultiQuery) {
  Generator g(3, 0);
  const auto mk = make_needle(kTok, bible_verses(), NeedleTask::MultiKey, NeedleFormat::Ruler, g, 2048, 0.3, 12);
  EXPECT_EQ(count(mk.prompt_text, "One of the special magic numbers for "), 4);  // 3 distractors
  ASSERT_EQ(mk.answers.size(), 1u);
  Generator g2(3, 1);
  const auto mv = make_needle(kTok, bible_verses(), NeedleTask::MultiValue, NeedleFormat::Ruler, g2, 2048, 0.3, 40);
  EXPECT_EQ(count(mv.prompt_text, "One of the special magic numbers for "), 4);
  ASSERT_EQ(mv.answers.size(), 4u);
  EXPECT_EQ(mv.prompt_text.rfind("Some special magic numbers are hidden within the following text.", 0), 0u);
  EXPECT_NE(mv.prompt_text.find("What are all the special magic numbers for "), std::string::npos);
  EXPECT_EQ(mv.answer_text, " " + mv.answers[0] + ", " + mv.answers[1] + ", " + mv.answers[2] + ", " + mv.answers[3] + ".");
  Generator g3(3, 2);
  const auto mq = make_needle(kTok, bible_verses(), NeedleTask::MultiQuery, NeedleFormat::Ruler, g3, 2048, 0.3, 40);
  ASSERT_EQ(mq.answers.size(), 4u);
  const auto mq_lines = lines_of(mq.prompt_text);
  EXPECT_EQ(count(mq_lines.back(), ", and "), 2);  // "k1, k2, k3, and k4" in the question and the prefix
  EXPECT_NE(mq_lines.back().find("mentioned in the provided text are"), std::string::npos);
  for (const auto& a : mq.answers) EXPECT_EQ(count(mq.prompt_text, " is: " + a + "."), 1);
  Generator g4(3, 3);
  const auto sw = make_needle(kTok, bible_verses(), NeedleTask::SingleWord, NeedleFormat::Ruler, g4, 1024, 0.3, 20);
  ASSERT_EQ(sw.answers.size(), 1u);
  EXPECT_NE(sw.answers[0].find('-'), std::string::npos);  // adjective-noun
  EXPECT_NE(sw.prompt_text.find("One of the special magic words for "), std::string::npos);
}

TEST(Needles, ShortFormatIsShorterAndTooShortRefused) {
  Generator g(4, 0), h(4, 0);
  // RULER's wording alone is longer than 256 bytes: refused, with the minimum
  EXPECT_THROW(make_needle(kTok, bible_verses(), NeedleTask::SingleNumber, NeedleFormat::Ruler, g, 256, 0.5, 0), ValueError);
  const auto s = make_needle(kTok, bible_verses(), NeedleTask::SingleNumber, NeedleFormat::Short, h, 512, 0.5, 12);
  EXPECT_GT(s.haystack_lines, 0);
  EXPECT_EQ(s.prompt_text.find("A special magic"), std::string::npos);  // no instruction
  EXPECT_EQ(count(s.prompt_text, "The magic number for "), 2);            // the needle and the prefix
  const std::string prefix = lines_of(s.prompt_text).back();
  EXPECT_EQ(prefix.rfind("The magic number for ", 0), 0u);
  EXPECT_EQ(prefix.substr(prefix.size() - 3), " is");
  EXPECT_NE(s.prompt_text.find(prefix + " " + s.answers[0] + ".\n"), std::string::npos);
  Generator k(4, 1);
  try {
    make_needle(kTok, bible_verses(), NeedleTask::MultiQuery, NeedleFormat::Ruler, k, 200, 0.5, 10);
    FAIL() << "a 200-token multi-query example was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("use lengths >="), std::string::npos);
  }
  EXPECT_THROW(parse_needle_task("niah_single_uuid"), ValueError);
  EXPECT_EQ(parse_needle_task("niah_multivalue"), NeedleTask::MultiValue);
}

TEST(Needles, SeededAndDistinct) {
  Generator a(5, 7), b(5, 7), c(5, 8);
  const auto x = make_needle(kTok, bible_verses(), NeedleTask::MultiKey, NeedleFormat::Short, a, 512, 0.5, 8);
  const auto y = make_needle(kTok, bible_verses(), NeedleTask::MultiKey, NeedleFormat::Short, b, 512, 0.5, 8);
  const auto z = make_needle(kTok, bible_verses(), NeedleTask::MultiKey, NeedleFormat::Short, c, 512, 0.5, 8);
  EXPECT_EQ(x.prompt, y.prompt);
  EXPECT_NE(x.prompt, z.prompt);
}

TEST(Needles, TrainingExampleExactLengthAndMask) {
  for (uint64_t k = 0; k < 12; ++k) {
    Generator g(6, k);
    const auto ex = make_needle_training(kTok, bible_verses(), NeedleFormat::Short, g, 257);
    ASSERT_EQ(ex.tokens.size(), 257u);
    ASSERT_EQ(ex.weights.size(), 257u);
    const std::vector<int32_t> ans(ex.tokens.begin() + ex.answer_begin, ex.tokens.end());
    EXPECT_EQ(kTok.decode(ans), ex.answer_text);
    for (int64_t i = 0; i < 257; ++i)
      EXPECT_EQ(ex.weights[i], (i >= ex.answer_begin - 1 && i < 256) ? 1.0f : 0.0f) << i;
  }
}

TEST(Needles, ScorerEdgeCases) {
  EXPECT_EQ(needle_score(" 1234567.", {"1234567"}), 1.0);
  EXPECT_EQ(needle_score("", {"1234567"}), 0.0);                          // nothing generated
  EXPECT_EQ(needle_score(" 123456", {"1234567"}), 0.0);                   // a prefix is not the value
  EXPECT_EQ(needle_score(" 91234567", {"1234567"}), 1.0);                 // containment, as RULER
  EXPECT_EQ(needle_score(" 1111111, 1111111", {"1111111", "2222222"}), 0.5);  // a repeat counts once
  EXPECT_EQ(needle_score(" Quiet-Harbor", {"quiet-harbor"}), 1.0);        // case-insensitive
  EXPECT_EQ(needle_score("anything", {}), 1.0);
  EXPECT_DOUBLE_EQ(needle_score("a 3 b 1", {"1", "2", "3"}), 2.0 / 3.0);
}
