// Horizon: the needle grid. For every task, length and depth, `samples` examples (data/needles.h)
// are answered by greedy decoding with the KV cache (eval/generate.h) and scored by exact
// containment of the expected values (RULER's string_match_all). Example s of cell
// (task t, length L, depth index d) comes from Generator(seed + 104729, stream =
// t 10^9 + L 10^4 + d 10^2 + s), so cells are reproducible and independent of each other. The generation budget per example is the canonical answer's
// token count + 4, reserved inside the length, so prompt + answer never exceed it.
#pragma once
#include "core/file.h"
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "eval/options.h"
#include "eval/retrieval.h"
#include "nn/transformer.h"

namespace hz::eval {

struct NeedleCell {
  std::string task;
  int64_t length = 0;
  double depth = 0;
  int64_t samples = 0;
  int64_t correct = 0;    // every expected value contained
  double score = 0;       // mean share of expected values contained
};

struct NeedleSample {     // the first example of each cell, for reading what the model said
  std::string task;
  int64_t length = 0, prompt_tokens = 0;
  double depth = 0;
  std::vector<std::string> answers;
  std::string output;
};

struct NeedleResult {     // every example, with eval.needle_per_example (needles_examples.jsonl)
  std::string task;
  int64_t length = 0, sample = 0;
  double depth = 0;
  std::vector<std::string> answers;
  std::string output;
  std::vector<int32_t> output_tokens;  // what the model generated (output is their decoding)
  double score = 0;       // share of the answers contained; correct when 1
};

struct NeedleReport {
  std::vector<NeedleCell> cells;
  std::vector<NeedleSample> samples;
  std::vector<NeedleResult> results;  // empty unless o.needles.per_example
  std::vector<std::string> skipped;  // (task, length) pairs too short for the task, with why
  // With o.needles.retrieval_heads: every (task, length)'s heads (eval/retrieval.h), step 0
  std::vector<RetrievalHead> retrieval;
};

// One example of the grid as horizon eval answers it: its cell, its index there, and the decoding
// budget (the canonical answer's token count + 4).
struct NeedleItem {
  std::string task;        // the current name (an earlier name given reports under it)
  int64_t length = 0, sample = 0;
  double depth = 0;
  data::NeedleExample example;
  int64_t max_new_tokens = 0;
};

// The grid's examples in evaluation order (task, length, depth, sample), one cell at a time: `cell`
// gets each cell's examples. A (task, length) pair whose prompt cannot fit is appended to `skipped`
// (with why) and its depths passed over. evaluate_needles answers exactly these examples, and
// needle_lm_eval_files (eval/lm_eval_export.h) writes them for lm-eval-harness.
void for_each_needle_cell(const data::Tokenizer& tok, const EvalOptions& o,
                          const std::function<void(const std::vector<NeedleItem>&)>& cell,
                          std::vector<std::string>& skipped);

NeedleReport evaluate_needles(nn::Transformer& m, const EvalOptions& o);

// Effective length (NoLiMa's definition): the longest evaluated length up to which every length's
// accuracy keeps at least 85% of the model's own accuracy at its shortest length; 0 when that
// shortest accuracy is 0 or a length falls short of the bound. accuracy_by_length: length -> accuracy
// (all values found), averaged over depths.
constexpr double kEffectiveShare = 0.85;
int64_t effective_length(const std::map<int64_t, double>& accuracy_by_length);
// Per task, from the cells (correct / samples pooled over depths).
std::map<std::string, int64_t> effective_lengths(const NeedleReport& r);

std::string needle_table(const NeedleReport& r);
// needles.csv, needles.json (+ needles_examples.jsonl with per-example results); none without cells
FileSet needle_files(const NeedleReport& r);
void write_needles(const NeedleReport& r, const std::string& dir);

}  // namespace hz::eval
