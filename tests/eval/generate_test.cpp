// eval/generate: token choice (greedy, temperature, nucleus), reproducible sampling, stop tokens,
// inference options applied to prefill and decode alike (greedy tokens = argmax of the full
// forward under the same options at T = capacity), and the needle grid's shape.
#include <gtest/gtest.h>

#include <cmath>

#include "eval/generate.h"
#include "eval/inference.h"
#include "eval/needles.h"
#include "eval/score.h"
#include "tests/eval/small_model.h"

using namespace hz;
using namespace hz::eval;

namespace {


std::vector<double> frequencies(const std::vector<double>& lg, double temp, double top_p) {
  std::vector<double> f(lg.size(), 0.0);
  const int n = 20000;
  for (int i = 0; i < n; ++i) f[choose_token(lg, temp, top_p, (i + 0.5) / n)] += 1.0 / n;
  return f;
}

}  // namespace

TEST(Generate, ChooseToken) {
  const std::vector<double> lg{1.0, 3.0, 2.0, 0.0};
  EXPECT_EQ(choose_token(lg, 0.0, 1.0, 0.99), 1);   // greedy ignores u
  EXPECT_EQ(choose_token(lg, 1.0, 1e-9, 0.99), 1);  // a tiny nucleus is the argmax
  // temperature 1, full nucleus: frequencies = softmax
  const auto f = frequencies(lg, 1.0, 1.0);
  double z = 0;
  for (double x : lg) z += std::exp(x);
  for (size_t i = 0; i < lg.size(); ++i) EXPECT_NEAR(f[i], std::exp(lg[i]) / z, 1e-3) << i;
  // top-p 0.8: {3 (0.665), 2 (0.245)} reach 0.8; renormalised, the others never drawn
  const auto g = frequencies(lg, 1.0, 0.8);
  const double a = std::exp(3.0), b = std::exp(2.0);
  EXPECT_NEAR(g[1], a / (a + b), 1e-3);
  EXPECT_NEAR(g[2], b / (a + b), 1e-3);
  EXPECT_EQ(g[0], 0.0);
  EXPECT_EQ(g[3], 0.0);
  // temperature 2 flattens
  EXPECT_GT(frequencies(lg, 2.0, 1.0)[3], f[3]);
  EXPECT_THROW(choose_token(lg, -1, 1, 0), ValueError);
  EXPECT_THROW(choose_token(lg, 1, 0, 0), ValueError);
}

TEST(Generate, SamplingIsReproducibleAndSeeded) {
  nn::Transformer m(hzt::small_model(DType::F32), 3);
  GenerateOptions o;
  o.max_new_tokens = 24;
  o.temperature = 1.0;
  o.top_p = 0.95;
  o.seed = 1;
  const std::vector<int32_t> prompt{72, 101, 108, 108, 111};
  const auto a = generate(m, prompt, o), b = generate(m, prompt, o);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.tokens.size(), 24u);
  EXPECT_EQ(a.step_seconds.size(), 23u);
  EXPECT_EQ(a.capacity, 29);
  o.seed = 2;
  EXPECT_NE(generate(m, prompt, o).tokens, a.tokens);
  // stop token: generation ends right after it
  GenerateOptions greedy;
  greedy.max_new_tokens = 10;
  const auto g = generate(m, prompt, greedy);
  greedy.stop_token = g.tokens[0];
  EXPECT_EQ(generate(m, prompt, greedy).tokens, std::vector<int32_t>{g.tokens[0]});
  EXPECT_THROW(generate(m, {}, greedy), ValueError);
  EXPECT_THROW(generate(m, {300}, greedy), ValueError);  // outside the vocabulary
}

TEST(Generate, InferenceOptionsMatchTheFullForward) {
  // LaMPE + YaRN + DroPE temperature at 3x the training length, float64: greedy tokens are the
  // argmax of the full forward over the same tokens under the same options at T = capacity
  nn::Transformer m(hzt::small_model(DType::F64), 4);
  InferenceOptions io;
  io.rope_scaling = attn::RopeScaling::YaRN;
  io.drope_c = 0.3;
  io.lampe = true;
  io.lampe_local = 6;
  io.lampe_sink = 2;
  GenerateOptions o;
  o.max_new_tokens = 30;
  o.inference = io;
  o.train_len = 16;
  const std::vector<int32_t> prompt{10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150, 160, 170, 180};
  const Generation g = generate(m, prompt, o);
  ASSERT_EQ(g.tokens.size(), 30u);
  std::vector<double> ids(prompt.begin(), prompt.end());
  for (int32_t t : g.tokens) ids.push_back(t);
  const int64_t T = static_cast<int64_t>(ids.size());
  ASSERT_EQ(T, g.capacity);
  ScopedInference si(m, io, 16, T);
  nn::AttnCall call;
  call.T = T;
  call.train_len = 16;
  ag::NoGradGuard ng;
  const std::vector<double> lg = m.forward(Tensor::from_vector(ids, {1, T}, DType::I64), Tensor(), call).value().to_vector();
  for (size_t s = 0; s < g.tokens.size(); ++s) {
    const int64_t row = static_cast<int64_t>(prompt.size() + s) - 1;
    int64_t best = 0;
    for (int64_t v = 1; v < 259; ++v)
      if (lg[row * 259 + v] > lg[row * 259 + best]) best = v;
    EXPECT_EQ(best, g.tokens[s]) << "token " << s;
  }
}

TEST(Generate, NeedleGridShape) {
  nn::Transformer m(hzt::small_model(DType::F32), 5);
  EvalOptions o;
  o.train_len = 16;
  o.lengths = {120, 400};
  o.needles.tasks = {"passkey", "niah_multikey"};  // the earlier name of niah_multikey_1, still accepted
  o.needles.samples = 2;
  o.needles.depths = {0.0, 1.0};
  o.needles.format = data::NeedleFormat::Short;
  const NeedleReport r = evaluate_needles(m, o);
  // passkey fits both lengths; multi-key (4 needles) does not fit 120 byte tokens
  ASSERT_EQ(r.cells.size(), 2u * 2u + 1u * 2u);
  for (const auto& c : r.cells) {
    EXPECT_EQ(c.samples, 2);
    EXPECT_GE(c.score, 0.0);
    EXPECT_LE(c.score, 1.0);
  }
  ASSERT_EQ(r.skipped.size(), 1u);
  EXPECT_NE(r.skipped[0].find("niah_multikey_1 at length 120"), std::string::npos);
  const NeedleReport again = evaluate_needles(m, o);  // seeded: the same examples and outputs
  ASSERT_EQ(again.samples.size(), r.samples.size());
  for (size_t i = 0; i < r.samples.size(); ++i) EXPECT_EQ(again.samples[i].output, r.samples[i].output);
}

// Masked documents: a prompt packing documents (each ending at EOS) continues exactly as its last
// document alone, and the greedy tokens equal the argmax of a full forward with the document mask
// and position reset over the same tokens; a generated EOS restarts the document.
TEST(Generate, MaskedDocumentsSeeOnlyTheLastDocument) {
  nn::ModelConfig c = hzt::small_model(DType::F64);
  nn::Transformer m(c, 5);
  m.compute_dtype = DType::F64;
  const int32_t eos = 257;
  const std::vector<int32_t> first{10, 20, 30, 40, eos}, last{7, 8, 9};
  std::vector<int32_t> packed = first;
  packed.insert(packed.end(), last.begin(), last.end());
  GenerateOptions o;
  o.max_new_tokens = 6;
  o.documents = {attn::DocumentMode::Masked, true};
  o.eos = eos;
  const Generation gp = generate(m, packed, o);
  EXPECT_EQ(gp.prompt_kept, 3);
  GenerateOptions alone = o;
  alone.documents = {};
  EXPECT_EQ(gp.tokens, generate(m, last, alone).tokens);
  // the same tokens by the full masked forward: each greedy token is the argmax at its position
  std::vector<int32_t> all = packed;
  all.insert(all.end(), gp.tokens.begin(), gp.tokens.end() - 1);
  const int64_t T = static_cast<int64_t>(all.size());
  std::vector<double> ids(all.begin(), all.end());
  nn::AttnCall call;
  call.T = 3 + o.max_new_tokens;  // the capacity the generation resolved its length-dependent choices for
  call.documents = std::make_shared<attn::Documents>(1, T, std::vector<int64_t>{0, 5, T}, true);
  const Tensor lg = m.forward(Tensor::from_vector(ids, {1, T}, DType::I64), Tensor(), call).value().reshape({T, c.vocab_size});
  for (size_t k = 0; k < gp.tokens.size(); ++k) {
    const int64_t row = 7 + static_cast<int64_t>(k);
    int64_t best = 0;
    for (int64_t v = 1; v < c.vocab_size; ++v)
      if (lg.at({row, v}) > lg.at({row, best})) best = v;
    EXPECT_EQ(gp.tokens[k], best) << "token " << k;
  }
  // a prompt ending in EOS: the next token starts a new document, seen alone
  std::vector<int32_t> ends = first;
  GenerateOptions one = o;
  one.max_new_tokens = 3;
  const Generation ge = generate(m, ends, one);
  ASSERT_EQ(ge.tokens.size(), 3u);
  EXPECT_EQ(ge.prompt_kept, 5);
  const Generation fresh = generate(m, {ge.tokens[0]}, [&] { GenerateOptions x = alone; x.max_new_tokens = 2; return x; }());
  EXPECT_EQ(std::vector<int32_t>(ge.tokens.begin() + 1, ge.tokens.end()), fresh.tokens);
  GenerateOptions no_reset = o;
  no_reset.documents.position_reset = false;
  EXPECT_THROW(generate(m, packed, no_reset), NotImplementedError);
}

// issue 36: `horizon score` ignored data.documents=masked and scored packed documents as one. With
// masked documents and position reset, a document's scores are those it gets scored alone.
TEST(Score, MaskedDocumentsScoreEachDocumentAlone) {
  nn::Transformer m(hzt::small_model(DType::F64), 6);
  m.compute_dtype = DType::F64;
  const int64_t eos = 257;
  const std::vector<int64_t> a{10, 20, 30, 40, eos}, b{50, 60, 70, 80, 90, 100};
  std::vector<int64_t> packed = a;
  packed.insert(packed.end(), b.begin(), b.end());
  const attn::DocumentOptions masked{attn::DocumentMode::Masked, true};
  const std::vector<double> both = token_nll(m, packed, 0, -1, masked, eos);
  const std::vector<double> alone_a = token_nll(m, a), alone_b = token_nll(m, b);
  ASSERT_EQ(both.size(), packed.size() - 1);
  for (size_t i = 0; i < alone_a.size(); ++i) EXPECT_NEAR(both[i], alone_a[i], 1e-12) << i;
  for (size_t j = 0; j < alone_b.size(); ++j) EXPECT_NEAR(both[a.size() + j], alone_b[j], 1e-12) << j;
  // streamed, the second document sees the first: its scores differ
  const std::vector<double> stream = token_nll(m, packed);
  double diff = 0;
  for (size_t j = 0; j < alone_b.size(); ++j) diff = std::max(diff, std::abs(stream[a.size() + j] - alone_b[j]));
  EXPECT_GT(diff, 1e-6);
  EXPECT_THROW(token_nll(m, packed, 0, -1, masked, -1), ValueError);
}

// NoLiMa's effective length: the longest length up to which every length keeps 85% of the model's
// own accuracy at the shortest length.
TEST(Needles, EffectiveLength) {
  EXPECT_EQ(effective_length({{1000, 0.9}, {2000, 0.8}, {4000, 0.7}, {8000, 0.9}}), 2000);  // 0.7 < 0.765: stops
  EXPECT_EQ(effective_length({{1000, 0.4}, {2000, 0.35}, {4000, 0.34}}), 4000);  // relative to its own 0.4
  EXPECT_EQ(effective_length({{1000, 0.0}, {2000, 0.0}}), 0);
  EXPECT_EQ(effective_length({}), 0);
  NeedleReport r;  // pooled over depths: 3/4 at 256, then (1 + 0)/4 at 512
  r.cells = {{"passkey", 256, 0.0, 2, 2, 1.0}, {"passkey", 256, 1.0, 2, 1, 0.5},
             {"passkey", 512, 0.0, 2, 1, 0.5}, {"passkey", 512, 1.0, 2, 0, 0.0}};
  EXPECT_EQ(effective_lengths(r).at("passkey"), 256);
  r.cells[2].correct = 2;  // 3/4 at 512 too
  r.cells[3].correct = 1;
  EXPECT_EQ(effective_lengths(r).at("passkey"), 512);
  EXPECT_NE(needle_table(r).find("effective length of passkey"), std::string::npos);
}

// LaMPE remaps fixed RoPE positions: a model with learned angles (accumulated, GRAPE-M or rotated
// values) is refused by name, and the refusal leaves every layer's spec as it was.
TEST(Generate, LampeRefusesLearnedAngles) {
  for (int which = 0; which < 3; ++which) {
    nn::ModelConfig c = hzt::small_model(DType::F32);
    attn::AttentionSpec s;
    if (which == 0) s.pos.rope_angles = attn::RopeAngles::Accumulated;
    if (which == 1) s.pos.learned_freqs = attn::LearnedFreqs::Layer;
    if (which == 2) s.pos.rotate_v = true;
    c.kinds = {{"plain", attn::AttentionSpec{}}, {"learned", s}};
    c.pattern = {"plain", "learned"};
    nn::Transformer m(c, 3);
    InferenceOptions io;
    io.lampe = true;
    io.rope_scaling = attn::RopeScaling::YaRN;
    try {
      ScopedInference si(m, io, 16, 48);
      ADD_FAILURE() << "LaMPE over learned angles (" << which << ") was taken";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("learned angles"), std::string::npos) << e.what();
    }
    for (const auto& b : m.layers) {
      EXPECT_FALSE(b->attn->lampe.has_value());
      EXPECT_EQ(b->attn->spec.pos.scaling, attn::RopeScaling::None);
    }
  }
}
