// Horizon data: needle-in-a-haystack tasks in RULER's formats (Hsieh et al. 2024, the NIAH
// family) and the passkey task (Mohtashami & Jaggi 2023), with the King James Bible as the
// haystack and lengths counted in tokens of any Tokenizer. docs/needles.md shows every format.
//
// Tasks (keys are adjective-noun words such as "quiet-harbor"; values 7-digit numbers or words), named
// as lm-eval-harness names RULER's (the haystack is the Bible where RULER's is essays; the earlier
// names niah_single_number and niah_multikey are still accepted):
//   niah_single_2       one needle "One of the special magic numbers for KEY is: VALUE.", asked for
//   niah_single_word    the same with a word value ("... special magic words for KEY is: VALUE."; no
//                       RULER counterpart)
//   niah_multikey_1     4 needles with different keys (3 distractors), one key asked
//   niah_multivalue     4 needles with the same key and different values, all values asked
//   niah_multiquery     4 needles with different keys, all 4 keys asked (all values answered)
//   passkey             "The pass key is VALUE. Remember it. VALUE is the pass key.", asked for
// Formats: "ruler" uses RULER's instruction, needle sentence, question and answer prefix; "short"
// drops the instruction and the question: needles read "The magic number for KEY is VALUE." and
// the prompt ends with the answer prefix "The magic number for KEY is" (for byte-level models with
// short training lengths).
//
// The haystack is consecutive Bible verses (one per line) from a seeded start; needles are
// whole lines between verses. The asked needle (for multi-query: the first asked key's needle;
// for multi-value: the first value's needle) sits at the verse boundary nearest to fraction
// `depth` of the haystack; the others at seeded random boundaries. The number of verses is the
// largest whose prompt, tokenized as one text, leaves `answer_budget` tokens free in `length`.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "data/tokenizer.h"

namespace hz::data {

enum class NeedleTask : uint8_t { SingleNumber, SingleWord, MultiKey, MultiValue, MultiQuery, Passkey, Count };
enum class NeedleFormat : uint8_t { Ruler, Short, Count };

const std::vector<std::string>& needle_task_names();  // in NeedleTask order
NeedleTask parse_needle_task(const std::string& s);    // throws ValueError listing the names
const char* name(NeedleTask t);
const char* name(NeedleFormat f);                        // ruler | short
NeedleFormat parse_needle_format(const std::string& s);  // throws ValueError listing the names

struct NeedleExample {
  NeedleTask task = NeedleTask::SingleNumber;
  std::string prompt_text;             // ends with the answer prefix (no trailing space)
  std::vector<int32_t> prompt;         // tokenizer.encode(prompt_text)
  std::vector<std::string> answers;    // what the continuation must contain (all of them)
  std::string answer_text;             // canonical continuation: " V." or " V1, V2, V3, V4."
  std::vector<int32_t> answer;         // tokenizer.encode(answer_text)
  int64_t haystack_lines = 0;          // verses used
  double depth = 0;                    // requested depth of the asked needle
  int64_t needle_line = 0;             // the asked needle's line index in the context
  // The token ranges [begin, end) of prompt that hold the needles with an asked value (the asked
  // one; every value's for multi-value, every asked key's for multi-query), in prompt order: the
  // tokens of prompt_text up to the sentence's end less those before it (exact for the byte
  // tokenizer and for tokenizers that start a token after a newline). The retrieval-head probe's
  // needle span (eval/retrieval.h).
  std::vector<std::pair<int64_t, int64_t>> needle_spans;
};

// The Bible's verses in canonical order (load_bible_kjv() split into lines), loaded once.
const std::vector<std::string>& bible_verses();

// One example whose prompt has at most length - answer_budget tokens (as many verses as fit).
// Throws ValueError when even an empty haystack does not fit (the message gives the minimum).
NeedleExample make_needle(const Tokenizer& tok, const std::vector<std::string>& verses, NeedleTask task,
                          NeedleFormat fmt, Generator& g, int64_t length, double depth, int64_t answer_budget);

// Exact containment (RULER's string_match_all): the share of `answers` found in `text`,
// compared case-insensitively; an answer found twice counts once, an empty answer list scores 1.
double needle_score(const std::string& text, const std::vector<std::string>& answers);

// A training example of exactly `length` tokens for fine-tuning: a task drawn among those that fit
// the length (seeded order, first that fits), a uniform depth, the prompt and the canonical
// answer, preceded by the tokens of the Bible text before the haystack when the prompt is
// shorter (a document boundary), with weights on the answer tokens (data/synthetic.h's
// alignment: weights[i] weighs the prediction of tokens[i + 1]).
struct NeedleTrainingExample {
  std::vector<int32_t> tokens;
  std::vector<float> weights;
  int64_t answer_begin = 0;  // tokens[answer_begin, length) encode answer_text
  std::string answer_text;
};
NeedleTrainingExample make_needle_training(const Tokenizer& tok, const std::vector<std::string>& verses,
                                           NeedleFormat fmt, Generator& g, int64_t length);

}  // namespace hz::data
