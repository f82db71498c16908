// Horizon: extrapolation evaluation. Held-out loss and perplexity at a list of context lengths,
// the loss of the last 256 positions at each length (the SCOPE paper), and the mean NLL by token
// position at the longest length (the SWAN paper, Fig. 1). Inference-time options (eval/inference.h)
// are applied per length and restored afterwards. Two of them can be fitted: the DroPE
// temperature c (the DroPE paper) per length, and SWAN's row-scaling a (the SWAN paper) per length and per
// 128-token window.
#pragma once
#include "core/file.h"
#include <map>
#include <string>
#include <vector>

#include "data/loader.h"
#include "eval/options.h"
#include "eval/retrieval.h"
#include "nn/transformer.h"

namespace hz::data {
class Shard;
}

namespace hz::eval {

struct LengthResult {
  int64_t length = 0;
  double loss = 0, ppl = 0;
  double last256_loss = 0;
  int64_t tokens = 0;       // scored tokens
  double drope_c = 0;       // the temperature c used (fitted when fit_drope_c is given)
  double swan_a = 0;        // the SWAN a used (fitted when fit_swan_a is given; 0 = off)
};

// SWAN's a fitted per window: the candidate with the lowest mean NLL over positions
// [begin, end) of length `length`, next to the NLL without row scaling.
struct SwanWindowFit {
  int64_t length = 0, begin = 0, end = 0;
  double best_a = 0, nll_best = 0, nll_off = 0;
};

struct PasskeyCell {
  int64_t length = 0;
  double depth = 0;
  int64_t examples = 0, correct = 0;   // correct: every answer digit is the model's argmax
  double digit_accuracy = 0;           // share of answer digits predicted
};

struct EvalReport {
  std::vector<LengthResult> lengths;
  std::vector<SwanWindowFit> swan_fit;  // when fit_swan_a is given
  std::vector<PasskeyCell> passkey;     // when passkey_examples > 0
  // with needles.retrieval_heads and passkey_examples > 0: the retrieval heads of the passkey grid (task
  // passkey_grid, one set per length, step 0), scored at its teacher-forced answer rows
  std::vector<RetrievalHead> passkey_retrieval;
  int64_t nll_length = 0;
  std::vector<double> nll_by_position;  // mean NLL at each position of the longest length
};

// Evaluate `m` on the validation shard with the options (inference options per length).
EvalReport evaluate(nn::Transformer& m, const data::Shard& val, const EvalOptions& o, bool with_nll_by_position = true);

// A model's output that is not a number is no result: refuses `value` (a loss, a mean NLL, a logit)
// when it is not finite with a ValueError naming the model's file and what was measured. horizon eval,
// score and generate refuse through this one check (a NaN would otherwise print as a result: a loss
// of -nan, or NUL bytes for the argmax of NaN logits).
void require_finite(double value, const std::string& model, const std::string& what);

// Mean loss on one set of batches at length L (no inference options). For training-time checks.
double mean_loss(const nn::Transformer& m, const data::Shard& val, int64_t L, int64_t batch, int64_t max_batches,
                 int64_t train_len, const attn::DocumentOptions& docs = {});

// Passkey retrieval (docs/methods.md, needles): for each length and depth, examples from
// data::make_passkey scored teacher-forced: an example counts when the argmax at every answer
// position is the answer digit. Lengths too short to hold the needle and the question are left
// out. (eval/needles.h scores generated answers in RULER's formats.)
// With o.needles.retrieval_heads and `heads`, every attention head is also scored as a retrieval head at
// the answer rows, the produced token being the row's argmax (eval/retrieval.h), into *heads.
std::vector<PasskeyCell> evaluate_passkey(nn::Transformer& m, const EvalOptions& o,
                                          std::vector<RetrievalHead>* heads = nullptr);

std::string report_table(const EvalReport& r, int64_t train_len);
// eval.json, eval.csv, nll_by_position.csv (+ passkey.csv, swan_fit.csv when present)
// The report's files (eval.csv, eval.json, passkey.csv, swan_fit.csv, nll_by_position.csv) as one
// result set (core/file.h); write_report writes them so.
// effective: the needle tasks' effective lengths (eval/needles.h), written into eval.json when given.
FileSet report_files(const EvalReport& r, int64_t train_len, const std::map<std::string, int64_t>& effective = {});
void write_report(const EvalReport& r, const std::string& dir, int64_t train_len);
// Every file an evaluation of a run may write into its directory (the report's, eval_recipe.yaml,
// the needles', the retrieval heads', the probes'): one evaluation's set replaces the previous one's
// whole, those it does not produce removed (write_files_atomic's `replaces`).
const std::vector<std::string>& result_file_names();

}  // namespace hz::eval
