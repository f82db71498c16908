// Horizon: the needle grid. For every task, length and depth, `samples` examples (data/needles.h)
// are answered by greedy decoding with the KV cache (eval/generate.h) and scored by exact
// containment of the expected values (RULER's string_match_all). Example s of cell
// (task t, length L, depth index d) comes from Generator(seed + 104729, stream =
// t 10^9 + L 10^4 + d 10^2 + s), so cells are reproducible and independent of each other. The generation budget per example is the canonical answer's
// token count + 4, reserved inside the length, so prompt + answer never exceed it.
#pragma once
#include "core/file.h"
#include <map>
#include <string>
#include <vector>

#include "eval/options.h"
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

struct NeedleReport {
  std::vector<NeedleCell> cells;
  std::vector<NeedleSample> samples;
  std::vector<std::string> skipped;  // (task, length) pairs too short for the task, with why
};

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
FileSet needle_files(const NeedleReport& r);  // needles.csv, needles.json; none without cells
void write_needles(const NeedleReport& r, const std::string& dir);

}  // namespace hz::eval
