// Horizon data: synthetic long-context retrieval tasks (docs/methods.md, needles).
//
// An example is exactly `length` tokens of filler text (a fixed public-domain-style set of
// sentences, repeated; to fit, only the first sentence is cut, from the left) with needle
// sentences inserted at sentence boundaries, ending with a question whose answer is the
// example's last tokens:
//
//   passkey: "... The pass key is 4830291. Remember it. 4830291 is the pass key. ... "
//            + "What is the pass key? The pass key is 4830291"
//   kv:      n_keys needles "The value of key QXRB is 5120447. " spread over the filler (needle i
//            at a random point of the i-th of n_keys equal stretches), then
//            "What is the value of key QXRB? The value of key QXRB is 5120447" for one key.
//
// Alignment of the loss mask (read this before using `weights`): weights has one entry per token
// and weights[i] is the weight of predicting tokens[i + 1] from tokens[0..i] — a next-token target
// mask aligned with tokens[1:]. weights[i] = 1 exactly when tokens[i + 1] is an answer token, i.e.
// for i in [answer_begin - 1, length - 2]; every other entry (including the last) is 0. So with
// inputs = tokens[0, T) and targets = tokens[1, T + 1), the mask for targets is weights[0, T).
// answer_begin is the index in `tokens` of the first answer token; decode(tokens[answer_begin:])
// == answer. No BOS/EOS is added.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "data/loader.h"
#include "data/tokenizer.h"

namespace hz::data {

struct SyntheticExample {
  std::vector<int32_t> tokens;  // exactly `length` ids
  std::vector<float> weights;   // same length; weights[i] weighs the prediction of tokens[i + 1]
  int64_t answer_begin = 0;     // tokens[answer_begin, length) encode `answer`
  std::string answer;           // the 7 digits
  // the inserted needles' token ranges [begin, end), in order (the retrieval-head probe's spans)
  std::vector<std::pair<int64_t, int64_t>> needle_spans;
};

// Passkey retrieval: 7 random digits (first one non-zero) drawn from g; the needle sits at the
// sentence boundary of the filler nearest to fraction `depth` in [0, 1] of the filler's tokens.
// Throws hz::ValueError when `length` cannot hold the needle and the question (the message gives
// the minimum) or depth is outside [0, 1].
SyntheticExample make_passkey(const Tokenizer& tok, Generator& g, int64_t length, double depth);

// Multi-key retrieval: n_keys distinct random 4-letter keys (A-Z) with 7-digit values, one key
// asked (uniform). Throws hz::ValueError when `length` is too short or n_keys < 1.
SyntheticExample make_kv_retrieval(const Tokenizer& tok, Generator& g, int64_t length, int n_keys = 4);

// Names SyntheticLoader accepts.
const std::vector<std::string>& synthetic_task_names();

// Example k of the stream comes from hz::Generator(seed, /*stream=*/k) (for "passkey" the depth is
// its first draw, uniform in [0, 1); "niah" / "niah_short" draw a RULER needle task, a depth and a
// Bible haystack, data/needles.h, in the ruler / short wording), generated with length seq_len + 1: Batch.tokens = ex[0, T),
// targets = ex[1, T + 1), weights = ex.weights[0, T).
// Data parallel: the stream is dealt out in batches, rank d of `world` taking global batches d,
// d + world, d + 2 world, ...: its i-th example is k = (i / B world + d) B + i mod B, so a step
// of `world` ranks reads the examples one rank with batch B x world would. The cursor is
// {epoch 0, index = the examples this rank has read}.
class SyntheticLoader {
 public:
  // Throws hz::ValueError for an unknown task (listing the known ones), bad sizes, a rank outside
  // [0, world), or a seq_len too short for the task.
  SyntheticLoader(std::string task, std::shared_ptr<const Tokenizer> tok, int64_t seq_len, int64_t batch,
                  uint64_t seed, int64_t rank = 0, int64_t world = 1);

  Batch next();
  LoaderCursor cursor() const { return {0, index_}; }
  void restore(const LoaderCursor& c);  // epoch must be 0, index >= 0

  SyntheticExample example(int64_t k) const;  // example k (length seq_len + 1)
  const std::string& task() const { return task_; }

 private:
  std::string task_;
  std::shared_ptr<const Tokenizer> tok_;
  int64_t T_, B_;
  uint64_t seed_;
  int64_t rank_, world_;
  int64_t index_ = 0;
};

}  // namespace hz::data
