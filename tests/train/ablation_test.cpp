// Every ablation-relevant field acts: set through a recipe (or the eval options), it changes the
// windows the kernels use or the loss the model computes. Models with the same seed share their
// weights (values depend on (seed, parameter name)), so a changed loss comes from the field.
#include <gtest/gtest.h>

#include "tests/core/test_util.h"
#include "tests/train/train_test_util.h"

#include <cstdio>
#include <filesystem>

#include "data/shard.h"
#include "eval/eval.h"
#include "eval/inference.h"
#include "train/recipe.h"

using namespace hz;
using namespace hz::train;

namespace {

using hzt::differs;
using hzt::kLossDiffers;  // a changed loss differs by far more than its rounding, not in its last bits

const char* kBase =
    "model:\n  d_model: 32\n  n_layers: 2\n  n_heads: 4\n  init_std: 0.1\n"
    "  layer_kinds:\n    k: {pos: KIND_POS, mask: KIND_MASK}\n  pattern: [k]\n"
    "data: {seq_len: 32}\n";

Recipe recipe(const std::string& pos, const std::string& mask, std::vector<std::string> ov = {}) {
  std::string y = kBase;
  y.replace(y.find("KIND_POS"), 8, pos);
  y.replace(y.find("KIND_MASK"), 9, mask);
  return parse_recipe(y, "ablation.yaml", ov);
}

Tensor ids(int64_t T) {
  std::vector<double> v(T);
  for (int64_t i = 0; i < T; ++i) v[i] = static_cast<double>((i * 37 + 11) % 251);
  return Tensor::from_vector(v, {1, T}, DType::I64);
}

// mean next-token loss of a fresh model (seed 5) at length T, with inference options
double loss_at(const Recipe& r, int64_t T, const eval::InferenceOptions& io = {}) {
  nn::Transformer m(r.model_config(), 5);
  eval::ScopedInference si(m, io, r.data.seq_len, T);
  ag::NoGradGuard ng;
  const Tensor x = ids(T + 1);
  nn::AttnCall call;
  call.T = T;
  call.train_len = r.data.seq_len;
  return m.loss(x.narrow(1, 0, T).contiguous(), x.narrow(1, 1, T).contiguous(), Tensor(), call).item();
}

std::vector<int64_t> windows_at(const Recipe& r, int64_t T, int64_t layer = 0) {
  nn::Transformer m(r.model_config(), 5);
  nn::AttnCall call;
  call.T = T;
  call.train_len = r.data.seq_len;
  return m.layers[layer]->attn->attn_config(call).window;
}

}  // namespace

TEST(Ablation, ScopeFieldsChangeWindowsAndLoss) {
  const Recipe base = recipe("none", "scope");
  EXPECT_EQ(windows_at(base, 32), (std::vector<int64_t>{3, 6, 14, 32}));  // ceil(2.378^h)
  const Recipe g2 = recipe("none", "scope", {"model.layer_kinds.k.scope_gamma=2"});
  EXPECT_EQ(windows_at(g2, 32), (std::vector<int64_t>{2, 4, 8, 16}));
  EXPECT_TRUE(differs(loss_at(g2, 32), loss_at(base, 32), kLossDiffers));
  const Recipe mn = recipe("none", "scope", {"model.layer_kinds.k.scope_min=8"});
  EXPECT_EQ(windows_at(mn, 32), (std::vector<int64_t>{8, 8, 14, 32}));
  EXPECT_TRUE(differs(loss_at(mn, 32), loss_at(base, 32), kLossDiffers));
  const Recipe mx = recipe("none", "scope", {"model.layer_kinds.k.scope_max=10"});
  EXPECT_EQ(windows_at(mx, 32), (std::vector<int64_t>{3, 6, 10, 10}));
  const Recipe ex = recipe("none", "scope", {"model.layer_kinds.k.scopes=[1,2,3,4]"});
  EXPECT_EQ(windows_at(ex, 32), (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_TRUE(differs(loss_at(ex, 32), loss_at(base, 32), kLossDiffers));
}

TEST(Ablation, FreezeScopesActsBeyondTheTrainingLength) {
  // the bug this guards against: freeze_scopes had no effect because the training length was
  // never passed from the recipe to the layers
  const Recipe follow = recipe("none", "scope");
  const Recipe frozen = recipe("none", "scope", {"model.layer_kinds.k.freeze_scopes=true"});
  EXPECT_EQ(windows_at(frozen, 32), windows_at(follow, 32));  // same at the training length
  EXPECT_EQ(windows_at(follow, 128), (std::vector<int64_t>{4, 12, 39, 128}));
  EXPECT_EQ(windows_at(frozen, 128), (std::vector<int64_t>{3, 6, 14, 32}));
  for (int64_t T : {64, 128, 256}) EXPECT_TRUE(differs(loss_at(frozen, T), loss_at(follow, T), kLossDiffers)) << T;
  EXPECT_EQ(loss_at(frozen, 32), loss_at(follow, 32));
}

TEST(Ablation, WindowAndPatternChangeWindowsAndLoss) {
  const Recipe w8 = recipe("rope", "window", {"model.layer_kinds.k.window=8"});
  const Recipe w16 = recipe("rope", "window", {"model.layer_kinds.k.window=16"});
  EXPECT_EQ(windows_at(w8, 32), std::vector<int64_t>(4, 8));
  EXPECT_TRUE(differs(loss_at(w8, 32), loss_at(w16, 32), kLossDiffers));
  // pattern: [global NoPE, SWA-RoPE] vs [SWA-RoPE, global NoPE] (layer order matters)
  const std::string two = "model:\n  d_model: 32\n  n_layers: 2\n  n_heads: 4\n  init_std: 0.1\n  layer_kinds:\n"
                          "    g: {pos: none}\n    l: {pos: rope, mask: window, window: 8}\n";
  const Recipe gf = parse_recipe(two + "  pattern: [g, l]\n", "p.yaml"), lf = parse_recipe(two + "  pattern: [l, g]\n", "p.yaml");
  EXPECT_EQ(windows_at(gf, 32, 0), std::vector<int64_t>(4, 0));
  EXPECT_EQ(windows_at(lf, 32, 0), std::vector<int64_t>(4, 8));
  EXPECT_TRUE(differs(loss_at(gf, 32), loss_at(lf, 32), kLossDiffers));
  // swan.pattern / swan.window rebuild the stack
  const Recipe s1 = recipe("rope", "causal", {"swan.enabled=true", "swan.window=8", "swan.pattern=[global_nope, swa_rope]"});
  const Recipe s2 = recipe("rope", "causal", {"swan.enabled=true", "swan.window=8", "swan.pattern=[swa_rope, global_nope]"});
  EXPECT_EQ(windows_at(s1, 32, 1), std::vector<int64_t>(4, 8));
  EXPECT_TRUE(differs(loss_at(s1, 32), loss_at(s2, 32), kLossDiffers));
  const Recipe s3 = recipe("rope", "causal", {"swan.enabled=true", "swan.window=4", "swan.pattern=[global_nope, swa_rope]"});
  EXPECT_TRUE(differs(loss_at(s1, 32), loss_at(s3, 32), kLossDiffers));
}

TEST(Ablation, LogitFieldsChangeLoss) {
  const Recipe id = recipe("none", "causal");
  const Recipe si = recipe("none", "causal", {"model.layer_kinds.k.logit=scale_invariant"});
  const Recipe si3 = recipe("none", "causal", {"model.layer_kinds.k.logit=scale_invariant", "model.layer_kinds.k.tau=3"});
  EXPECT_TRUE(differs(loss_at(si, 32), loss_at(id, 32), kLossDiffers));
  EXPECT_TRUE(differs(loss_at(si, 32), loss_at(si3, 32), kLossDiffers));
  const Recipe ln = recipe("none", "causal", {"model.layer_kinds.k.logit=logn", "model.layer_kinds.k.logn_c=0.5"});
  const Recipe ln2 = recipe("none", "causal", {"model.layer_kinds.k.logit=logn", "model.layer_kinds.k.logn_c=2"});
  EXPECT_TRUE(differs(loss_at(ln, 32), loss_at(ln2, 32), kLossDiffers));
  // swan_a 2 and beta 3: the loss moves by ~1e-3 (swan_a 20 moved it by 6e-5, and beta 1.5 by 5e-6: the
  // loss of this model is not monotone in beta, and beta 1.5 lies near where it crosses beta 1's)
  const Recipe sw = recipe("none", "causal", {"model.layer_kinds.k.logit=swan_row", "model.layer_kinds.k.swan_a=2"});
  EXPECT_TRUE(differs(loss_at(sw, 32), loss_at(id, 32), kLossDiffers));
  const Recipe tb = recipe("none", "causal", {"model.layer_kinds.k.logit=temperature", "model.layer_kinds.k.beta=3"});
  EXPECT_TRUE(differs(loss_at(tb, 32), loss_at(id, 32), kLossDiffers));
  const Recipe tc = recipe("none", "causal", {"model.layer_kinds.k.logit=temperature", "model.layer_kinds.k.temp_c=0.4"});
  EXPECT_EQ(loss_at(tc, 32), loss_at(id, 32));  // s = 1: beta = 1
  EXPECT_TRUE(differs(loss_at(tc, 64), loss_at(id, 64), kLossDiffers));  // s = 2: beta = 1 + 0.4 ln 2
  const Recipe qk = recipe("none", "causal", {"model.layer_kinds.k.qk_norm=full"});
  EXPECT_TRUE(differs(loss_at(qk, 32), loss_at(id, 32), kLossDiffers));
  const Recipe rb = recipe("rope", "causal", {"model.layer_kinds.k.rope_base=100"});
  EXPECT_TRUE(differs(loss_at(rb, 32), loss_at(recipe("rope", "causal"), 32), kLossDiffers));
}

TEST(Ablation, EvalInferenceOptionsChangeTheEvaluatedLoss) {
  // end to end through eval::evaluate on a validation shard, as `horizon eval` runs it
  const std::string dir = test::make_tmp_dir("hz_ablation");
  std::vector<int32_t> doc(4000);
  for (size_t i = 0; i < doc.size(); ++i) doc[i] = static_cast<int32_t>((i * 7919 + i / 13) % 251);
  data::write_shard(dir + "/val.shard", {doc});
  const auto val = data::Shard::open(dir + "/val.shard");
  auto loss = [&](const Recipe& r, std::vector<std::string> ov) {
    const Recipe rr = parse_recipe(to_yaml(r), "r.yaml", ov);
    nn::Transformer m(rr.model_config(), 5);
    eval::EvalOptions o = rr.eval_options();
    o.lengths = {64};
    o.batch_size = 2;
    o.batches = 1;
    return eval::evaluate(m, *val, o, false).lengths.at(0).loss;
  };
  const Recipe rope = recipe("rope", "causal");
  const double plain = loss(rope, {});
  for (const std::string opt : {"eval.rope_scaling=pi", "eval.rope_scaling=ntk", "eval.rope_scaling=yarn",
                                "eval.rope_scaling=dynamic_ntk", "eval.drope_c=0.4", "eval.lampe=true"})
    EXPECT_TRUE(differs(loss(rope, {opt, "eval.lampe_local=8", "eval.lampe_sink=2"}), plain, kLossDiffers)) << opt;
  // LongRoPE: the searched factors (head_dim 8: 4 pairs) from the options, long past data.seq_len 32
  const std::vector<std::string> lr{"eval.rope_scaling=longrope", "eval.longrope_long_factors=[1, 2, 4, 8]"};
  const double lr_loss = loss(rope, lr);
  EXPECT_TRUE(differs(lr_loss, plain, kLossDiffers));
  std::vector<std::string> lr2 = lr;
  lr2.push_back("eval.longrope_short_factors=[1, 1, 1, 3]");  // 64 > 32: the short factors do not act
  EXPECT_EQ(loss(rope, lr2), lr_loss);
  EXPECT_THROW(loss(rope, {"eval.rope_scaling=longrope"}), ValueError);               // no factors
  EXPECT_THROW(loss(rope, {"eval.longrope_long_factors=[1, 2, 4, 8]"}), ValueError);  // factors, no longrope
  EXPECT_THROW(loss(rope, {"eval.rope_scaling=longrope", "eval.longrope_long_factors=[1, 2]"}), ValueError);
  const Recipe nope = recipe("none", "causal");
  EXPECT_TRUE(differs(loss(nope, {"eval.swan_a=20"}), loss(nope, {}), kLossDiffers));
  // an option that reaches no layer is refused, not ignored
  EXPECT_THROW(loss(rope, {"eval.swan_a=20"}), ValueError);
  EXPECT_THROW(loss(nope, {"eval.lampe=true"}), ValueError);
  // fitting picks among the candidates and reports the pick
  const Recipe r2 = parse_recipe(to_yaml(nope), "r.yaml", {"eval.fit_swan_a=[4, 1000]"});
  nn::Transformer m(r2.model_config(), 5);
  eval::EvalOptions o = r2.eval_options();
  o.lengths = {64};
  o.batch_size = 2;
  o.batches = 1;
  const eval::EvalReport rep = eval::evaluate(m, *val, o, false);
  EXPECT_EQ(rep.swan_fit.size(), 1u);  // one 128-token window... of a 64-token length: [0, 64)
  EXPECT_TRUE(rep.swan_fit[0].best_a == 4 || rep.swan_fit[0].best_a == 1000);
  std::filesystem::remove_all(dir);
}
