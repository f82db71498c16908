// The fused attention op against its slow twin (reference_attention) and against finite
// differences, for every mask x position encoding x logit transform combination, with GQA,
// ragged T (not a multiple of the tiles) and T_q != T_k.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "attention/fused.h"
#include "attention/fused_kernels.h"
#include "attention/reference.h"
#include "attention/rope.h"
#include "autograd/functions.h"
#include "autograd/gradcheck.h"
#include "core/rng.h"
#include "tests/attention/twin_check.h"

using namespace hz;
using namespace hz::attn;

namespace {

struct Combo {
  MaskKind mask;
  PosKind pos;
  LogitKind logit;
  int64_t Tq = 11, Tk = 11;
  bool sink = false, fox = false;  // attention sinks, FoX forget gates
  bool logn_position = false;      // LogN's n = position + 1 (else SSMax's visible keys)
  double qtemp = 0.0;              // Llama 4's position temperature alpha (beta 3)
  int64_t chunk = 0;               // chunked attention (Llama 4): chunks of this many positions
  int64_t sink_tokens = 0;         // the first positions stay visible beside the window or chunk
  int64_t prefix = 0;              // prefix-LM: the first positions attend bidirectionally
  bool drawn = false;              // drawn token positions (real, increasing, gaps 0.5 to 3)
  int dist = 0;                    // GRAPE's additive rates: 1 dist_k, 2 dist_q, 3 both
};

std::string combo_name(const ::testing::TestParamInfo<Combo>& info) {
  const Combo& c = info.param;
  return std::string(name(c.mask)) + "_" + name(c.pos) + "_" + name(c.logit) +
         (c.Tq != c.Tk ? "_Tq" + std::to_string(c.Tq) + "_Tk" + std::to_string(c.Tk) : "") + (c.sink ? "_sink" : "") +
         (c.fox ? "_fox" : "") + (c.logn_position ? "_npos" : "") + (c.qtemp > 0 ? "_qtemp" : "") +
         (c.chunk > 0 ? "_chunk" + std::to_string(c.chunk) : "") +
         (c.sink_tokens > 0 ? "_sinktok" + std::to_string(c.sink_tokens) : "") +
         (c.prefix > 0 ? "_prefix" + std::to_string(c.prefix) : "") + (c.drawn ? "_drawn" : "") +
         (c.dist & 1 ? "_distk" : "") + (c.dist & 2 ? "_distq" : "");
}

constexpr int64_t kB = 1, kH = 4, kHkv = 2, kD = 6;

AttentionSpec spec_of(const Combo& c) {
  AttentionSpec s;
  s.pos.kind = c.pos;
  s.mask.kind = c.mask;
  s.mask.window = 4;
  s.logit.kind = c.logit;
  s.logit.tau = 3.0;       // small tau so a_t varies over short distances
  s.logit.swan_a = 5.0;
  s.logit.beta = 1.3;
  s.logit.logn_position = c.logn_position;
  s.logit.qtemp_alpha = c.qtemp;
  s.logit.qtemp_beta = 3.0;  // floor((p + 1) / 3) steps within T = 11
  s.mask.chunk = c.chunk;
  s.mask.sink_tokens = c.sink_tokens;
  s.mask.prefix = c.prefix;
  return s;
}

AttnConfig config_of(const AttentionSpec& s, int64_t Tk) {
  AttnConfig cfg = make_attn_config(s, kH, Tk);
  cfg.block_q = 4;  // small tiles: many boundary and interior blocks at T = 11
  cfg.block_k = 3;
  return cfg;
}

// Drawn token positions of B sequences of T tokens: increasing reals with gaps in [0.5, 3), from 0.7
// on, a different draw per sequence (what PoSE, randomized and real-valued positions give the op).
Tensor drawn_positions(int64_t B, int64_t T, uint64_t seed) {
  Generator g(seed);
  const std::vector<double> gaps = g.uniform({B, T}, 0.5, 3.0, DType::F64).to_vector();
  std::vector<double> p(B * T);
  for (int64_t b = 0; b < B; ++b) {
    double at = 0.7;
    for (int64_t j = 0; j < T; ++j) p[b * T + j] = at += gaps[b * T + j];
  }
  return Tensor::from_vector(p, {B, T}, DType::F64);
}

// inputs: q, k, v (then c for logn, the sinks (H), FoX's log f (B, H, Tk)). Rotary encodings are
// applied to q/k before attention, at positions offset so that queries are the last Tq positions
// (the drawn positions of those tokens with c.drawn, which the op's logit terms read too).
ag::Variable run(const Combo& c, const std::vector<ag::Variable>& x, bool fused) {
  const AttentionSpec s = spec_of(c);
  AttnConfig cfg = config_of(s, c.Tk);
  if (c.drawn) cfg.positions = drawn_positions(kB, c.Tk, 91);
  ag::Variable q = x[0], k = x[1], v = x[2];
  if (s.pos.kind == PosKind::Rope || s.pos.kind == PosKind::PRope) {
    PositionSpec ps = s.pos;
    ps.rope_base = 50.0;
    ps.prope_base_eff = 20.0;
    const RopeFreqs f = rope_frequencies(ps, kD, c.Tk);
    const Tensor pk = c.drawn ? cfg.positions.view({c.Tk}) : Tensor::arange(0, c.Tk);
    q = apply_rope(q, pk.narrow(0, c.Tk - c.Tq, c.Tq).contiguous(), f);
    k = apply_rope(k, pk, f);
  }
  AttnTerms t;
  size_t i = 3;
  if (c.logit == LogitKind::LogN) t.logn_c = x[i++];
  if (c.sink) t.sink = x[i++];
  if (c.fox) t.forget = x[i++];
  if (c.dist & 1) t.dist_k = x[i++];
  if (c.dist & 2) t.dist_q = x[i++];
  return fused ? fused_attention(q, k, v, cfg, t).out : reference_attention(q, k, v, cfg, t);
}

std::vector<Tensor> inputs(const Combo& c, DType dt, uint64_t seed) {
  Generator g(seed);
  std::vector<Tensor> t{g.normal({kB, kH, c.Tq, kD}, 0, 1, dt), g.normal({kB, kHkv, c.Tk, kD}, 0, 1, dt),
                        g.normal({kB, kHkv, c.Tk, kD}, 0, 1, dt)};
  if (c.logit == LogitKind::LogN) t.push_back(g.uniform({kH}, 0.5, 1.5, dt));
  if (c.sink) t.push_back(g.normal({kH}, 0, 1, dt));
  if (c.fox) t.push_back(g.uniform({kB, kH, c.Tk}, -1.0, 0.0, dt));  // log f <= 0
  if (c.dist & 1) t.push_back(g.uniform({kB, kH, c.Tk}, -0.2, 0.8, dt));
  if (c.dist & 2) t.push_back(g.uniform({kB, kH, c.Tq}, -0.2, 0.8, dt));
  return t;
}

class FusedAttention : public ::testing::TestWithParam<Combo> {};

TEST_P(FusedAttention, ForwardAndGradientsMatchReference) {
  const Combo c = GetParam();
  hzt::expect_fused_matches_twin([&](const std::vector<ag::Variable>& x, bool fused) { return run(c, x, fused); },
                                 inputs(c, DType::F64, 17), 1e-12, 1e-11);
}

TEST_P(FusedAttention, GradcheckFiniteDifferences) {
  const Combo c = GetParam();
  ag::GradcheckResult r = ag::gradcheck([&](const std::vector<ag::Variable>& x) { return run(c, x, true); },
                                        inputs(c, DType::F64, 23));
  EXPECT_TRUE(r.ok) << r.message;
}

TEST_P(FusedAttention, SinglePrecisionWithinItsFloor) {
  // f32 kernel vs f64 reference: error bounded by k * (f32 reference error) + atol
  const Combo c = GetParam();
  const std::vector<Tensor> in64 = inputs(c, DType::F64, 29);
  std::vector<ag::Variable> x64, x32, x32r;
  for (const auto& t : in64) {
    x64.emplace_back(t);
    x32.emplace_back(t.to(DType::F32));
    x32r.emplace_back(t.to(DType::F32));
  }
  const std::vector<double> ref = run(c, x64, false).value().to_vector();
  const std::vector<double> out = run(c, x32, true).value().to_vector();
  const std::vector<double> ref32 = run(c, x32r, false).value().to_vector();
  for (size_t i = 0; i < ref.size(); ++i)
    ASSERT_LE(std::abs(out[i] - ref[i]), 4 * std::abs(ref32[i] - ref[i]) + 2e-6) << "element " << i;
}

std::vector<Combo> combos() {
  std::vector<Combo> v;
  for (MaskKind m : {MaskKind::Causal, MaskKind::Window, MaskKind::Scope})
    for (PosKind p : {PosKind::None, PosKind::Rope, PosKind::PRope, PosKind::Alibi})
      for (LogitKind l : {LogitKind::Identity, LogitKind::ScaleInvariant, LogitKind::LogN,
                          LogitKind::SwanRow, LogitKind::Temperature})
        v.push_back({m, p, l});
  // queries are the last Tq of Tk positions
  v.push_back({MaskKind::Causal, PosKind::Rope, LogitKind::Identity, 5, 13});
  v.push_back({MaskKind::Window, PosKind::Alibi, LogitKind::ScaleInvariant, 7, 12});
  v.push_back({MaskKind::Scope, PosKind::None, LogitKind::LogN, 1, 9});
  // sinks and FoX, alone and together, over masks, encodings and transforms, and Tq != Tk
  for (MaskKind m : {MaskKind::Causal, MaskKind::Window, MaskKind::Scope})
    for (const auto& [sink, fox] : {std::pair{true, false}, std::pair{false, true}, std::pair{true, true}}) {
      v.push_back({m, PosKind::None, LogitKind::Identity, 11, 11, sink, fox});
      v.push_back({m, PosKind::Rope, LogitKind::LogN, 11, 11, sink, fox});
    }
  v.push_back({MaskKind::Window, PosKind::Alibi, LogitKind::ScaleInvariant, 11, 11, true, true});
  v.push_back({MaskKind::Causal, PosKind::PRope, LogitKind::SwanRow, 11, 11, true, true});
  v.push_back({MaskKind::Causal, PosKind::Rope, LogitKind::Temperature, 5, 13, true, true});
  v.push_back({MaskKind::Scope, PosKind::None, LogitKind::Identity, 3, 9, false, true});
  // LogN counting positions instead of visible keys; Llama 4's position temperature on any transform
  v.push_back({MaskKind::Window, PosKind::None, LogitKind::LogN, 11, 11, false, false, true});
  v.push_back({MaskKind::Scope, PosKind::Rope, LogitKind::LogN, 5, 13, false, false, true});
  v.push_back({MaskKind::Causal, PosKind::None, LogitKind::Identity, 11, 11, false, false, false, 0.5});
  v.push_back({MaskKind::Window, PosKind::Alibi, LogitKind::SwanRow, 11, 11, false, false, false, 0.5});
  v.push_back({MaskKind::Scope, PosKind::None, LogitKind::LogN, 7, 12, true, true, true, 0.3});
  // chunked attention (chunks of 4 or 5 positions, tiles 4 x 3 straddle them) with every mask and
  // with the terms that count keys or read positions
  for (MaskKind m : {MaskKind::Causal, MaskKind::Window, MaskKind::Scope}) {
    v.push_back({m, PosKind::Rope, LogitKind::Identity, 11, 11, false, false, false, 0.0, 4});
    v.push_back({m, PosKind::Alibi, LogitKind::LogN, 7, 12, true, true, false, 0.0, 5});
  }
  v.push_back({MaskKind::Causal, PosKind::None, LogitKind::ScaleInvariant, 11, 11, false, true, false, 0.5, 5});
  v.push_back({MaskKind::Window, PosKind::PRope, LogitKind::SwanRow, 5, 13, true, false, true, 0.0, 4});
  // sink tokens (the first 2 or 3 positions) beside windows, scopes and chunks, with the terms that
  // count keys (SSMax), read distances (ALiBi, scale-invariant) or positions, learned sinks and FoX
  for (MaskKind m : {MaskKind::Window, MaskKind::Scope}) {
    v.push_back({m, PosKind::Rope, LogitKind::Identity, 11, 11, false, false, false, 0.0, 0, 2});
    v.push_back({m, PosKind::Alibi, LogitKind::LogN, 7, 12, true, true, false, 0.0, 0, 3});
    v.push_back({m, PosKind::None, LogitKind::ScaleInvariant, 11, 11, false, true, false, 0.0, 0, 2});
  }
  v.push_back({MaskKind::Causal, PosKind::Rope, LogitKind::LogN, 11, 11, true, false, false, 0.0, 4, 2});
  v.push_back({MaskKind::Window, PosKind::PRope, LogitKind::SwanRow, 5, 13, false, true, true, 0.5, 3, 2});
  // prefix-LM (the first 5 positions bidirectional; the 4 x 3 tiles straddle its end) with every mask,
  // the distance terms read both ways (ALiBi, scale-invariant), key counts, sinks, chunks and sink tokens
  for (MaskKind m : {MaskKind::Causal, MaskKind::Window, MaskKind::Scope}) {
    v.push_back({m, PosKind::Rope, LogitKind::Identity, 11, 11, false, false, false, 0.0, 0, 0, 5});
    v.push_back({m, PosKind::Alibi, LogitKind::LogN, 11, 11, true, false, false, 0.0, 0, 0, 5});
    v.push_back({m, PosKind::None, LogitKind::ScaleInvariant, 11, 11, false, false, false, 0.3, 0, 0, 6});
  }
  v.push_back({MaskKind::Window, PosKind::Rope, LogitKind::LogN, 11, 11, true, false, false, 0.0, 3, 1, 4});
  // drawn token positions: the distance terms (ALiBi, scale-invariant), LogN by position, SWAN's row
  // and Llama 4's temperature read them, with RoPE rotating by them; every mask, Tq != Tk, sinks,
  // FoX, chunks, sink tokens and a prefix
  for (MaskKind m : {MaskKind::Causal, MaskKind::Window, MaskKind::Scope}) {
    v.push_back({m, PosKind::Alibi, LogitKind::ScaleInvariant, 11, 11, false, false, false, 0.0, 0, 0, 0, true});
    v.push_back({m, PosKind::Rope, LogitKind::LogN, 7, 12, true, false, true, 0.4, 0, 0, 0, true});
    v.push_back({m, PosKind::Alibi, LogitKind::SwanRow, 11, 11, false, true, false, 0.0, 0, 0, 0, true});
  }
  v.push_back({MaskKind::Causal, PosKind::PRope, LogitKind::ScaleInvariant, 5, 13, true, true, false, 0.5, 0, 0, 0, true});
  v.push_back({MaskKind::Window, PosKind::Alibi, LogitKind::LogN, 11, 11, false, false, true, 0.0, 4, 2, 0, true});
  v.push_back({MaskKind::Causal, PosKind::Alibi, LogitKind::ScaleInvariant, 11, 11, false, false, false, 0.3, 0, 0, 5, true});
  // GRAPE's additive rates (key, query, both) beside every mask, ALiBi, RoPE, the transforms that
  // read t or count keys, sinks, FoX, Tq != Tk, sink tokens, a prefix (|t| both ways) and drawn positions
  for (MaskKind m : {MaskKind::Causal, MaskKind::Window, MaskKind::Scope})
    for (int d : {1, 2, 3}) v.push_back({m, PosKind::None, LogitKind::Identity, 11, 11, false, false, false, 0.0, 0, 0, 0, false, d});
  v.push_back({MaskKind::Causal, PosKind::Rope, LogitKind::LogN, 7, 12, true, true, false, 0.0, 0, 0, 0, false, 3});
  v.push_back({MaskKind::Window, PosKind::Alibi, LogitKind::ScaleInvariant, 5, 13, false, false, false, 0.0, 0, 2, 0, false, 1});
  v.push_back({MaskKind::Causal, PosKind::None, LogitKind::SwanRow, 11, 11, false, false, false, 0.0, 4, 0, 5, false, 3});
  v.push_back({MaskKind::Scope, PosKind::Alibi, LogitKind::Identity, 11, 11, false, true, false, 0.0, 0, 0, 0, true, 3});
  return v;
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Combos, FusedAttention, ::testing::ValuesIn(combos()), combo_name);

// The attention's environment switches (HZ_ATTN_IMPL, HZ_ATTN_BACKWARD, HZ_ATTN_MMA) through one
// reader: unset is "", a listed value is itself, anything else is refused with the choices named.
TEST(FusedAttentionEdge, EnvironmentSwitchesRefuseUnknownValues) {
  unsetenv("HZ_TEST_SWITCH");
  EXPECT_EQ(attn::detail::env_choice("HZ_TEST_SWITCH", {"a", "bb", "c"}), "");
  setenv("HZ_TEST_SWITCH", "bb", 1);
  EXPECT_EQ(attn::detail::env_choice("HZ_TEST_SWITCH", {"a", "bb", "c"}), "bb");
  setenv("HZ_TEST_SWITCH", "b", 1);
  try {
    (void)attn::detail::env_choice("HZ_TEST_SWITCH", {"a", "bb", "c"});
    ADD_FAILURE() << "accepted 'b'";
  } catch (const ValueError& e) {
    EXPECT_EQ(std::string(e.what()), "HZ_TEST_SWITCH='b': expected a, bb or c");
  }
  unsetenv("HZ_TEST_SWITCH");
}

// The run log's kernel options (attention/fused.h) name only what a call gets: on the CPU, whatever
// the environment asks of the CUDA tensor-core kernels, nothing (fused_cuda_test.cpp checks a GPU).
TEST(FusedAttentionEdge, TensorCoreOptionsAreEmptyOnTheCpu) {
  setenv("HZ_ATTN_MMA", "wgmma", 1);
  setenv("HZ_ATTN_BACKWARD", "one_pass", 1);
  EXPECT_EQ(tensor_core_options(Device::cpu(), DType::BF16, 64), "");
  EXPECT_EQ(tensor_core_options(Device::cpu(), DType::F32, 128), "");
  unsetenv("HZ_ATTN_MMA");
  unsetenv("HZ_ATTN_BACKWARD");
}

TEST(FusedAttentionEdge, RowsWithoutVisibleKeysGiveZeroAndMinusInfLse) {
  // keys restricted to [0, 3): queries with min_distance 5 see nothing until position 5
  Generator g(1);
  AttnConfig cfg;
  cfg.window = {0};
  cfg.key_end = 3;
  cfg.min_distance = 5;
  cfg.block_q = 2;
  cfg.block_k = 2;
  ag::Variable q(g.normal({1, 1, 8, 4})), k(g.normal({1, 1, 8, 4})), v(g.normal({1, 1, 8, 4}));
  AttnOutput o = fused_attention(q, k, v, cfg);
  for (int64_t i = 0; i < 8; ++i) {
    const bool empty = i < 5;
    if (empty) {
      EXPECT_TRUE(std::isinf(o.lse.at({0, 0, i})) && o.lse.at({0, 0, i}) < 0) << i;
      for (int64_t d = 0; d < 4; ++d) EXPECT_EQ(o.out.value().at({0, 0, i, d}), 0.0);
    } else {
      EXPECT_TRUE(std::isfinite(o.lse.at({0, 0, i}))) << i;
    }
  }
}

TEST(FusedAttentionEdge, LseMergesRegionsExactly) {
  // attending keys [0, 6) and [6, 13) separately and merging by log-sum-exp equals attending all
  Generator g(2);
  ag::Variable q(g.normal({1, 2, 13, 8}, 0, 1, DType::F64)), k(g.normal({1, 2, 13, 8}, 0, 1, DType::F64)),
      v(g.normal({1, 2, 13, 8}, 0, 1, DType::F64));
  AttnConfig all, a, b;
  all.window = a.window = b.window = {0, 0};
  a.key_end = 6;
  b.key_begin = 6;
  AttnOutput oa = fused_attention(q, k, v, a), ob = fused_attention(q, k, v, b), o = fused_attention(q, k, v, all);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 13; ++i) {
      const double la = oa.lse.at({0, h, i}), lb = ob.lse.at({0, h, i}), l = o.lse.at({0, h, i});
      const double m = std::max(la, lb);
      EXPECT_NEAR(l, m + std::log(std::exp(la - m) + std::exp(lb - m)), 1e-12);
      for (int64_t d = 0; d < 8; ++d) {
        const double wa = std::isinf(la) ? 0 : std::exp(la - l), wb = std::isinf(lb) ? 0 : std::exp(lb - l);
        EXPECT_NEAR(o.out.value().at({0, h, i, d}),
                    wa * oa.out.value().at({0, h, i, d}) + wb * ob.out.value().at({0, h, i, d}), 1e-12);
      }
    }
}

TEST(FusedAttentionEdge, RefusesBadShapes) {
  ag::Variable q(Tensor::zeros({1, 3, 4, 8})), k(Tensor::zeros({1, 2, 4, 8})), v(Tensor::zeros({1, 2, 4, 8}));
  EXPECT_THROW(fused_attention(q, k, v, AttnConfig{}), ShapeError);  // 3 heads, 2 kv heads
  ag::Variable q2(Tensor::zeros({1, 2, 4, 8}));
  AttnConfig cfg;
  cfg.window = {0};  // one window for two heads
  EXPECT_THROW(fused_attention(q2, k, v, cfg), ShapeError);
}

TEST(FusedAttentionEdge, LearnedLogNGradientSumsOverTheBatch) {
  // B = 2: dLoss/dc_h gathers every batch element's rows (fused vs the composed twin)
  Generator g(31);
  AttnConfig cfg;
  cfg.window = {0, 3, 0};
  cfg.logit = LogitKind::LogN;
  cfg.block_q = 4;
  cfg.block_k = 3;
  const Tensor q = g.normal({2, 3, 9, 4}, 0, 1, DType::F64), k = g.normal({2, 3, 9, 4}, 0, 1, DType::F64),
               v = g.normal({2, 3, 9, 4}, 0, 1, DType::F64), c = g.uniform({3}, 0.5, 1.5, DType::F64);
  ag::Variable cf(c.clone(), true), cr(c.clone(), true);
  const Tensor gout = g.normal({2, 3, 9, 4}, 0, 1, DType::F64);
  fused_attention(ag::Variable(q), ag::Variable(k), ag::Variable(v), cfg, {cf}).out.backward(gout);
  reference_attention(ag::Variable(q), ag::Variable(k), ag::Variable(v), cfg, {cr}).backward(gout);
  const auto a = cf.grad().to_vector(), b = cr.grad().to_vector();
  for (size_t h = 0; h < 3; ++h) EXPECT_NEAR(a[h], b[h], 1e-11) << "head " << h;
}

TEST(FusedAttentionBf16, CpuComputesInF32AndRoundsOnce) {
  // bf16 q/k/v (f32 LogN c, as in mixed precision): out and gradients are the f32 op's results on
  // the same values rounded to bf16 once; lse and dc stay f32.
  Generator g(32);
  AttnConfig cfg;
  cfg.window = scope_windows(4, 21);
  cfg.alibi_slope = alibi_slopes(4);
  cfg.logit = LogitKind::LogN;
  cfg.block_q = 8;
  cfg.block_k = 5;
  const Tensor q = g.normal({1, 4, 21, 8}).to(DType::BF16), k = g.normal({1, 2, 21, 8}).to(DType::BF16),
               v = g.normal({1, 2, 21, 8}).to(DType::BF16), c = g.uniform({4}, 0.5, 1.5);
  const Tensor gout = g.normal({1, 4, 21, 8}).to(DType::BF16);
  ag::Variable qb(q, true), kb(k, true), vb(v, true), cb(c.clone(), true);
  ag::Variable qf(q.to(DType::F32), true), kf(k.to(DType::F32), true), vf(v.to(DType::F32), true), cf(c.clone(), true);
  const AttnOutput ob = fused_attention(qb, kb, vb, cfg, {cb}), of = fused_attention(qf, kf, vf, cfg, {cf});
  EXPECT_EQ(ob.out.dtype(), DType::BF16);
  EXPECT_EQ(ob.lse.dtype(), DType::F32);
  EXPECT_EQ(ob.out.value().to_vector(), of.out.value().to(DType::BF16).to_vector());
  EXPECT_EQ(ob.lse.to_vector(), of.lse.to_vector());
  ob.out.backward(gout);
  of.out.backward(gout.to(DType::F32));
  EXPECT_EQ(qb.grad().dtype(), DType::BF16);
  EXPECT_EQ(cb.grad().dtype(), DType::F32);
  EXPECT_EQ(qb.grad().to_vector(), qf.grad().to(DType::BF16).to_vector());
  EXPECT_EQ(kb.grad().to_vector(), kf.grad().to(DType::BF16).to_vector());
  EXPECT_EQ(vb.grad().to_vector(), vf.grad().to(DType::BF16).to_vector());
  EXPECT_EQ(cb.grad().to_vector(), cf.grad().to_vector());
}

// Drawn token positions differ per sequence: two sequences with their own draws, every term that
// reads them (ALiBi, scale-invariant, Llama 4's temperature; LogN by position in the second
// config), GQA and key limits placing the call at key_position 2 of longer position rows.
TEST(FusedAttentionPositions, PerSequencePositionsMatchReference) {
  const int64_t B = 2, H = 4, Hkv = 2, T = 13, D = 5;
  for (const LogitKind lk : {LogitKind::ScaleInvariant, LogitKind::LogN}) {
    AttentionSpec s;
    s.pos.kind = PosKind::Alibi;
    s.mask.kind = MaskKind::Window;
    s.mask.window = 6;
    s.logit.kind = lk;
    s.logit.tau = 3.0;
    s.logit.logn_position = true;
    s.logit.qtemp_alpha = 0.4;
    s.logit.qtemp_beta = 4.0;
    AttnConfig cfg = make_attn_config(s, H, T);
    cfg.block_q = 4;
    cfg.block_k = 3;
    cfg.key_position = 2;
    cfg.positions = drawn_positions(B, T + 3, 7);
    Generator g(31);
    std::vector<Tensor> in{g.normal({B, H, T, D}, 0, 1, DType::F64), g.normal({B, Hkv, T, D}, 0, 1, DType::F64),
                           g.normal({B, Hkv, T, D}, 0, 1, DType::F64)};
    if (lk == LogitKind::LogN) in.push_back(g.uniform({H}, 0.5, 1.5, DType::F64));
    hzt::expect_fused_matches_twin(
        [&](const std::vector<ag::Variable>& x, bool fused) {
          AttnTerms t;
          if (lk == LogitKind::LogN) t.logn_c = x[3];
          return fused ? fused_attention(x[0], x[1], x[2], cfg, t).out : reference_attention(x[0], x[1], x[2], cfg, t);
        },
        in, 1e-12, 1e-11);
  }
}

// Positions equal to the indices change nothing, bit for bit: the drawn path computes the same terms.
TEST(FusedAttentionPositions, IndexPositionsEqualNone) {
  const int64_t B = 2, H = 2, T = 37, D = 8;
  AttentionSpec s;
  s.pos.kind = PosKind::Alibi;
  s.mask.kind = MaskKind::Causal;
  s.logit.kind = LogitKind::ScaleInvariant;
  s.logit.qtemp_alpha = 0.3;
  s.logit.qtemp_beta = 5.0;
  AttnConfig plain = make_attn_config(s, H, T), drawn = plain;
  drawn.positions = Tensor::arange(0, T, 1, DType::F64).view({1, T}).expand({B, T}).contiguous();
  Generator g(3);
  const Tensor q = g.normal({B, H, T, D}), k = g.normal({B, H, T, D}), v = g.normal({B, H, T, D});
  std::vector<ag::Variable> xa{ag::Variable(q, true), ag::Variable(k, true), ag::Variable(v, true)};
  std::vector<ag::Variable> xb{ag::Variable(q, true), ag::Variable(k, true), ag::Variable(v, true)};
  ag::Variable oa = fused_attention(xa[0], xa[1], xa[2], plain).out, ob = fused_attention(xb[0], xb[1], xb[2], drawn).out;
  EXPECT_EQ(oa.value().to_vector(), ob.value().to_vector());
  const Tensor gout = g.normal(oa.shape());
  oa.backward(gout);
  ob.backward(gout);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(xa[i].grad().to_vector(), xb[i].grad().to_vector()) << "input " << i;
}

TEST(FusedAttentionPositions, RefusesPositionsThatDoNotCover) {
  AttnConfig cfg;
  cfg.window = {0};
  cfg.positions = Tensor::zeros({1, 5}, DType::F64);
  ag::Variable x(Tensor::zeros({1, 1, 6, 4}));
  EXPECT_THROW(fused_attention(x, x, x, cfg), ShapeError);
  cfg.positions = Tensor::zeros({1, 6}, DType::F32);
  EXPECT_THROW(fused_attention(x, x, x, cfg), ShapeError);
}
