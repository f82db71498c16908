// Packed documents in the fused attention op: the cumulative lengths are checked; the op with a
// document mask matches its float64 twin (reference_attention, which reads the documents from the
// cumulative lengths itself) for every mask x position x logit combination; a packed call equals
// each document run alone; and the blocks the kernel visits are exactly the blocks that hold a
// visible pair (block-diagonal), forward and backward.
#include <gtest/gtest.h>

#include <cmath>

#include "attention/accounting.h"
#include "attention/documents.h"
#include "attention/fused.h"
#include "attention/reference.h"
#include "attention/rope.h"
#include "autograd/functions.h"
#include "core/rng.h"
#include "tests/attention/twin_check.h"

using namespace hz;
using namespace hz::attn;

namespace {

constexpr int64_t kB = 2, kH = 4, kHkv = 2, kD = 6, kT = 23;
// sequence 0: documents shorter than a tile (1, 3), longer than the window (9, 10);
// sequence 1: one document, then a cut near the end
const std::vector<int64_t> kCu = {0, 1, 4, 13, 23, 23 + 20, 46};

std::shared_ptr<const Documents> docs(bool reset) { return std::make_shared<Documents>(kB, kT, kCu, reset); }

struct Combo {
  MaskKind mask;
  PosKind pos;
  LogitKind logit;
  bool reset = true;
  int64_t chunk = 0;  // chunked attention: chunks of 3 positions from each document's start (with reset)
  int64_t sink_tokens = 0;  // the first positions of each document stay visible
  int64_t prefix = 0;       // prefix-LM: each document's first positions attend bidirectionally
};

AttentionSpec spec_of(const Combo& c) {
  AttentionSpec s;
  s.pos.kind = c.pos;
  s.pos.rope_base = 50.0;
  s.pos.prope_base_eff = 20.0;
  s.mask.kind = c.mask;
  s.mask.window = 4;
  s.logit.kind = c.logit;
  s.logit.tau = 3.0;
  s.logit.swan_a = 5.0;
  s.logit.beta = 1.3;
  s.logit.temp_c = c.logit == LogitKind::Temperature ? 0.4 : 0.0;  // DroPE's beta per document
  s.mask.chunk = c.chunk;
  s.mask.sink_tokens = c.sink_tokens;
  s.mask.prefix = c.prefix;
  return s;
}

AttnConfig config_of(const Combo& c, int64_t T, std::shared_ptr<const Documents> d) {
  AttnConfig cfg = make_attn_config(spec_of(c), kH, T, /*train_len=*/5);
  cfg.block_q = 4;
  cfg.block_k = 3;
  cfg.documents = std::move(d);
  return cfg;
}

// q, k, v (B, heads, T, D) (and LogN's c) -> attention output; RoPE at the documents' positions.
ag::Variable run(const Combo& c, const std::vector<ag::Variable>& x, bool fused) {
  const AttnConfig cfg = config_of(c, kT, docs(c.reset));
  ag::Variable q = x[0], k = x[1], v = x[2];
  if (c.pos == PosKind::Rope || c.pos == PosKind::PRope) {
    const RopeFreqs f = rope_frequencies(spec_of(c).pos, kD, kT);
    q = apply_rope(q, cfg.documents->positions(Device::cpu()), f);
    k = apply_rope(k, cfg.documents->positions(Device::cpu()), f);
  }
  const ag::Variable lc = c.logit == LogitKind::LogN ? x[3] : ag::Variable();
  return fused ? fused_attention(q, k, v, cfg, {lc}).out : reference_attention(q, k, v, cfg, {lc});
}

std::vector<Tensor> inputs(const Combo& c, uint64_t seed) {
  Generator g(seed);
  std::vector<Tensor> t{g.normal({kB, kH, kT, kD}, 0, 1, DType::F64), g.normal({kB, kHkv, kT, kD}, 0, 1, DType::F64),
                        g.normal({kB, kHkv, kT, kD}, 0, 1, DType::F64)};
  if (c.logit == LogitKind::LogN) t.push_back(g.uniform({kH}, 0.5, 1.5, DType::F64));
  return t;
}

std::vector<Combo> all_combos() {
  std::vector<Combo> v;
  for (MaskKind m : {MaskKind::Causal, MaskKind::Window, MaskKind::Scope})
    for (PosKind p : {PosKind::None, PosKind::Rope, PosKind::PRope, PosKind::Alibi})
      for (LogitKind l : {LogitKind::Identity, LogitKind::ScaleInvariant, LogitKind::LogN, LogitKind::SwanRow,
                          LogitKind::Temperature})
        v.push_back({m, p, l, true});
  v.push_back({MaskKind::Window, PosKind::Rope, LogitKind::SwanRow, false});  // masked, global positions
  v.push_back({MaskKind::Causal, PosKind::None, LogitKind::SwanRow, false});
  // chunked attention: chunks from each document's start (reset) or from absolute position 0
  for (MaskKind m : {MaskKind::Causal, MaskKind::Window, MaskKind::Scope}) {
    v.push_back({m, PosKind::Rope, LogitKind::LogN, true, 3});
    v.push_back({m, PosKind::Alibi, LogitKind::ScaleInvariant, true, 3});
  }
  v.push_back({MaskKind::Causal, PosKind::None, LogitKind::LogN, false, 3});
  // sink tokens: each document's first 2 positions beside the window, the scopes or the chunks
  for (MaskKind m : {MaskKind::Window, MaskKind::Scope}) {
    v.push_back({m, PosKind::Rope, LogitKind::LogN, true, 0, 2});
    v.push_back({m, PosKind::Alibi, LogitKind::ScaleInvariant, false, 0, 2});
    v.push_back({m, PosKind::None, LogitKind::SwanRow, true, 0, 1});
  }
  v.push_back({MaskKind::Causal, PosKind::Rope, LogitKind::Temperature, true, 3, 2});
  // prefix-LM: each document's first 3 positions bidirectional (the 1-token document is all prefix)
  for (MaskKind m : {MaskKind::Causal, MaskKind::Window, MaskKind::Scope}) {
    v.push_back({m, PosKind::Rope, LogitKind::LogN, true, 0, 0, 3});
    v.push_back({m, PosKind::Alibi, LogitKind::ScaleInvariant, false, 0, 0, 3});
  }
  return v;
}
std::string combo_name(const ::testing::TestParamInfo<Combo>& info) {
  const Combo& c = info.param;
  return std::string(name(c.mask)) + "_" + name(c.pos) + "_" + name(c.logit) + (c.reset ? "" : "_noreset") +
         (c.chunk ? "_chunk" + std::to_string(c.chunk) : "") + (c.sink_tokens ? "_sinktok" + std::to_string(c.sink_tokens) : "") +
         (c.prefix ? "_prefix" + std::to_string(c.prefix) : "");
}

class PackedAttention : public ::testing::TestWithParam<Combo> {};

}  // namespace

TEST(Documents, CumulativeLengthsAreChecked) {
  EXPECT_NO_THROW(Documents(2, 4, {0, 1, 4, 8}, true));
  EXPECT_THROW(Documents(2, 4, {0, 1, 4}, true), ValueError);         // does not reach B T
  EXPECT_THROW(Documents(2, 4, {0, 3, 6, 8}, true), ValueError);      // crosses the sequence end at 4
  EXPECT_THROW(Documents(2, 4, {0, 2, 2, 4, 8}, true), ValueError);   // an empty document
  EXPECT_THROW(Documents(2, 4, {1, 4, 8}, true), ValueError);         // does not start at 0
  EXPECT_THROW(Documents(2, 4, {0, 4, 8, 9}, true), ValueError);      // past B T
  const Documents d(2, 4, {0, 1, 4, 6, 8}, true);
  EXPECT_EQ(d.count(), 4);
  EXPECT_EQ(d.lengths(0), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(d.lengths(1), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(d.bounds(Device::cpu()).to_vector(),
            (std::vector<double>{0, 1, 1, 1, 0, 0, 2, 2, /* ends */ 1, 4, 4, 4, 2, 2, 4, 4}));
  EXPECT_EQ(d.positions(Device::cpu()).to_vector(), (std::vector<double>{0, 0, 1, 2, 0, 1, 0, 1}));
  EXPECT_EQ(Documents(2, 4, {0, 1, 4, 6, 8}, false).positions(Device::cpu()).to_vector(),
            (std::vector<double>{0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(d.causal_pairs(), 1 + 6 + 3 + 3);
  EXPECT_EQ(d.describe(), "4 documents in 2 x 4 (lengths 1 3 | 2 2), positions restart at each document");
  EXPECT_THROW(parse_document_mode("packed"), ValueError);
  EXPECT_EQ(parse_document_mode("masked"), DocumentMode::Masked);
}

TEST(Documents, TheOpRefusesDocumentsThatDoNotFitTheCall) {
  Generator g(1);
  const ag::Variable q(g.normal({kB, kH, kT, kD}, 0, 1, DType::F64)), k(g.normal({kB, kHkv, kT, kD}, 0, 1, DType::F64));
  AttnConfig cfg;
  cfg.documents = std::make_shared<Documents>(1, kT, std::vector<int64_t>{0, kT}, true);  // one sequence for two
  EXPECT_THROW(fused_attention(q, k, k, cfg), ShapeError);
  cfg.documents = docs(true);
  cfg.min_distance = 1;
  EXPECT_THROW(fused_attention(q, k, k, cfg), ValueError);
}

TEST_P(PackedAttention, ForwardAndGradientsMatchTheFloat64Reference) {
  const Combo c = GetParam();
  hzt::expect_fused_matches_twin([&](const std::vector<ag::Variable>& x, bool fused) { return run(c, x, fused); },
                                 inputs(c, 17), 1e-12, 1e-11);
}

// The packed call equals each document run alone (its own B = 1, T = length call; with position
// reset its positions start at 0 and SWAN / DroPE use its own length), outputs and gradients.
TEST_P(PackedAttention, EqualsEachDocumentRunAlone) {
  const Combo c = GetParam();
  if (!c.reset) GTEST_SKIP() << "without position reset a document alone sits at other positions";
  const std::vector<Tensor> in = inputs(c, 31);
  std::vector<ag::Variable> xp;
  for (const auto& t : in) xp.emplace_back(t.clone(), true);
  ag::Variable op = run(c, xp, true);
  const Tensor gout = Generator(7).normal(op.shape(), 0, 1, DType::F64);
  op.backward(gout);
  const std::vector<double> out = op.value().to_vector();
  std::vector<std::vector<double>> grads;
  for (auto& x : xp) grads.push_back(x.grad().to_vector());
  double dc_alone = 0;
  for (size_t d = 0; d + 1 < kCu.size(); ++d) {
    const int64_t b = kCu[d] / kT, s = kCu[d] - b * kT, L = kCu[d + 1] - kCu[d];
    SCOPED_TRACE("document " + std::to_string(d) + " (sequence " + std::to_string(b) + ", [" + std::to_string(s) + ", " +
                 std::to_string(s + L) + "))");
    auto cut = [&](const Tensor& t) { return t.slice(0, b, b + 1).slice(2, s, s + L).contiguous(); };
    std::vector<ag::Variable> x{ag::Variable(cut(in[0]), true), ag::Variable(cut(in[1]), true),
                                ag::Variable(cut(in[2]), true)};
    if (c.logit == LogitKind::LogN) x.emplace_back(in[3].clone(), true);
    // SCOPE's windows follow T: the document alone keeps the packed call's (its training) scopes
    AttnConfig cfg = config_of(c, L, nullptr);
    cfg.window = config_of(c, kT, nullptr).window;
    ag::Variable q = x[0], k = x[1];
    if (c.pos == PosKind::Rope || c.pos == PosKind::PRope) {
      const RopeFreqs f = rope_frequencies(spec_of(c).pos, kD, kT);
      q = apply_rope(q, Tensor::arange(0, L), f);
      k = apply_rope(k, Tensor::arange(0, L), f);
    }
    ag::Variable o = fused_attention(q, k, x[2], cfg, {c.logit == LogitKind::LogN ? x[3] : ag::Variable()}).out;
    o.backward(cut(gout));
    const std::vector<double> oa = o.value().to_vector();
    for (int64_t h = 0; h < kH; ++h)
      for (int64_t t = 0; t < L; ++t)
        for (int64_t e = 0; e < kD; ++e)
          ASSERT_NEAR(oa[(h * L + t) * kD + e], out[((b * kH + h) * kT + s + t) * kD + e], 1e-12) << "out";
    for (int which = 0; which < 3; ++which) {
      const int64_t heads = which == 0 ? kH : kHkv;
      const std::vector<double> ga = x[which].grad().to_vector();
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t t = 0; t < L; ++t)
          for (int64_t e = 0; e < kD; ++e)
            ASSERT_NEAR(ga[(h * L + t) * kD + e], grads[which][((b * heads + h) * kT + s + t) * kD + e], 1e-11)
                << "grad of input " << which;
    }
    if (c.logit == LogitKind::LogN) dc_alone += x[3].grad().to_vector()[0];
  }
  if (c.logit == LogitKind::LogN) {
    EXPECT_NEAR(dc_alone, grads[3][0], 1e-10) << "LogN's dc sums over the documents";
  }
}

INSTANTIATE_TEST_SUITE_P(Combos, PackedAttention, ::testing::ValuesIn(all_combos()), combo_name);

// The kernel visits exactly the blocks that hold a visible pair (counted here by brute force over
// (i, j) with the document rule), forward and backward; attention_cost predicts them; and a pack
// of short documents visits the block-diagonal, far fewer blocks than causal attention.
TEST(Documents, VisitedBlocksAreTheBlockDiagonal) {
  const int64_t B = 2, H = 2, T = 200, D = 8, Bq = 16, Bk = 8;
  const std::vector<int64_t> cu = {0, 7, 57, 113, 200, 200 + 64, 200 + 128, 200 + 192, 400};
  auto d = std::make_shared<Documents>(B, T, cu, true);
  std::vector<int64_t> doc(B * T);
  for (size_t k = 0; k + 1 < cu.size(); ++k)
    for (int64_t g = cu[k]; g < cu[k + 1]; ++g) doc[g] = static_cast<int64_t>(k);
  for (int64_t window : {int64_t(0), int64_t(30)}) {
    AttnConfig cfg;
    cfg.window.assign(H, window);
    cfg.block_q = Bq;
    cfg.block_k = Bk;
    cfg.documents = d;
    int64_t want = 0, want_boundary = 0, pairs = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i0 = 0; i0 < T; i0 += Bq)
        for (int64_t j0 = 0; j0 < T; j0 += Bk) {
          int64_t n = 0, all = 0;
          for (int64_t i = i0; i < std::min(T, i0 + Bq); ++i)
            for (int64_t j = j0; j < std::min(T, j0 + Bk); ++j) {
              ++all;
              n += j <= i && (window == 0 || i - j < window) && doc[b * T + i] == doc[b * T + j];
            }
          want += n > 0;
          want_boundary += n > 0 && n < all;
          pairs += n;
        }
    want *= H;
    want_boundary *= H;
    pairs *= H;
    Generator g(9);
    ag::Variable q(g.normal({B, H, T, D}), true), k(g.normal({B, H, T, D}), true), v(g.normal({B, H, T, D}), true);
    reset_attn_stats();
    ag::sum_all(fused_attention(q, k, v, cfg).out).backward();
    EXPECT_EQ(attn_stats().fwd_blocks, want) << "window " << window;
    EXPECT_EQ(attn_stats().fwd_boundary_blocks, want_boundary) << "window " << window;
    EXPECT_EQ(attn_stats().bwd_blocks, want) << "window " << window;
    const LayerCost cost = attention_cost(cfg, H, T, T, D);
    EXPECT_EQ(cost.blocks, want);
    EXPECT_EQ(cost.visible_pairs, pairs);
    if (window == 0) {
      EXPECT_EQ(pairs, H * d->causal_pairs());
      AttnConfig causal = cfg;
      causal.documents = nullptr;
      EXPECT_LT(want * 2, B * attention_cost(causal, H, T, T, D).blocks) << "not block-diagonal";
    }
  }
}
