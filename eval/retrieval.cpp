#include "eval/retrieval.h"

#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "core/error.h"
#include "eval/inference.h"

namespace hz::eval {

ProbeRoute::ProbeRoute(std::vector<int64_t> rows, ProbeSink sink) : rows_(std::move(rows)), sink_(std::move(sink)) {}

ag::Variable ProbeRoute::attend(const ag::Variable& q, const ag::Variable& k, const ag::Variable& v,
                                const attn::AttnConfig& cfg, const attn::AttnTerms& terms) {
  HZ_CHECK(q.size(0) == 1, ShapeError, "retrieval probe: one sequence per forward, got ", q.size(0));
  ag::Variable out = attn::fused_attention(q, k, v, cfg, terms).out;
  sink_(calls_++, cfg, attn::reference_row_probabilities(q.value(), k.value(), cfg, terms, rows_));
  return out;
}

void probe_rows(nn::Transformer& m, const std::vector<int32_t>& tokens, const std::vector<int64_t>& rows, int64_t T,
                int64_t train_len, const InferenceOptions& inference, const ProbeSink& sink) {
  HZ_CHECK(!inference.lampe, ValueError,
           "eval.retrieval_heads: LaMPE's layers attend without the route the probe reads; evaluate the retrieval "
           "heads without eval.lampe");
  const int64_t n = static_cast<int64_t>(tokens.size());
  HZ_CHECK(n >= 1 && n <= T, ValueError, "retrieval probe: ", n, " tokens for a call of length ", T);
  for (int64_t r : rows) HZ_CHECK(r >= 0 && r < n, ValueError, "retrieval probe: row ", r, " outside the ", n, " tokens");
  ScopedInference inf(m, inference, train_len, T);
  ag::NoGradGuard no_grad;
  auto route = std::make_shared<ProbeRoute>(rows, sink);
  nn::AttnCall call;
  call.T = T;
  call.train_len = train_len;
  call.route = route;
  std::vector<double> ids(tokens.begin(), tokens.end());
  m.hidden(Tensor::from_vector(ids, {1, n}, DType::I64), Tensor(), call);
  HZ_CHECK(route->calls() == m.layers.size(), ValueError, "retrieval probe: ", route->calls(), " of the model's ",
           m.layers.size(), " layers attended through the probe");
}

std::string layer_kind(const attn::AttnConfig& cfg, int64_t heads) {
  int64_t bounded = 0;
  for (int64_t h = 0; h < heads; ++h) bounded += attn::head_reach(cfg, static_cast<size_t>(h)) > 0;
  return bounded == 0 ? "global" : bounded == heads ? "windowed" : "mixed";
}

void tally_retrieval(const attn::RowProbabilities& p, const std::vector<int32_t>& tokens,
                     const std::vector<int32_t>& produced, const std::vector<std::pair<int64_t, int64_t>>& spans,
                     RetrievalHead* heads) {
  HZ_CHECK(p.B == 1 && static_cast<int64_t>(produced.size()) == p.R && static_cast<int64_t>(tokens.size()) >= p.Tk,
           ShapeError, "retrieval tally: ", p.B, " sequences, ", p.R, " rows for ", produced.size(), " answer tokens, ",
           p.Tk, " keys for ", tokens.size(), " tokens");
  std::vector<uint8_t> in_span(p.Tk, 0);
  std::set<int32_t> span_tokens;
  for (const auto& [b, e] : spans)
    for (int64_t j = std::max<int64_t>(0, b); j < std::min(e, p.Tk); ++j) {
      in_span[j] = 1;
      span_tokens.insert(tokens[j]);
    }
  for (int64_t h = 0; h < p.H; ++h) {
    RetrievalHead& t = heads[h];
    for (int64_t r = 0; r < p.R; ++r) {
      const double* row = p.p.data() + (h * p.R + r) * p.Tk;
      int64_t best = 0;
      double mass = 0;
      for (int64_t j = 0; j < p.Tk; ++j) {
        if (row[j] > row[best]) best = j;
        if (in_span[j]) mass += row[j];
      }
      t.mass_sum += mass;
      ++t.steps;
      const int32_t w = produced[r];
      if (!span_tokens.count(w)) continue;  // not a token of the needle: no copy opportunity
      ++t.opportunities;
      t.copies += in_span[best] && tokens[best] == w;
    }
  }
}

void probe_answer_rows(nn::Transformer& m, const std::string& task, int64_t length, const std::vector<int32_t>& seq,
                       const std::vector<int64_t>& rows, const std::vector<int32_t>& produced,
                       const std::vector<std::pair<int64_t, int64_t>>& spans, int64_t T, int64_t train_len,
                       const InferenceOptions& inference, std::vector<RetrievalHead>& heads) {
  probe_rows(m, seq, rows, T, train_len, inference, [&](size_t layer, const attn::AttnConfig& cfg, const attn::RowProbabilities& p) {
    // the layer's heads, in the layer-major order every example of the pair shares
    size_t first = 0;
    while (first < heads.size() && heads[first].layer != static_cast<int64_t>(layer)) ++first;
    if (first == heads.size()) {
      const std::string kind = layer_kind(cfg, p.H);
      for (int64_t h = 0; h < p.H; ++h) {
        RetrievalHead r;
        r.task = task;
        r.length = length;
        r.layer = static_cast<int64_t>(layer);
        r.layer_kind = kind;
        r.head = h;
        r.window = attn::head_reach(cfg, static_cast<size_t>(h));
        heads.push_back(r);
      }
    }
    tally_retrieval(p, seq, produced, spans, heads.data() + first);
  });
}

void probe_needle_example(nn::Transformer& m, const std::string& task, int64_t length, const data::NeedleExample& ex,
                          const std::vector<int32_t>& answer, int64_t T, int64_t train_len,
                          const InferenceOptions& inference, std::vector<RetrievalHead>& heads) {
  if (answer.empty()) return;
  const int64_t P = static_cast<int64_t>(ex.prompt.size());
  // the rows that produce the answer: the prompt's last and every answer token's but the last
  std::vector<int32_t> seq = ex.prompt;
  seq.insert(seq.end(), answer.begin(), answer.end() - 1);
  std::vector<int64_t> rows;
  for (int64_t s = 0; s < static_cast<int64_t>(answer.size()); ++s) rows.push_back(P - 1 + s);
  probe_answer_rows(m, task, length, seq, rows, answer, ex.needle_spans, T, train_len, inference, heads);
}

std::string retrieval_table(const std::vector<RetrievalHead>& heads, size_t top) {
  if (heads.empty()) return "";
  std::map<std::tuple<int64_t, std::string, int64_t>, std::vector<const RetrievalHead*>> groups;
  for (const auto& h : heads) groups[{h.step, h.task, h.length}].push_back(&h);
  std::ostringstream os;
  os << "\nretrieval heads (Wu et al. 2024: copies of needle tokens / copy opportunities at the greedy answer's steps;"
        " needle mass: mean attention on the needle span)\n";
  for (auto& [key, v] : groups) {
    std::stable_sort(v.begin(), v.end(), [](const RetrievalHead* a, const RetrievalHead* b) {
      return a->score() != b->score() ? a->score() > b->score() : a->needle_mass() > b->needle_mass();
    });
    os << fmt::format("step {} {} at length {} ({} opportunities per head)\n", std::get<0>(key), std::get<1>(key),
                      std::get<2>(key), v.front()->opportunities);
    os << fmt::format("  {:>5} {:<9} {:>5} {:>7} {:>7} {:>11}\n", "layer", "kind", "head", "window", "score", "needle_mass");
    for (size_t i = 0; i < std::min(top, v.size()); ++i)
      os << fmt::format("  {:>5} {:<9} {:>5} {:>7} {:>7.3f} {:>11.4f}\n", v[i]->layer, v[i]->layer_kind, v[i]->head,
                        v[i]->window, v[i]->score(), v[i]->needle_mass());
  }
  return os.str();
}

FileSet retrieval_files(const std::vector<RetrievalHead>& heads) {
  if (heads.empty()) return {};
  std::ostringstream csv;
  csv << "step,task,length,layer,layer_kind,head,window,score,needle_mass,opportunities\n";
  for (const auto& h : heads)
    csv << fmt::format("{},{},{},{},{},{},{},{:.6f},{:.6f},{}\n", h.step, h.task, h.length, h.layer, h.layer_kind,
                       h.head, h.window, h.score(), h.needle_mass(), h.opportunities);
  return {{"retrieval_heads.csv", csv.str()}};
}

}  // namespace hz::eval
