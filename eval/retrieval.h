// Horizon: the retrieval-head probe (Wu et al. 2024, "Retrieval Head Mechanistically Explains
// Long-Context Factuality"). While the model produces a needle's answer, a step whose produced token
// w occurs in the needle span (data::NeedleExample::needle_spans) is a copy opportunity, and head h
// copies w there when its highest attention weight lies on an occurrence of w inside the span. A
// head's retrieval score is its copies over the opportunities, pooled over a (task, length)'s
// examples; beside it the mean attention mass on the span over every answer step. The answer is the
// model's own greedy one (the needle grid decodes, eval/needles.h), read back in one forward over
// prompt + answer, which greedy decoding with the KV cache equals.
//
// The fused op never forms the probabilities: ProbeRoute attends through it and recomputes, in
// float64, those of the answer rows alone (attn::reference_row_probabilities, from the oracle's
// mask and coefficients with every ingredient: windows, scopes, chunks, sinks, FoX, ALiBi, logit
// transforms; DIFF V2's 2H attention heads each scored): O(rows x keys) per head, nothing T x T.
// docs/needles.md has the definition and the CSV's columns.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "attention/reference.h"
#include "core/file.h"
#include "data/needles.h"
#include "eval/options.h"
#include "nn/route.h"
#include "nn/transformer.h"

namespace hz::eval {

// What a probe is handed per layer, in the forward's order: the layer's index, its op config and
// the probabilities of the probed rows (B = 1).
using ProbeSink = std::function<void(size_t layer, const attn::AttnConfig& cfg, const attn::RowProbabilities& p)>;

// A route (nn/route.h) over the call's own rows: the fused op's output, and the probabilities of
// `rows` handed to the sink. Every layer attends through it, so its calls count the layers.
class ProbeRoute final : public nn::AttentionRoute {
 public:
  ProbeRoute(std::vector<int64_t> rows, ProbeSink sink);
  std::string name() const override { return "the retrieval-head probe"; }
  ag::Variable attend(const ag::Variable& q, const ag::Variable& k, const ag::Variable& v, const attn::AttnConfig& cfg,
                      const attn::AttnTerms& terms) override;
  size_t calls() const { return calls_; }

 private:
  std::vector<int64_t> rows_;
  ProbeSink sink_;
  size_t calls_ = 0;
};

// One forward of m over `tokens` (one sequence, no gradients) as a generation of capacity T reads it
// (eval/generate.h): the inference options applied for T, every length-dependent choice resolved for
// T. The sink gets each layer's probabilities of `rows`. LaMPE is refused (its layers attend
// without a route).
void probe_rows(nn::Transformer& m, const std::vector<int32_t>& tokens, const std::vector<int64_t>& rows, int64_t T,
                int64_t train_len, const InferenceOptions& inference, const ProbeSink& sink);

// One (layer, attention head)'s tally over a (task, length)'s examples.
struct RetrievalHead {
  int64_t step = 0;          // the checkpoint's training step (set by the caller that knows it)
  std::string task;
  int64_t length = 0;
  int64_t layer = 0;
  std::string layer_kind;    // global (every head sees the whole sequence) | windowed (none does) | mixed
  int64_t head = 0;          // the op's query head: DIFF V2's layers have 2 n_heads
  int64_t window = 0;        // the head's reach (attn::head_reach: window, scope or chunk); 0 = unbounded
  int64_t copies = 0, opportunities = 0;
  double mass_sum = 0;       // attention mass on the needle span, summed over answer steps
  int64_t steps = 0;         // answer steps
  double score() const { return opportunities ? static_cast<double>(copies) / static_cast<double>(opportunities) : 0.0; }
  double needle_mass() const { return steps ? mass_sum / static_cast<double>(steps) : 0.0; }
};

// "global" | "windowed" | "mixed" from the heads' reaches.
std::string layer_kind(const attn::AttnConfig& cfg, int64_t heads);

// Adds one layer's answer steps to its heads' tallies (p.H of them at `heads`): row r of p produces
// produced[r]; keys are `tokens`; spans the needle span. A step is an opportunity when produced[r]
// is a token of the span; a head copies when its largest weight (the first, in a tie) falls on a
// span position holding produced[r].
void tally_retrieval(const attn::RowProbabilities& p, const std::vector<int32_t>& tokens,
                     const std::vector<int32_t>& produced, const std::vector<std::pair<int64_t, int64_t>>& spans,
                     RetrievalHead* heads);

// One forward over `seq` at capacity T, its `rows` probed (row r produces produced[r]) and tallied
// against the needle `spans` into `heads` (layer-major, every layer's attention heads; filled with
// task, length, layer and head on first use).
void probe_answer_rows(nn::Transformer& m, const std::string& task, int64_t length, const std::vector<int32_t>& seq,
                       const std::vector<int64_t>& rows, const std::vector<int32_t>& produced,
                       const std::vector<std::pair<int64_t, int64_t>>& spans, int64_t T, int64_t train_len,
                       const InferenceOptions& inference, std::vector<RetrievalHead>& heads);

// One needle example answered with `answer` (the generated tokens): one forward over prompt +
// answer (but its last token) at capacity T, the rows that produce the answer probed (above).
void probe_needle_example(nn::Transformer& m, const std::string& task, int64_t length, const data::NeedleExample& ex,
                          const std::vector<int32_t>& answer, int64_t T, int64_t train_len,
                          const InferenceOptions& inference, std::vector<RetrievalHead>& heads);

// The heads with the highest scores (ties: the larger needle mass), `top` of them per (step, task, length).
std::string retrieval_table(const std::vector<RetrievalHead>& heads, size_t top = 10);
// retrieval_heads.csv (step, task, length, layer, layer_kind, head, window, score, needle_mass,
// opportunities); none without heads.
FileSet retrieval_files(const std::vector<RetrievalHead>& heads);

}  // namespace hz::eval
