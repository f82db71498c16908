// Horizon: extrapolation evaluation. Held-out loss and perplexity at a list of context lengths,
// the loss of the last 256 positions at each length (seed 000), and the mean NLL by token
// position at the longest length (seed 004, Fig. 1). Inference-time options (RoPE scaling, SWAN
// row scaling, DroPE temperature with optional fitting of c, LaMPE) are applied per length to the
// layers' specs and restored afterwards.
#pragma once
#include <string>
#include <vector>

#include "nn/transformer.h"
#include "train/recipe.h"

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
};

struct PasskeyCell {
  int64_t length = 0;
  double depth = 0;
  int64_t examples = 0, correct = 0;   // correct: every answer digit is the model's argmax
  double digit_accuracy = 0;           // share of answer digits predicted
};

struct EvalReport {
  std::vector<LengthResult> lengths;
  std::vector<PasskeyCell> passkey;    // when eval.passkey_examples > 0
  int64_t nll_length = 0;
  std::vector<double> nll_by_position;  // mean NLL at each position of the longest length
};

// Evaluate `m` (trained at train_T) on the validation shard with recipe.eval's options.
EvalReport evaluate(nn::Transformer& m, const data::Shard& val, const train::Recipe& r,
                    bool with_nll_by_position = true);

// Mean loss on one set of batches at length L (no inference options). For training-time checks.
double mean_loss(const nn::Transformer& m, const data::Shard& val, int64_t L, int64_t batch, int64_t max_batches,
                 int64_t train_T);

// Passkey retrieval (SPEC.md needle-in-a-haystack): for each length and depth, examples from
// data::make_passkey scored teacher-forced: an example counts when the argmax at every answer
// position is the answer digit. Inference options as in evaluate(). Lengths too short to hold
// the needle and the question (108 byte tokens) are left out.
std::vector<PasskeyCell> evaluate_passkey(nn::Transformer& m, const train::Recipe& r);

std::string report_table(const EvalReport& r, int64_t train_T);
void write_report(const EvalReport& r, const std::string& dir, int64_t train_T);  // eval.json, eval.csv, nll_by_position.csv

}  // namespace hz::eval
