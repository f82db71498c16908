// nn/: module naming and state dicts, initialisation, layer patterns, and the whole Transformer's
// loss gradient against finite differences for RoPE, SWAN, SCOPE and scale-invariant p-RoPE.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "autograd/gradcheck.h"
#include "nn/transformer.h"
#include "tests/core/test_util.h"

using namespace hz;
using namespace hz::nn;

namespace {

ModelConfig tiny(DType dt = DType::F32) {
  ModelConfig c;
  c.vocab_size = 13;
  c.d_model = 8;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.mlp_hidden = 8;
  c.train_len = 6;
  c.dtype = dt;
  return c;
}

attn::AttentionSpec rope() { return attn::AttentionSpec{}; }
attn::AttentionSpec nope_global() {
  attn::AttentionSpec s;
  s.pos.kind = attn::PosKind::None;
  return s;
}
attn::AttentionSpec swa_rope(int64_t w) {
  attn::AttentionSpec s;
  s.mask.kind = attn::MaskKind::Window;
  s.mask.window = w;
  return s;
}

Tensor ids_of(std::vector<double> v, int64_t B, int64_t T) { return Tensor::from_vector(v, {B, T}, DType::I64); }
// the logits of row t of a (1, T, V) output
std::vector<double> row(const Tensor& logits, int64_t t) { return logits.narrow(1, t, 1).contiguous().to_vector(); }
using hzt::differs;
using hzt::kValuesDiffer;

}  // namespace

TEST(Module, NamesCountsAndStateDict) {
  ModelConfig c = tiny();
  Transformer m(c, 1);
  std::vector<std::string> names;
  for (auto& [n, v] : m.named_parameters()) names.push_back(n);
  auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  EXPECT_TRUE(has("embed.weight"));
  EXPECT_TRUE(has("layers.1.attn.wq.weight"));
  EXPECT_TRUE(has("layers.0.mlp.w3.weight"));
  EXPECT_TRUE(has("layers.1.norm2.weight"));
  EXPECT_TRUE(has("norm.weight"));
  EXPECT_FALSE(has("head.weight"));  // tied
  // exact count: embed + per layer (2 norms, q, k, v, o, swiglu) + final norm
  const int64_t C = 8, H = 2, Hkv = 1, D = 4, F = 8, V = 13;
  const int64_t per_layer = 2 * C + C * H * D + 2 * C * Hkv * D + H * D * C + 3 * C * F;
  EXPECT_EQ(m.num_parameters(), V * C + 2 * per_layer + C);

  Transformer other(c, 2);
  const Tensor ids = ids_of({1, 2, 3, 4, 5, 6}, 1, 6);
  EXPECT_TRUE(differs(m.forward(ids).value().to_vector(), other.forward(ids).value().to_vector(), kValuesDiffer));
  LoadReport r = other.load_state_dict(m.state_dict());
  EXPECT_EQ(r.loaded.size(), names.size());
  EXPECT_EQ(m.forward(ids).value().to_vector(), other.forward(ids).value().to_vector());

  auto sd = m.state_dict();
  sd["layers.0.attn.wq.weight"] = Tensor::zeros({3, 3});
  try {
    other.load_state_dict(sd);
    FAIL() << "shape mismatch accepted";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.attn.wq.weight"), std::string::npos);
  }
  try {  // a refusal names the file the values came from
    other.load_state_dict(sd, /*strict=*/true, "runs/x/checkpoints/step_00000010.h5");
    FAIL() << "shape mismatch accepted";
  } catch (const ShapeError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("runs/x/checkpoints/step_00000010.h5: parameter 'layers.0.attn.wq.weight'", 0), 0u)
        << e.what();
  }
  auto partial = m.state_dict();
  partial.erase("norm.weight");
  partial["extra.weight"] = Tensor::zeros({1});
  // a refused load changes nothing: the strict check runs before any value is copied
  Transformer fresh(c, 3);
  const std::vector<double> before = fresh.forward(ids).value().to_vector();
  EXPECT_THROW(fresh.load_state_dict(partial), ValueError);
  EXPECT_EQ(fresh.forward(ids).value().to_vector(), before);
  auto ints = m.state_dict();
  ints["norm.weight"] = Tensor::zeros({C}, DType::I64);
  EXPECT_THROW(fresh.load_state_dict(ints), DTypeError);
  EXPECT_EQ(fresh.forward(ids).value().to_vector(), before);
  // floating values of another dtype are converted: f64 values load into the f32 model
  auto f64 = m.state_dict();
  for (auto& [n, t] : f64) t = t.to(DType::F64);
  fresh.load_state_dict(f64);
  EXPECT_EQ(fresh.forward(ids).value().to_vector(), m.forward(ids).value().to_vector());
  EXPECT_EQ(fresh.embed->weight.dtype(), DType::F32);
  EXPECT_THROW(other.load_state_dict(partial), ValueError);
  LoadReport lr = other.load_state_dict(partial, /*strict=*/false);
  EXPECT_EQ(lr.missing, std::vector<std::string>{"norm.weight"});
  EXPECT_EQ(lr.unexpected, std::vector<std::string>{"extra.weight"});
}

TEST(Module, InitialisationRules) {
  ModelConfig c;
  c.d_model = 256;
  c.n_layers = 8;
  c.n_heads = 4;
  Transformer m(c, 7);
  auto stdev = [](const Tensor& t) {
    double s = 0, s2 = 0;
    const auto v = t.to_vector();
    for (double x : v) { s += x; s2 += x * x; }
    const double mu = s / v.size();
    return std::sqrt(s2 / v.size() - mu * mu);
  };
  const auto sd = m.state_dict();
  EXPECT_NEAR(stdev(sd.at("layers.3.attn.wq.weight")), 0.02, 0.001);
  EXPECT_NEAR(stdev(sd.at("layers.3.attn.wo.weight")), 0.02 / std::sqrt(16.0), 0.0003);
  EXPECT_NEAR(stdev(sd.at("layers.3.mlp.w2.weight")), 0.02 / std::sqrt(16.0), 0.0003);
  for (double x : sd.at("layers.5.norm1.weight").to_vector()) EXPECT_EQ(x, 1.0);
  // values depend on (seed, name) only
  Transformer same(c, 7), other(c, 8);
  EXPECT_EQ(same.state_dict().at("layers.2.attn.wk.weight").to_vector(), sd.at("layers.2.attn.wk.weight").to_vector());
  const std::vector<double> wk = sd.at("layers.2.attn.wk.weight").to_vector();
  EXPECT_TRUE(differs(other.state_dict().at("layers.2.attn.wk.weight").to_vector(), wk, kValuesDiffer));
  EXPECT_TRUE(differs(sd.at("layers.2.attn.wv.weight").to_vector(), wk, kValuesDiffer));
}

TEST(ModelConfig, PatternsAndOverrides) {
  ModelConfig c = tiny();
  c.n_layers = 6;
  c.kinds = {{"global_nope", nope_global()}, {"swa_rope", swa_rope(3)}};
  c.pattern = {"global_nope", "swa_rope", "swa_rope", "swa_rope"};
  c.overrides = {{5, "global_nope"}};
  EXPECT_EQ(c.layer_kind_names(), (std::vector<std::string>{"global_nope", "swa_rope", "swa_rope", "swa_rope",
                                                            "global_nope", "global_nope"}));
  const auto specs = c.layer_specs();
  EXPECT_EQ(specs[0].pos.kind, attn::PosKind::None);
  EXPECT_EQ(specs[2].mask.window, 3);
  c.validate();
  c.pattern = {"swa_rope", "mystery"};
  try {
    c.validate();
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'mystery' is not defined"), std::string::npos);
  }
  c.pattern = {"swa_rope"};
  c.kinds[1].attn.mask.window = 64;  // > train_len
  try {
    c.validate();
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("layer 0"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("exceeds the context"), std::string::npos);
  }
  ModelConfig bad = tiny();
  bad.n_kv_heads = 3;
  EXPECT_THROW(Transformer(bad, 0), ValueError);
}

// ---- whole-model gradient check --------------------------------------------------------------
namespace {
struct ModelCase {
  std::string name;
  ModelConfig cfg;
};

class ModelGradcheck : public ::testing::TestWithParam<ModelCase> {};

// The loss's analytic gradient (backward) against central differences of the loss itself, every
// element of every parameter perturbed in place. (Not through ag::gradcheck with the parameters
// rebound to fresh Variables: the layers keep their own handles of their parameters, so a rebound
// copy reaches no layer and such a check compares two zeros.)
TEST_P(ModelGradcheck, LossAndEveryParameterGradient) {
  ModelConfig c = GetParam().cfg;
  c.dtype = DType::F64;
  c.init_std = 0.5;  // non-trivial activations so every path carries gradient
  Transformer m(c, 3);
  const Tensor ids = ids_of({1, 5, 2, 9, 12, 0, 3, 3, 7, 1, 4, 11}, 2, 6);
  const Tensor tgt = ids_of({5, 2, 9, 12, 0, 3, 3, 7, 1, 4, 11, 6}, 2, 6);
  m.zero_grad();
  const double loss = m.loss(ids, tgt).item();
  m.loss(ids, tgt).backward();
  auto loss_now = [&] {
    ag::NoGradGuard ng;
    return m.loss(ids, tgt).item();
  };
  const double eps = 1e-6;
  int64_t checked = 0, nonzero = 0;
  for (auto& [n, v] : m.named_parameters()) {
    Tensor& x = v->value();
    ASSERT_TRUE(x.is_contiguous() && x.dtype() == DType::F64) << n;
    double* p = x.data<double>();
    const Tensor ga = v->grad();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double orig = p[i];
      p[i] = orig + eps;
      const double lp = loss_now();
      p[i] = orig - eps;
      const double lm = loss_now();
      p[i] = orig;
      const double num = (lp - lm) / (2 * eps), ana = ga.defined() ? ga.at_flat(i) : 0.0;
      EXPECT_NEAR(ana, num, 1e-7 + 1e-6 * std::abs(num)) << GetParam().name << ": " << n << " element " << i;
      nonzero += std::abs(num) > 1e-9;
      ++checked;
    }
  }
  EXPECT_EQ(checked, m.num_parameters());
  EXPECT_GT(nonzero, checked / 2) << "most parameters move the loss";
  // and the loss is a sane cross-entropy
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_GT(loss, 0.0);
}

std::vector<ModelCase> model_cases() {
  std::vector<ModelCase> v;
  ModelConfig r = tiny();
  r.kinds = {{"rope", rope()}};
  r.pattern = {"rope"};
  v.push_back({"rope", r});

  ModelConfig sw = tiny();
  sw.kinds = {{"global_nope", nope_global()}, {"swa_rope", swa_rope(3)}};
  sw.pattern = {"global_nope", "swa_rope"};
  sw.mlp = MlpKind::ReLU2;
  v.push_back({"swan", sw});

  ModelConfig sc = tiny();
  attn::AttentionSpec scope;
  scope.pos.kind = attn::PosKind::None;
  scope.mask.kind = attn::MaskKind::Scope;
  sc.kinds = {{"scope", scope}};
  sc.pattern = {"scope"};
  sc.mlp = MlpKind::GELU;
  sc.tie_embeddings = false;
  v.push_back({"scope", sc});

  ModelConfig si = tiny();
  attn::AttentionSpec s;
  s.pos.kind = attn::PosKind::PRope;
  s.logit.kind = attn::LogitKind::ScaleInvariant;
  s.qk_norm = attn::QKNorm::Full;
  attn::AttentionSpec ln = s;
  ln.logit.kind = attn::LogitKind::LogN;  // learned per-head c
  ln.qk_norm = attn::QKNorm::PerHead;
  si.kinds = {{"si_prope", s}, {"logn", ln}};
  si.pattern = {"si_prope", "logn"};
  v.push_back({"scale_invariant_prope_qknorm", si});

  ModelConfig gt = tiny();  // gated attention output: a gate per head on a SWA layer, per element on SCOPE
  attn::AttentionSpec gh = swa_rope(3);
  gh.gate = attn::OutputGate::Head;
  attn::AttentionSpec ge = scope;
  ge.gate = attn::OutputGate::Element;
  gt.kinds = {{"gated_head", gh}, {"gated_element", ge}};
  gt.pattern = {"gated_head", "gated_element"};
  gt.n_kv_heads = 1;
  v.push_back({"gated_output_gqa", gt});

  ModelConfig sf = tiny();  // sinks and FoX: NoPE + both on a global layer, RoPE + FoX on SWA, GQA
  attn::AttentionSpec fg;
  fg.pos.kind = attn::PosKind::None;
  fg.sink = true;
  fg.forget = true;
  fg.forget_bias = 1.0;
  attn::AttentionSpec fw = swa_rope(3);
  fw.forget = true;
  sf.kinds = {{"fox_sink", fg}, {"fox_swa", fw}};
  sf.pattern = {"fox_sink", "fox_swa"};
  sf.n_kv_heads = 1;
  v.push_back({"sinks_fox_gqa", sf});

  ModelConfig df = tiny();  // DIFF V2: paired heads on a SWA RoPE layer with sinks, on ALiBi + SSMax with FoX
  attn::AttentionSpec dw = swa_rope(3);
  dw.diff = true;
  dw.sink = true;
  attn::AttentionSpec da;
  da.pos.kind = attn::PosKind::Alibi;
  da.logit.kind = attn::LogitKind::LogN;
  da.forget = true;
  da.diff = true;
  df.kinds = {{"diff_swa", dw}, {"diff_alibi", da}};
  df.pattern = {"diff_swa", "diff_alibi"};
  df.n_kv_heads = 1;
  v.push_back({"diff_v2_gqa", df});

  // learned angles (angle_w, angle_b, freq_factors): accumulated per KV head with V rotated and GRAPE-M
  // per head; accumulated shared with GRAPE-M per layer and V rotated under DIFF V2's paired heads on
  // a window
  ModelConfig la = tiny();
  la.n_kv_heads = 2;
  attn::AttentionSpec acc = rope(), accw = swa_rope(3);
  acc.pos.rope_angles = attn::RopeAngles::Accumulated;
  acc.pos.angles_per_head = true;
  acc.pos.rotate_v = true;
  acc.pos.learned_freqs = attn::LearnedFreqs::Head;
  accw.pos.rope_angles = attn::RopeAngles::Accumulated;
  accw.pos.learned_freqs = attn::LearnedFreqs::Layer;
  accw.pos.rotate_v = true;
  accw.diff = true;
  la.kinds = {{"acc_head_v", acc}, {"acc_swa_diff", accw}};
  la.pattern = {"acc_head_v", "acc_swa_diff"};
  v.push_back({"learned_angles_gqa", la});
  ModelConfig ga = tiny();  // GRAPE-A: key gates on NoPE with QK-norm, both gates beside RoPE (fixed omega), GQA
  attn::AttentionSpec gk = nope_global();
  gk.additive = attn::AdditiveKind::Key;
  gk.qk_norm = attn::QKNorm::PerHead;
  attn::AttentionSpec gq = swa_rope(4);
  gq.additive = attn::AdditiveKind::QueryKey;
  gq.additive_learned_slope = false;
  ga.kinds = {{"grape_key", gk}, {"grape_qk_rope", gq}};
  ga.pattern = {"grape_key", "grape_qk_rope"};
  v.push_back({"grape_additive_gqa", ga});

  ModelConfig gd = tiny();  // GRAPE-A's query gates per attention head of DIFF V2 (one layer: DIFF's parameters are many)
  attn::AttentionSpec gdq = nope_global();
  gdq.additive = attn::AdditiveKind::Query;
  gdq.diff = true;
  gd.n_layers = 1;
  gd.kinds = {{"grape_query_diff", gdq}};
  gd.pattern = {"grape_query_diff"};
  v.push_back({"grape_query_diff", gd});
  return v;
}
}  // namespace

INSTANTIATE_TEST_SUITE_P(Configs, ModelGradcheck, ::testing::ValuesIn(model_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(Transformer, CausalityNoFutureLeak) {
  // logits at position t must not depend on tokens after t (every mask kind is causal)
  ModelConfig c = tiny();
  attn::AttentionSpec scope;
  scope.mask.kind = attn::MaskKind::Scope;
  c.kinds = {{"rope", rope()}, {"scope", scope}};
  c.pattern = {"rope", "scope"};
  Transformer m(c, 5);
  const Tensor a = ids_of({1, 2, 3, 4, 5, 6}, 1, 6), b = ids_of({1, 2, 3, 9, 9, 9}, 1, 6);
  const Tensor la = m.forward(a).value(), lb = m.forward(b).value();
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t v = 0; v < 13; ++v) EXPECT_EQ(la.at({0, t, v}), lb.at({0, t, v}));
  EXPECT_TRUE(differs(row(la, 3), row(lb, 3), kValuesDiffer));
}

// Prefix-LM: the first P positions see each other both ways (a prefix row changes with a later prefix
// token), nothing sees past the prefix ahead of itself, and the loss leaves out the targets a prefix
// row sees (positions t < P - 1 of each document).
TEST(Transformer, PrefixLmSeesAheadOnlyInsideThePrefix) {
  ModelConfig c = tiny();
  attn::AttentionSpec p = rope(), w = rope();
  p.mask.prefix = 3;
  w.mask.kind = attn::MaskKind::Window;
  w.mask.window = 2;
  w.mask.prefix = 3;
  c.kinds = {{"p", p}, {"w", w}};
  c.pattern = {"p", "w"};
  Transformer m(c, 5);
  const Tensor a = ids_of({1, 2, 3, 4, 5, 6}, 1, 6);
  const Tensor in_prefix = ids_of({1, 2, 9, 4, 5, 6}, 1, 6), after = ids_of({1, 2, 3, 9, 5, 6}, 1, 6);
  const Tensor la = m.forward(a).value(), lp = m.forward(in_prefix).value(), lq = m.forward(after).value();
  EXPECT_TRUE(differs(row(la, 0), row(lp, 0), kValuesDiffer));  // row 0 sees position 2 of the prefix
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t v = 0; v < 13; ++v) EXPECT_EQ(la.at({0, t, v}), lq.at({0, t, v})) << t;  // nothing past the prefix
  EXPECT_TRUE(differs(row(la, 3), row(lq, 3), kValuesDiffer));
  // loss weights: per sequence, and per document of a packed batch
  AttnCall call;
  EXPECT_EQ(m.loss_weights(Tensor(), 1, 6, call).to_vector(), (std::vector<double>{0, 0, 1, 1, 1, 1}));
  call.documents = std::make_shared<attn::Documents>(1, 6, std::vector<int64_t>{0, 4, 6}, true);
  EXPECT_EQ(m.loss_weights(Tensor(), 1, 6, call).to_vector(), (std::vector<double>{0, 0, 1, 1, 0, 1}));
  // the loss is the mean over the kept targets only
  const Tensor tg = ids_of({2, 3, 4, 5, 6, 7}, 1, 6);
  const Tensor kept = Tensor::from_vector({0, 0, 1, 1, 1, 1}, {1, 6}, DType::F32);
  EXPECT_EQ(m.loss(a, tg).item(), Transformer(c, 5).loss(a, tg, kept).item());
}

// Per-pair RoPE frequency factors of 1/s everywhere are position interpolation by s: the same
// logits (float64, to rounding); a factor vector that is not uniform differs from both.
TEST(Transformer, RopeFrequencyFactorsOfOneOverSAreInterpolation) {
  ModelConfig pi = tiny(DType::F64), by_factors = tiny(DType::F64), tapered = tiny(DType::F64);
  attn::AttentionSpec a = rope(), b = rope(), t = rope();
  a.pos.scaling = attn::RopeScaling::PI;
  a.pos.factor = 4;
  const int64_t half = pi.hdim() / 2;
  b.pos.rope_freq_factors.assign(half, 0.25);
  t.pos.rope_freq_factors.assign(half, 1.0);
  t.pos.rope_freq_factors.back() = 0.0;  // the slowest pair stops rotating
  pi.kinds = {{"rope", a}};
  by_factors.kinds = {{"rope", b}};
  tapered.kinds = {{"rope", t}};
  for (ModelConfig* c : {&pi, &by_factors, &tapered}) c->pattern = {"rope"};
  Transformer ma(pi, 7), mb(by_factors, 7), mt(tapered, 7);
  ma.compute_dtype = mb.compute_dtype = mt.compute_dtype = DType::F64;
  const Tensor ids = ids_of({1, 5, 2, 7, 3, 9, 4, 11}, 1, 8);
  const std::vector<double> la = ma.forward(ids).value().to_vector(), lb = mb.forward(ids).value().to_vector(),
                            lt = mt.forward(ids).value().to_vector();
  double worst = 0, apart = 0;
  for (size_t i = 0; i < la.size(); ++i) {
    worst = std::max(worst, std::abs(la[i] - lb[i]));
    apart = std::max(apart, std::abs(la[i] - lt[i]));
  }
  EXPECT_LT(worst, 1e-12);
  EXPECT_GT(apart, 1e-6);
}

namespace {
// logits of a float64 model built from `spec` on every layer, with `edit` applied to it first
std::vector<double> logits_of(const attn::AttentionSpec& spec, const Tensor& ids, const Tensor& positions = Tensor(),
                              int64_t n_kv_heads = 2, const std::function<void(Transformer&)>& edit = nullptr) {
  ModelConfig c = tiny(DType::F64);
  c.n_kv_heads = n_kv_heads;
  c.init_std = 0.3;
  c.kinds = {{"k", spec}};
  c.pattern = {"k"};
  Transformer m(c, 7);
  m.compute_dtype = DType::F64;
  if (edit) edit(m);
  return m.forward(ids, positions).value().to_vector();
}
double max_gap(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double g = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) g = std::max(g, std::abs(a[i] - b[i]));
  return g;
}
}  // namespace

// Accumulated angles with W = 0 step 1 per token (b = ln(e - 1)): theta_i = w (i + 1), RoPE's
// relative angles, so the model equals RoPE to rounding (YaRN's mscale, partial pairs and GQA
// included); GRAPE-M's factors start at rope_freq_factors, so it equals RoPE with those factors.
TEST(LearnedAngles, AtInitialisationTheyAreRope) {
  const Tensor ids = ids_of({1, 5, 2, 7, 3, 9, 4, 11, 0, 6, 2, 12}, 2, 6);
  attn::AttentionSpec base = rope();
  base.pos.scaling = attn::RopeScaling::YaRN;
  base.pos.factor = 2;
  base.pos.original_context = 4;
  base.pos.rope_pairs = {0};  // pair 1 stays still
  base.pos.rope_freq_factors = {0.7, 1.0};
  const std::vector<double> want = logits_of(base, ids);
  auto zero_w = [](Transformer& m) {
    for (auto& b : m.layers) b->attn->angle_w.value().fill_(0.0);
  };
  for (bool per_head : {false, true}) {
    attn::AttentionSpec acc = base;
    acc.pos.rope_angles = attn::RopeAngles::Accumulated;
    acc.pos.angles_per_head = per_head;
    EXPECT_LT(max_gap(logits_of(acc, ids, Tensor(), 2, zero_w), want), 1e-12) << "per head " << per_head;
    // and trained steps move it away
    EXPECT_GT(max_gap(logits_of(acc, ids), want), 1e-6);
  }
  for (auto lf : {attn::LearnedFreqs::Layer, attn::LearnedFreqs::Head}) {
    attn::AttentionSpec g = base;
    g.pos.learned_freqs = lf;
    EXPECT_LT(max_gap(logits_of(g, ids), want), 1e-12) << attn::name(lf);
    auto scaled = [](Transformer& m) {
      for (auto& b : m.layers) b->attn->freq_factors.value().fill_(0.5);
    };
    EXPECT_GT(max_gap(logits_of(g, ids, Tensor(), 2, scaled), want), 1e-6) << attn::name(lf);
  }
}

// V rotated by theta_j and the output back by -theta_i: the output reads only theta_j - theta_i, so
// shifting every position leaves it unchanged (a missing back-rotation would not), and it differs
// from RoPE without V's rotation.
TEST(LearnedAngles, RotatedValuesKeepTheRelativeLaw) {
  const Tensor ids = ids_of({1, 5, 2, 7, 3, 9}, 1, 6);
  std::vector<double> p0(6), p1(6);
  for (int i = 0; i < 6; ++i) {
    p0[i] = i;
    p1[i] = i + 37;
  }
  const Tensor a = Tensor::from_vector(p0, {6}, DType::I64), b = Tensor::from_vector(p1, {6}, DType::I64);
  attn::AttentionSpec v = rope();
  v.pos.rotate_v = true;
  const std::vector<double> at0 = logits_of(v, ids, a), at37 = logits_of(v, ids, b);
  EXPECT_LT(max_gap(at0, at37), 1e-12);
  EXPECT_GT(max_gap(at0, logits_of(rope(), ids, a)), 1e-6);
}

TEST(LearnedAngles, ParametersAndTheirInitialisation) {
  ModelConfig c = tiny();
  c.n_kv_heads = 2;
  attn::AttentionSpec s = rope();
  s.pos.rope_angles = attn::RopeAngles::Accumulated;
  s.pos.angles_per_head = true;
  s.pos.learned_freqs = attn::LearnedFreqs::Head;
  s.pos.rope_freq_factors = {0.5, 2.0};
  c.kinds = {{"k", s}};
  c.pattern = {"k"};
  Transformer m(c, 3);
  const AttentionLayer& A = *m.layers[0]->attn;
  const int64_t half = c.hdim() / 2;
  EXPECT_EQ(A.angle_w.shape(), (Shape{2 * half, c.d_model}));
  EXPECT_EQ(A.angle_b.shape(), (Shape{2 * half}));
  EXPECT_EQ(A.freq_factors.shape(), (Shape{2 * half}));
  for (double b : A.angle_b.value().to_vector()) EXPECT_NEAR(std::log1p(std::exp(b)), 1.0, 1e-6);
  EXPECT_EQ(A.freq_factors.value().to_vector(), (std::vector<double>{0.5, 2.0, 0.5, 2.0}));
  attn::AttentionSpec bad = rope();
  bad.pos.kind = attn::PosKind::Alibi;
  bad.pos.rope_angles = attn::RopeAngles::Accumulated;
  try {
    bad.validate(2, 2, 4, 6);
    ADD_FAILURE() << "accumulated angles on an ALiBi layer";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("rope_angles"), std::string::npos) << e.what();
  }
  attn::AttentionSpec lone = rope();
  lone.pos.angles_per_head = true;
  EXPECT_THROW(lone.validate(2, 2, 4, 6), ValueError);
}

namespace {
// The plain-loop layer tests' last step: want = y wo^T (y (T, HD) the heads' outputs, wo (C, HD)),
// compared with the layer's output to 1e-12; the weights are initialised, so a zero layer fails.
void expect_output_projection(const std::vector<double>& got, const std::vector<double>& wo,
                              const std::vector<double>& y, int64_t T, int64_t C, int64_t HD) {
  std::vector<double> want(T * C, 0.0);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t o = 0; o < C; ++o)
      for (int64_t e = 0; e < HD; ++e) want[i * C + o] += wo[o * HD + e] * y[i * HD + e];
  ASSERT_EQ(got.size(), want.size());
  double scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-12) << i;
    scale = std::max(scale, std::abs(want[i]));
  }
  EXPECT_GT(scale, 0.1);
}
// The plain-loop layer tests' first step: the layer's output on x (1, T, C) at index positions,
// and a projection's weight (out, in), flattened.
std::vector<double> layer_output(AttentionLayer& layer, const Tensor& x) {
  AttnCall call;
  call.T = x.size(1);
  return layer.forward(ag::Variable(x), Tensor::arange(0, x.size(1), 1, DType::I64), call).value().to_vector();
}
std::vector<double> weight_of(const std::shared_ptr<Linear>& l) { return l->weight.value().to_vector(); }
}  // namespace

// The gated attention output against an independent float64 implementation: plain loops over
// the layer's own weights (projections, RoPE by angle, causal softmax, per-head or per-element
// sigmoid gate, output projection), no fused op and no autograd.
TEST(GatedAttention, LayerEqualsPlainLoops) {
  for (const attn::OutputGate gate : {attn::OutputGate::Head, attn::OutputGate::Element}) {
    SCOPED_TRACE(attn::name(gate));
    const int64_t C = 8, H = 2, Hkv = 1, D = 4, T = 7;
    attn::AttentionSpec spec;
    spec.gate = gate;
    AttentionLayer layer({C, H, Hkv, D, false}, spec, 0.5, 0.5, DType::F64);
    layer.init_parameters(11);
    Generator g(5);
    const Tensor x = g.normal({1, T, C}, 0, 1, DType::F64);
    const std::vector<double> got = layer_output(layer, x);
    const std::vector<double> X = x.to_vector(), wq = weight_of(layer.wq), wk = weight_of(layer.wk),
                              wv = weight_of(layer.wv), wo = weight_of(layer.wo), wg = weight_of(layer.wg);
    auto proj = [&](const std::vector<double>& w, int64_t out, int64_t t, int64_t o) {
      double acc = 0;
      for (int64_t c = 0; c < C; ++c) acc += w[o * C + c] * X[t * C + c];
      return acc;
    };
    auto rope = [&](std::vector<double> v, int64_t pos) {  // pairs (i, i + D/2), theta_i = 10000^(-2i/D)
      for (int64_t i = 0; i < D / 2; ++i) {
        const double a = pos * std::pow(10000.0, -2.0 * i / D), x0 = v[i], x1 = v[i + D / 2];
        v[i] = x0 * std::cos(a) - x1 * std::sin(a);
        v[i + D / 2] = x0 * std::sin(a) + x1 * std::cos(a);
      }
      return v;
    };
    std::vector<double> y(T * H * D, 0.0);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> q(D);
        for (int64_t d = 0; d < D; ++d) q[d] = proj(wq, H * D, i, h * D + d);
        q = rope(q, i);
        std::vector<double> s(i + 1);
        double mx = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          std::vector<double> k(D);
          for (int64_t d = 0; d < D; ++d) k[d] = proj(wk, Hkv * D, j, d);  // one kv head
          k = rope(k, j);
          s[j] = 0;
          for (int64_t d = 0; d < D; ++d) s[j] += q[d] * k[d] / std::sqrt(double(D));
          mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (auto& e : s) z += (e = std::exp(e - mx));
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0;
          for (int64_t j = 0; j <= i; ++j) acc += s[j] / z * proj(wv, Hkv * D, j, d);
          const int64_t gi = gate == attn::OutputGate::Head ? h : h * D + d;
          y[i * H * D + h * D + d] = acc / (1 + std::exp(-proj(wg, 0, i, gi)));
        }
      }
    expect_output_projection(got, wo, y, T, C, H * D);
  }
}

// DIFF Transformer V2 against an independent float64 implementation: plain loops over the layer's
// own weights, 2H query heads with the pair (2h, 2h+1) reading one kv head (GQA), each head's own
// causal softmax over a window, o_h = A_2h V - sigmoid(x . w_h) A_2h+1 V, the output projection;
// no fused op and no autograd.
TEST(DiffTransformerV2, LayerEqualsPlainLoops) {
  const int64_t C = 8, H = 2, Hkv = 1, D = 4, T = 9, W = 4;
  attn::AttentionSpec spec;
  spec.pos.kind = attn::PosKind::None;
  spec.mask.kind = attn::MaskKind::Window;
  spec.mask.window = W;
  spec.diff = true;
  AttentionLayer layer({C, H, Hkv, D, false}, spec, 0.5, 0.5, DType::F64);
  layer.init_parameters(13);
  ASSERT_EQ(layer.attn_heads(), 2 * H);
  ASSERT_EQ(layer.wq->weight.value().size(0), 2 * H * D);
  Generator g(6);
  const Tensor x = g.normal({1, T, C}, 0, 1, DType::F64);
  const std::vector<double> got = layer_output(layer, x);
  const std::vector<double> X = x.to_vector(), wq = weight_of(layer.wq), wk = weight_of(layer.wk),
                            wv = weight_of(layer.wv), wo = weight_of(layer.wo), wl = weight_of(layer.wl);
  auto proj = [&](const std::vector<double>& w, int64_t t, int64_t o) {
    double acc = 0;
    for (int64_t c = 0; c < C; ++c) acc += w[o * C + c] * X[t * C + c];
    return acc;
  };
  auto head = [&](int64_t ha, int64_t i, int64_t d) {  // attention head ha's output at row i, dim d
    std::vector<double> s;
    double mx = -1e300;
    for (int64_t j = std::max<int64_t>(0, i - W + 1); j <= i; ++j) {
      double dot = 0;
      for (int64_t e = 0; e < D; ++e) dot += proj(wq, i, ha * D + e) * proj(wk, j, e);
      s.push_back(dot / std::sqrt(double(D)));
      mx = std::max(mx, s.back());
    }
    double z = 0, acc = 0;
    for (auto& e : s) z += (e = std::exp(e - mx));
    int64_t n = 0;
    for (int64_t j = std::max<int64_t>(0, i - W + 1); j <= i; ++j) acc += s[n++] / z * proj(wv, j, d);
    return acc;
  };
  std::vector<double> y(T * H * D, 0.0);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < T; ++i) {
      const double lam = 1 / (1 + std::exp(-proj(wl, i, h)));
      for (int64_t d = 0; d < D; ++d) y[i * H * D + h * D + d] = head(2 * h, i, d) - lam * head(2 * h + 1, i, d);
    }
  expect_output_projection(got, wo, y, T, C, H * D);
}

// Sinks and FoX against an independent float64 implementation: plain loops over the layer's own
// weights (projections, a sliding window, the forget gates f_t = sigmoid(x_t . w_h + b_h) and
// their decay sum_{j < m <= i} log f_m, a sink logit in each row's denominator), no fused op and
// no autograd.
TEST(SinksAndForgetGates, LayerEqualsPlainLoops) {
  for (const bool sink : {false, true})
    for (const bool fox : {false, true}) {
      if (!sink && !fox) continue;
      SCOPED_TRACE(std::string(sink ? "sink " : "") + (fox ? "fox" : ""));
      const int64_t C = 8, H = 2, Hkv = 1, D = 4, T = 9, W = 5;
      attn::AttentionSpec spec;
      spec.pos.kind = attn::PosKind::None;
      spec.mask.kind = attn::MaskKind::Window;
      spec.mask.window = W;
      spec.sink = sink;
      spec.forget = fox;
      spec.forget_bias = 0.5;
      AttentionLayer layer({C, H, Hkv, D, false}, spec, 0.5, 0.5, DType::F64);
      layer.init_parameters(13);
      if (sink) layer.sink.value().copy_(Tensor::from_vector({0.8, -0.4}, {H}, DType::F64));  // not the init 0
      Generator g(7);
      const Tensor x = g.normal({1, T, C}, 0, 1, DType::F64);
      const std::vector<double> got = layer_output(layer, x);
      const std::vector<double> X = x.to_vector(), wq = weight_of(layer.wq), wk = weight_of(layer.wk),
                                wv = weight_of(layer.wv), wo = weight_of(layer.wo);
      const std::vector<double> z = sink ? layer.sink.value().to_vector() : std::vector<double>{};
      const std::vector<double> fw = fox ? layer.forget_w.value().to_vector() : std::vector<double>{},
                                fb = fox ? layer.forget_b.value().to_vector() : std::vector<double>{};
      auto proj = [&](const std::vector<double>& w, int64_t t, int64_t o) {
        double acc = 0;
        for (int64_t c = 0; c < C; ++c) acc += w[o * C + c] * X[t * C + c];
        return acc;
      };
      auto log_f = [&](int64_t h, int64_t t) {
        double a = fb[h];
        for (int64_t c = 0; c < C; ++c) a += fw[h * C + c] * X[t * C + c];
        return std::log(1.0 / (1.0 + std::exp(-a)));
      };
      std::vector<double> y(T * H * D, 0.0);
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < T; ++i) {
          const int64_t j0 = std::max<int64_t>(0, i - W + 1);
          std::vector<double> s(i + 1, 0.0);
          double mx = sink ? z[h] : -1e300;
          for (int64_t j = j0; j <= i; ++j) {
            for (int64_t d = 0; d < D; ++d) s[j] += proj(wq, i, h * D + d) * proj(wk, j, d) / std::sqrt(double(D));
            if (fox)
              for (int64_t m = j + 1; m <= i; ++m) s[j] += log_f(h, m);
            mx = std::max(mx, s[j]);
          }
          double den = sink ? std::exp(z[h] - mx) : 0.0;
          for (int64_t j = j0; j <= i; ++j) den += (s[j] = std::exp(s[j] - mx));
          for (int64_t d = 0; d < D; ++d) {
            double acc = 0;
            for (int64_t j = j0; j <= i; ++j) acc += s[j] / den * proj(wv, j, d);
            y[i * H * D + h * D + d] = acc;
          }
        }
      expect_output_projection(got, wo, y, T, C, H * D);
    }
}

// The cost of learned angles (horizon info, the memory plan): a rotation is 6 FLOPs a pair (q and k
// rows, with rotate_v also v and the output), the steps about 4 per angle, GRAPE-M's product 1;
// angle_w counts as a GEMM weight (6 per weight per token in flops_per_token).
TEST(LearnedAngles, TheirFlopsAndKeptBytes) {
  ModelConfig c = tiny(DType::F64);  // head_dim 4, 2 query heads
  c.n_kv_heads = 2;
  attn::AttentionSpec s = rope();
  s.pos.rope_angles = attn::RopeAngles::Accumulated;
  s.pos.angles_per_head = true;
  s.pos.rotate_v = true;
  s.pos.learned_freqs = attn::LearnedFreqs::Layer;
  c.kinds = {{"k", s}};
  c.pattern = {"k"};
  ModelConfig p = c;
  p.kinds = {{"k", rope()}};
  Transformer ml(c, 1), mp(p, 1);
  const AttentionLayer& A = *ml.layers[0]->attn;
  // rotations 3 (2 + 2 + 2 + 2) 4 = 96; steps 4 * 2 groups * 2 pairs = 16; factors 2 groups * 2 = 4
  EXPECT_DOUBLE_EQ(A.angle_flops_per_token(), 116.0);
  EXPECT_DOUBLE_EQ(ml.flops_per_token(6) - mp.flops_per_token(6),
                   2 * (6.0 * A.angle_w.numel() + 3.0 * 116.0));  // two layers
  EXPECT_DOUBLE_EQ(mp.layers[0]->attn->angle_flops_per_token(), 0.0);
  // kept: the angles (B T G D/2 f64), the steps' logits and softplus (f64), steps and deltas, the rotated output
  const CallShape cs{2, 6, 8};
  const int64_t GA = 2 * 6 * 2 * 2;
  EXPECT_EQ(A.cost(cs, AttnCall{}).kept - mp.layers[0]->attn->cost(cs, AttnCall{}).kept,
            GA * 8 + 2 * GA * 8 + 2 * GA * 8 + 2 * 6 * 2 * 4 * 8);
}

// GRAPE-A against an independent float64 implementation: plain loops over the layer's own weights,
// the logits of head h gaining -(i - j) omega_h (softplus(u_h . k_j / sqrt(D)) + softplus(v_h . q_i /
// sqrt(D))), u and v unit-normalised, omega_h = softplus(w_h) 2^(-8h/H); no fused op, no autograd.
TEST(GrapeAdditive, LayerEqualsPlainLoops) {
  for (const attn::AdditiveKind kind : {attn::AdditiveKind::Key, attn::AdditiveKind::Query, attn::AdditiveKind::QueryKey}) {
    SCOPED_TRACE(attn::name(kind));
    const int64_t C = 8, H = 2, Hkv = 1, D = 4, T = 9;
    attn::AttentionSpec spec = nope_global();
    spec.additive = kind;
    AttentionLayer layer({C, H, Hkv, D, false}, spec, 0.5, 0.5, DType::F64);
    layer.init_parameters(17);
    layer.additive_w.value().copy_(Tensor::from_vector({0.3, -0.7}, {H}, DType::F64));  // not the init
    Generator g(9);
    const Tensor x = g.normal({1, T, C}, 0, 1, DType::F64);
    const std::vector<double> got = layer_output(layer, x);
    const std::vector<double> X = x.to_vector(), wq = weight_of(layer.wq), wk = weight_of(layer.wk),
                              wv = weight_of(layer.wv), wo = weight_of(layer.wo), w = layer.additive_w.value().to_vector();
    const std::vector<double> u = layer.additive_u.defined() ? layer.additive_u.value().to_vector() : std::vector<double>{},
                              vv = layer.additive_v.defined() ? layer.additive_v.value().to_vector() : std::vector<double>{};
    auto proj = [&](const std::vector<double>& m, int64_t t, int64_t o) {
      double acc = 0;
      for (int64_t c = 0; c < C; ++c) acc += m[o * C + c] * X[t * C + c];
      return acc;
    };
    auto softplus = [](double a) { return std::log1p(std::exp(a)); };
    auto gate = [&](const std::vector<double>& dir, int64_t h, const std::vector<double>& m, int64_t t, int64_t o0) {
      double n2 = 0, dot = 0;
      for (int64_t d = 0; d < D; ++d) n2 += dir[h * D + d] * dir[h * D + d];
      for (int64_t d = 0; d < D; ++d) dot += dir[h * D + d] / std::sqrt(n2) * proj(m, t, o0 + d);
      return softplus(dot / std::sqrt(double(D)));
    };
    std::vector<double> y(T * H * D, 0.0);
    for (int64_t h = 0; h < H; ++h) {
      const double omega = softplus(w[h]) * std::pow(2.0, -8.0 * (h + 1) / H);
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> s(i + 1, 0.0);
        double mx = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t d = 0; d < D; ++d) s[j] += proj(wq, i, h * D + d) * proj(wk, j, d) / std::sqrt(double(D));
          double rate = 0;
          if (!u.empty()) rate += gate(u, h, wk, j, 0);
          if (!vv.empty()) rate += gate(vv, h, wq, i, h * D);
          s[j] -= static_cast<double>(i - j) * omega * rate;
          mx = std::max(mx, s[j]);
        }
        double den = 0;
        for (int64_t j = 0; j <= i; ++j) den += (s[j] = std::exp(s[j] - mx));
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0;
          for (int64_t j = 0; j <= i; ++j) acc += s[j] / den * proj(wv, j, d);
          y[i * H * D + h * D + d] = acc;
        }
      }
    }
    expect_output_projection(got, wo, y, T, C, H * D);
  }
}

// The reductions at the layer, in float64: additive alibi on a NoPE layer is pos alibi, and
// additive key with u = 0 (every gate softplus(0) = ln 2) and omega_h ln 2 = slope_h is too: the same
// output and the same gradients of the shared weights.
TEST(GrapeAdditive, AlibiBesideNopeAndZeroKeyGatesArePosAlibi) {
  const int64_t C = 8, H = 4, Hkv = 2, D = 4, T = 11;
  attn::AttentionSpec alibi = nope_global();
  alibi.pos.kind = attn::PosKind::Alibi;
  alibi.mask.kind = attn::MaskKind::Window;
  alibi.mask.window = 6;
  attn::AttentionSpec beside = alibi, key = alibi;
  beside.pos.kind = key.pos.kind = attn::PosKind::None;
  beside.additive = attn::AdditiveKind::Alibi;
  key.additive = attn::AdditiveKind::Key;
  Generator g(5);
  const Tensor x = g.normal({2, T, C}, 0, 1, DType::F64), gout = g.normal({2, T, C}, 0, 1, DType::F64);
  AttnCall call;
  call.T = T;
  auto run = [&](const attn::AttentionSpec& s, bool zero_gates) {
    AttentionLayer layer({C, H, Hkv, D, false}, s, 0.5, 0.5, DType::F64);
    layer.init_parameters(3);  // the projections' draws do not depend on the other parameters
    uint64_t seed = 20;  // the same projections in every layer
    for (auto* l : {layer.wq.get(), layer.wk.get(), layer.wv.get(), layer.wo.get()})
      l->weight.value().copy_(Generator(++seed).normal(l->weight.shape(), 0, 0.5, DType::F64));
    if (zero_gates) {
      layer.additive_u.value().zero_();
      layer.additive_w.value().fill_(std::log(std::exp(1.0 / std::log(2.0)) - 1.0));  // softplus(w) ln 2 = 1
    }
    ag::Variable xv(x.clone(), true);
    ag::Variable y = layer.forward(xv, Tensor::arange(0, T, 1, DType::I64), call);
    y.backward(gout);
    std::vector<std::vector<double>> r{y.value().to_vector(), xv.grad().to_vector()};
    for (auto* l : {layer.wq.get(), layer.wk.get(), layer.wv.get(), layer.wo.get()}) r.push_back(l->weight.grad().to_vector());
    return r;
  };
  const auto want = run(alibi, false);
  for (const auto& [name, got] : {std::pair{"additive alibi", run(beside, false)}, std::pair{"additive key, u = 0", run(key, true)}}) {
    SCOPED_TRACE(name);
    ASSERT_EQ(got.size(), want.size());
    for (size_t t = 0; t < want.size(); ++t)
      for (size_t i = 0; i < want[t].size(); ++i) ASSERT_NEAR(got[t][i], want[t][i], 1e-12) << "tensor " << t << " element " << i;
  }
}
