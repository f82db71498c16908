// eval/retrieval: the probe's probabilities of chosen rows equal the float64 reference attention's
// rows over layer kinds with every ingredient (windows, sink tokens, learned sinks, ALiBi, FoX,
// LogN, scale-invariant logits, chunks, SCOPE scopes, DIFF V2's 2H heads), their weighted values
// the fused op's output rows; the retrieval count on a handmade case; the needle grid's and the passkey grid's heads.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "attention/reference.h"
#include "data/synthetic.h"
#include "eval/eval.h"
#include "eval/needles.h"
#include "eval/retrieval.h"
#include "small_model.h"

using namespace hz;
using namespace hz::eval;

namespace {

// Every layer's q, k, v, config and terms as the probe saw them, and the fused op's output.
struct Seen {
  Tensor q, k, v, out;
  attn::AttnConfig cfg;
  attn::AttnTerms terms;
  attn::RowProbabilities p;
};

class RecordingRoute final : public nn::AttentionRoute {
 public:
  explicit RecordingRoute(std::vector<int64_t> rows)
      : probe_(std::move(rows), [this](size_t, const attn::AttnConfig&, const attn::RowProbabilities& p) { seen.back().p = p; }) {}
  std::string name() const override { return "recording"; }
  ag::Variable attend(const ag::Variable& q, const ag::Variable& k, const ag::Variable& v, const attn::AttnConfig& cfg,
                      const attn::AttnTerms& terms) override {
    seen.push_back({q.value(), k.value(), v.value(), Tensor(), cfg, terms, {}});
    ag::Variable o = probe_.attend(q, k, v, cfg, terms);
    seen.back().out = o.value();
    return o;
  }
  std::vector<Seen> seen;

 private:
  ProbeRoute probe_;
};

ag::Variable f64(const ag::Variable& x) { return x.defined() ? ag::Variable(x.value().to(DType::F64)) : x; }

// Every head of a grid at length 120 counted the same steps and copy opportunities (the ones counted
// independently by the test), with a score in [0, 1] and some but not all of its mass on the needle.
void expect_heads_counted(const std::vector<RetrievalHead>& heads, const std::string& task, int64_t steps,
                          int64_t opportunities) {
  for (const auto& h : heads) {
    EXPECT_EQ(h.task, task);
    EXPECT_EQ(h.length, 120);
    EXPECT_EQ(h.steps, steps);
    EXPECT_EQ(h.opportunities, opportunities);
    EXPECT_GE(h.score(), 0.0);
    EXPECT_LE(h.score(), 1.0);
    EXPECT_GT(h.needle_mass(), 0.0);
    EXPECT_LT(h.needle_mass(), 1.0);
  }
}

}  // namespace

TEST(RetrievalProbe, RowsEqualTheReferenceAndWeightTheFusedOutput) {
  nn::ModelConfig c = hzt::small_model(DType::F64);
  c.d_model = 64;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 16;  // = T: the reference with identity values returns the probabilities themselves
  c.train_len = 16;
  auto kind = [&](const std::string& n, auto f) {
    attn::AttentionSpec s;
    s.pos.rope_base = 100.0;
    f(s);
    c.kinds.push_back({n, s});
    return n;
  };
  c.kinds.clear();
  c.pattern = {
      kind("swa_sinks_alibi", [](attn::AttentionSpec& s) {
        s.pos.kind = attn::PosKind::Alibi;
        s.mask.kind = attn::MaskKind::Window;
        s.mask.window = 5;
        s.mask.sink_tokens = 2;
        s.sink = true;
      }),
      kind("fox_logn", [](attn::AttentionSpec& s) {
        s.forget = true;
        s.logit.kind = attn::LogitKind::LogN;
      }),
      kind("diff_scale_invariant_chunk", [](attn::AttentionSpec& s) {
        s.diff = true;
        s.logit.kind = attn::LogitKind::ScaleInvariant;
        s.logit.tau = 3.0;
        s.mask.chunk = 8;
      }),
      kind("scope_nope", [](attn::AttentionSpec& s) {
        s.pos.kind = attn::PosKind::None;
        s.mask.kind = attn::MaskKind::Scope;
        s.mask.scopes = {1, 3, 5, 8};
      }),
  };
  c.n_layers = 4;
  nn::Transformer m(c, 7);
  // non-zero sink logits and forget biases, so they weigh in
  for (auto& [name, v] : m.named_parameters())
    if (name.find("sink") != std::string::npos || name.find("forget_b") != std::string::npos) {
      std::vector<double> x(static_cast<size_t>(v->value().numel()));
      for (size_t i = 0; i < x.size(); ++i) x[i] = 0.3 + 0.2 * static_cast<double>(i);
      v->value().copy_(Tensor::from_vector(x, v->value().shape(), DType::F64));
    }
  const int64_t T = 16;
  std::vector<double> ids;
  for (int64_t i = 0; i < T; ++i) ids.push_back(static_cast<double>((i * 37 + 11) % 259));
  const std::vector<int64_t> rows{15, 3, 9, 0};
  auto route = std::make_shared<RecordingRoute>(rows);
  nn::AttnCall call;
  call.route = route;
  ag::NoGradGuard ng;
  m.hidden(Tensor::from_vector(ids, {1, T}, DType::I64), Tensor(), call);
  ASSERT_EQ(route->seen.size(), 4u);
  for (size_t l = 0; l < route->seen.size(); ++l) {
    const Seen& s = route->seen[l];
    const int64_t H = s.q.size(1), Hkv = s.k.size(1), D = s.q.size(3);
    EXPECT_EQ(H, l == 2 ? 8 : 4) << "DIFF V2 scores its 2H attention heads";
    ASSERT_EQ(s.p.H, H);
    ASSERT_EQ(s.p.R, 4);
    // identity values: the reference's output row i is its probability row i
    std::vector<double> eye;
    for (int64_t g = 0; g < Hkv; ++g)
      for (int64_t j = 0; j < T; ++j)
        for (int64_t d = 0; d < D; ++d) eye.push_back(j == d ? 1.0 : 0.0);
    const attn::AttnTerms t64{f64(s.terms.logn_c), f64(s.terms.sink), f64(s.terms.forget)};
    const std::vector<double> ref =
        attn::reference_attention(ag::Variable(s.q), ag::Variable(s.k), ag::Variable(Tensor::from_vector(eye, {1, Hkv, T, D}, DType::F64)),
                                  s.cfg, t64)
            .value()
            .to_vector();
    const std::vector<double> v = s.v.to_vector(), out = s.out.to_vector();
    int64_t hidden = 0;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t r = 0; r < 4; ++r) {
        const int64_t i = rows[r];
        double total = s.p.sink[h * 4 + r];
        for (int64_t j = 0; j < T; ++j) {
          const double p = s.p.p[(h * 4 + r) * T + j];
          EXPECT_NEAR(p, ref[((h * T) + i) * D + j], 1e-12) << "layer " << l << " head " << h << " row " << i << " key " << j;
          total += p;
          hidden += p == 0.0;
        }
        EXPECT_NEAR(total, 1.0, 1e-12);
        for (int64_t d = 0; d < D; ++d) {  // sum_j p_ij v_j: the fused op's output row
          double o = 0;
          for (int64_t j = 0; j < T; ++j) o += s.p.p[(h * 4 + r) * T + j] * v[((h / (H / Hkv)) * T + j) * D + d];
          EXPECT_NEAR(o, out[(h * T + i) * D + d], 1e-10) << "layer " << l << " head " << h << " row " << i;
        }
      }
    EXPECT_GT(hidden, 0) << "layer " << l << ": causal rows hide later keys";
  }
  EXPECT_GT(route->seen[0].p.sink[0], 0.0);  // the learned sink takes a share
  EXPECT_EQ(layer_kind(route->seen[0].cfg, 4), "windowed");
  EXPECT_EQ(layer_kind(route->seen[1].cfg, 4), "global");
  EXPECT_EQ(layer_kind(route->seen[2].cfg, 8), "windowed");  // a chunk bounds every head
}

TEST(RetrievalProbe, CountsCopiesOfNeedleTokensExactly) {
  // keys: tokens 5 7 9 7 2 9 4 7, the needle span is positions [1, 4): tokens 7 9 7
  const std::vector<int32_t> tokens{5, 7, 9, 7, 2, 9, 4, 7};
  const std::vector<std::pair<int64_t, int64_t>> spans{{1, 4}};
  // three answer steps produce 7 (in the needle), 9 (in the needle) and 4 (not in it: no opportunity)
  const std::vector<int32_t> produced{7, 9, 4};
  attn::RowProbabilities p;
  p.B = 1;
  p.H = 3;
  p.R = 3;
  p.Tk = 8;
  p.p.assign(3 * 3 * 8, 0.0);
  auto set = [&](int64_t h, int64_t r, int64_t top, int64_t second) {  // 0.6 on top, 0.4 on second
    p.p[(h * 3 + r) * 8 + top] = 0.6;
    p.p[(h * 3 + r) * 8 + second] = 0.4;
  };
  set(0, 0, 3, 0);  // head 0: copies the 7 at 3
  set(0, 1, 5, 2);  //   its top 9 is outside the span (the span's 9 at 2 comes second): no copy
  set(0, 2, 6, 1);
  set(1, 0, 1, 4);  // head 1: copies the 7 at 1 and the 9 at 2
  set(1, 1, 2, 7);
  set(1, 2, 2, 3);
  set(2, 0, 2, 1);  // head 2: its top is in the span but a 9 where 7 is produced: no copy
  set(2, 1, 7, 2);  //   its top is a 7 outside the span
  set(2, 2, 6, 5);
  std::vector<RetrievalHead> heads(3);
  tally_retrieval(p, tokens, produced, spans, heads.data());
  tally_retrieval(p, tokens, produced, spans, heads.data());  // a second example pools into the same tallies
  const int64_t copies[] = {2, 4, 0};
  const double mass[] = {(0.6 + 0.4 + 0.4) / 3, (0.6 + 0.6 + 1.0) / 3, (1.0 + 0.4 + 0.0) / 3};
  for (int h = 0; h < 3; ++h) {
    EXPECT_EQ(heads[h].opportunities, 4) << h;
    EXPECT_EQ(heads[h].copies, copies[h]) << h;
    EXPECT_EQ(heads[h].steps, 6) << h;
    EXPECT_NEAR(heads[h].needle_mass(), mass[h], 1e-15) << h;
  }
  EXPECT_DOUBLE_EQ(heads[0].score(), 0.5);
  EXPECT_DOUBLE_EQ(heads[1].score(), 1.0);
  EXPECT_DOUBLE_EQ(heads[2].score(), 0.0);
}

TEST(RetrievalProbe, NeedleGridScoresEveryHead) {
  nn::Transformer m(hzt::small_model(DType::F32), 5);
  {  // the needle's bytes' (tied) embedding rows scaled up, so the answers hold needle tokens
    std::vector<double> e = m.embed->weight.value().to_vector();
    const int64_t C = m.cfg.d_model;
    for (unsigned char ch : std::string("The pass key is 0123456789. Remember it."))
      for (int64_t d = 0; d < C; ++d) e[ch * C + d] *= 20.0;
    m.embed->weight.value().copy_(Tensor::from_vector(e, m.embed->weight.value().shape()));
  }
  EvalOptions o;
  o.train_len = 16;
  o.lengths = {120};
  o.needles.tasks = {"passkey"};
  o.needles.samples = 2;
  o.needles.depths = {0.0, 0.5};
  o.needles.format = data::NeedleFormat::Short;
  o.needles.per_example = true;
  o.needles.retrieval_heads = true;
  const NeedleReport r = evaluate_needles(m, o);
  ASSERT_EQ(r.results.size(), 4u);
  ASSERT_EQ(r.retrieval.size(), 2u * 4u);  // 2 layers x 4 heads, pooled over the 4 examples
  // the opportunities are the generated tokens found in the needle's tokens, counted again here
  const auto tok = data::make_tokenizer("byte");
  int64_t opportunities = 0, steps = 0;
  for (const auto& e : r.results) {
    const std::string needle = "The pass key is " + e.answers[0] + ". Remember it. " + e.answers[0] + " is the pass key.";
    const std::vector<int32_t> nt = tok->encode(needle);
    const std::set<int32_t> in(nt.begin(), nt.end());
    for (int32_t t : e.output_tokens) opportunities += in.count(t);

    steps += static_cast<int64_t>(e.output_tokens.size());
  }
  EXPECT_GT(opportunities, 0);  // the seeded model's answers do hit needle tokens
  expect_heads_counted(r.retrieval, "passkey", steps, opportunities);
  for (const auto& h : r.retrieval) {
    EXPECT_EQ(h.layer_kind, "global");
    EXPECT_EQ(h.window, 0);
  }
  const FileSet files = retrieval_files(r.retrieval);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].first, "retrieval_heads.csv");
  EXPECT_EQ(files[0].second.substr(0, files[0].second.find('\n')),
            "step,task,length,layer,layer_kind,head,window,score,needle_mass,opportunities");
  EXPECT_NE(retrieval_table(r.retrieval).find("retrieval heads"), std::string::npos);
  o.needles.retrieval_heads = false;
  EXPECT_TRUE(evaluate_needles(m, o).retrieval.empty());
}

TEST(RetrievalProbe, NeedleSpansHoldTheAskedNeedles) {
  const auto tok = data::make_tokenizer("byte");
  for (const char* task : {"passkey", "niah_multikey_1", "niah_multivalue"}) {
    Generator g(9, 1);
    const data::NeedleExample ex = data::make_needle(*tok, data::bible_verses(), data::parse_needle_task(task),
                                                     data::NeedleFormat::Short, g, 400, 0.5, 8);
    // multi-key: the asked needle only (3 distractors); multi-value: every value's
    ASSERT_EQ(ex.needle_spans.size(), std::string(task) == "niah_multivalue" ? 4u : 1u) << task;
    std::string held;
    for (const auto& [b, e] : ex.needle_spans)
      held += tok->decode(std::vector<int32_t>(ex.prompt.begin() + b, ex.prompt.begin() + e)) + "|";
    for (const auto& a : ex.answers) EXPECT_NE(held.find(" " + a + "."), std::string::npos) << task << ": " << held;
    for (const auto& [b, e] : ex.needle_spans) {
      const std::string s = tok->decode(std::vector<int32_t>(ex.prompt.begin() + b, ex.prompt.begin() + e));
      EXPECT_EQ(s.substr(0, 4), "The ") << task;
      EXPECT_EQ(s.back(), '.') << task;
    }
  }
}

// The passkey grid (the retrieval mixture's format): its needle span is the inserted sentence; every
// head is scored at the teacher-forced answer rows, the produced token being the row's argmax, counted
// again here from the model's own logits.
TEST(RetrievalProbe, PasskeyGridScoresEveryHeadAtItsArgmaxAnswers) {
  const auto tok = data::make_tokenizer("byte");
  {
    Generator g(3, 1);
    const data::SyntheticExample ex = data::make_passkey(*tok, g, 160, 0.5);
    ASSERT_EQ(ex.needle_spans.size(), 1u);
    const auto [b, e] = ex.needle_spans[0];
    EXPECT_EQ(tok->decode(std::vector<int32_t>(ex.tokens.begin() + b, ex.tokens.begin() + e)),
              "The pass key is " + ex.answer + ". Remember it. " + ex.answer + " is the pass key. ");
  }
  nn::Transformer m(hzt::small_model(DType::F32), 5);
  EvalOptions o;
  o.train_len = 16;
  o.lengths = {120};
  o.passkey_examples = 2;
  o.passkey_depths = {0.0, 1.0};
  o.needles.retrieval_heads = true;
  std::vector<RetrievalHead> heads;
  evaluate_passkey(m, o, &heads);
  ASSERT_EQ(heads.size(), 2u * 4u);  // 2 layers x 4 heads, pooled over the 4 examples
  // the examples again (the grid's seeds), their argmax answers from the model's logits
  int64_t steps = 0, opportunities = 0;
  for (size_t di = 0; di < o.passkey_depths.size(); ++di)
    for (int64_t e = 0; e < o.passkey_examples; ++e) {
      Generator g(o.seed + 7919, 120ull * 1000003 + di * 1009 + e);
      const data::SyntheticExample ex = data::make_passkey(*tok, g, 121, o.passkey_depths[di]);
      std::vector<double> ids(ex.tokens.begin(), ex.tokens.begin() + 120);
      nn::AttnCall call;
      call.T = 120;
      call.train_len = 16;
      ag::NoGradGuard ng;
      const Tensor lg = m.project(m.hidden(Tensor::from_vector(ids, {1, 120}, DType::I64), Tensor(), call)).value();
      const std::vector<double> v = lg.to(DType::F64).to_vector();
      const auto [nb, ne] = ex.needle_spans[0];
      const std::set<int32_t> in(ex.tokens.begin() + nb, ex.tokens.begin() + ne);
      for (int64_t i = 0; i < 120; ++i) {
        if (ex.weights[i] == 0) continue;
        const double* row = v.data() + i * 259;
        ++steps;
        opportunities += in.count(static_cast<int32_t>(std::max_element(row, row + 259) - row));
      }
    }
  EXPECT_GT(opportunities, 0);  // the seeded model's argmax answers hit needle tokens
  EXPECT_LT(opportunities, steps);
  expect_heads_counted(heads, "passkey_grid", steps, opportunities);
  o.needles.retrieval_heads = false;
  heads.clear();
  evaluate_passkey(m, o, &heads);
  EXPECT_TRUE(heads.empty());
}

TEST(RetrievalProbe, RefusesLampe) {
  nn::Transformer m(hzt::small_model(DType::F32), 5);
  InferenceOptions inf;
  inf.lampe = true;
  try {
    probe_rows(m, {1, 2, 3}, {2}, 3, 16, inf, [](size_t, const attn::AttnConfig&, const attn::RowProbabilities&) {});
    FAIL() << "LaMPE was probed";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("eval.lampe"), std::string::npos) << e.what();
  }
}
