// Context parallelism (parallel.context), run by CTest under mpirun -np 2 and -np 4 (the whole
// world is one group):
//   - the zigzag layout covers every position once and balances causal work;
//   - the context route equals the single-rank fused op in float64, output and every gradient
//     (q, k, v, LogN's c, sinks, FoX's gates), on the halo path, the ring and the all-gather: causal, sliding windows,
//     SCOPE-style per-head windows, scale-invariant, LogN, ALiBi, SWAN rows, GQA, packed documents,
//     T not divisible by 2N;
//   - a window layer sends its halo, at most (W - 1) / chunk of the all-gather's bytes;
//   - the model's loss and every parameter gradient equal the whole-sequence ones (float64), gated
//     attention outputs included;
//   - evaluation with the sequence split over the group (mpirun horizon eval) equals the
//     single-rank evaluation: loss per length, NLL by position, fitted SWAN a, packed documents;
//   - 20 training steps with parallel.context follow the single-rank run (fp32), also with data
//     parallel x context parallel groups on 4 ranks.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "autograd/functions.h"
#include "core/ops.h"
#include "core/hash.h"
#include "core/rng.h"
#include "data/shard.h"
#include "distributed/context/route.h"
#include "distributed/parallel.h"
#include "eval/eval.h"
#include "tests/distributed/dist_test_util.h"
#include "train/context_parallel.h"

using namespace hz;
using namespace hz::train;
using namespace hz::train::test;

namespace {

class Context : public MultiRankTest {};

double max_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  EXPECT_EQ(x.size(), y.size());
  double m = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

double max_abs(const Tensor& a) {
  double m = 0;
  for (double v : a.to_vector()) m = std::max(m, std::abs(v));
  return m;
}

struct Case {
  std::string name;
  std::vector<int64_t> window;  // per query head (4)
  attn::LogitKind logit = attn::LogitKind::Identity;
  bool alibi = false;
  int64_t Hkv = 4, T = 40;
  bool documents = false;
  dist::ContextExchange expect_at_2 = dist::ContextExchange::AllGather;  // the path at N = 2
  bool position_reset = true;  // with documents
  bool sink = false, fox = false;  // attention sinks, FoX forget gates
  bool logn_position = false;      // LogN's n = position + 1
  double qtemp = 0.0;              // Llama 4's position temperature alpha (beta 4)
  int64_t chunk = 0, sink_tokens = 0;  // Llama 4's chunks, StreamingLLM's sink tokens
  int dist = 0;                        // GRAPE-A's rates: 1 dist_k (travels with the keys), 2 dist_q, 3 both
};

}  // namespace

TEST(ContextLayout, ChunksCoverTheSequenceOnceAndBalanceCausalWork) {
  for (int64_t T : {8, 37, 64, 1000, 4099})
    for (int n = 1; n <= 5; ++n) {
      if (T < 2 * n) continue;
      std::vector<int> seen(T, 0);
      double most = 0, least = 1e300;
      int64_t longest = 0, shortest = T;
      for (int q = 0; q < n; ++q) {
        const dist::ZigzagLayout L(T, n, q);
        const std::vector<int64_t> p = L.positions();
        ASSERT_EQ(static_cast<int64_t>(p.size()), L.local_len());
        double work = 0;  // causal pairs of this rank's queries
        for (int64_t x : p) {
          ++seen[x];
          work += x + 1;
        }
        most = std::max(most, work);
        least = std::min(least, work);
        longest = std::max(longest, L.local_len());
        shortest = std::min(shortest, L.local_len());
        for (int64_t c = 0; c < 2 * n; ++c) EXPECT_GE(L.chunk_len(c), T / (2 * n));
      }
      for (int64_t x = 0; x < T; ++x) EXPECT_EQ(seen[x], 1) << "T " << T << " n " << n << " position " << x;
      EXPECT_LE(longest - shortest, 2);
      if (T >= 1000) {
        EXPECT_LT(most / least, 1.01) << "T " << T << " n " << n;
      }
    }
  EXPECT_THROW(dist::ZigzagLayout(7, 4, 0), ValueError);
  EXPECT_THROW(dist::ZigzagLayout(64, 2, 2), ValueError);
}

TEST(ParallelDims, RanksSplitIntoDataReplicasOfContextGroups) {
  // 6 ranks, context groups of 3: ranks 0-2 are replica 0, ranks 3-5 replica 1
  for (int r = 0; r < 6; ++r) {
    const dist::ParallelDims d(6, r, 3);
    EXPECT_EQ(d.data(), 2);
    EXPECT_EQ(d.data_rank(), r / 3);
    EXPECT_EQ(d.context_rank(), r % 3);
  }
  const dist::ParallelDims one(4, 2, 1);  // no context parallelism: every rank its own replica
  EXPECT_EQ(one.data(), 4);
  EXPECT_EQ(one.data_rank(), 2);
  EXPECT_EQ(one.context_rank(), 0);
  try {
    dist::ParallelDims(6, 0, 4);
    ADD_FAILURE() << "4 does not divide 6";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("mpirun -np = data-parallel ranks x 4"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dist::ParallelDims(2, 2, 1), ValueError);
}

TEST_F(Context, AttentionEqualsTheSingleRankOpInFloat64) {
  const int N = world().size();
  const int64_t B = 2, H = 4, D = 8;
  using LK = attn::LogitKind;
  using EX = dist::ContextExchange;
  const std::vector<Case> cases = {
      {"causal", {0, 0, 0, 0}},
      {"swa", {6, 6, 6, 6}, LK::Identity, false, 4, 40, false, EX::Halo},
      {"swa longer than a chunk", {25, 25, 25, 25}},
      {"scope with an unbounded head", {1, 3, 9, 0}},
      {"per-head windows", {2, 3, 5, 6}, LK::Identity, false, 4, 40, false, EX::Halo},
      {"scale-invariant", {0, 0, 0, 0}, LK::ScaleInvariant},
      {"scale-invariant swa", {6, 6, 6, 6}, LK::ScaleInvariant, false, 4, 40, false, EX::Halo},
      {"logn swa", {4, 6, 6, 5}, LK::LogN, false, 4, 40, false, EX::Halo},
      {"logn causal", {0, 0, 0, 0}, LK::LogN},
      {"alibi swa", {6, 6, 6, 6}, LK::Identity, true, 4, 40, false, EX::Halo},
      {"alibi causal", {0, 0, 0, 0}, LK::Identity, true},
      {"swan rows swa", {6, 6, 6, 6}, LK::SwanRow, false, 4, 40, false, EX::Halo},
      {"swan rows causal", {0, 0, 0, 0}, LK::SwanRow},
      {"gqa causal", {0, 0, 0, 0}, LK::Identity, false, 2},
      {"gqa swa", {5, 5, 5, 5}, LK::Identity, false, 1, 40, false, EX::Halo},
      {"T 37 causal", {0, 0, 0, 0}, LK::Identity, false, 4, 37},
      {"T 37 swa", {4, 4, 4, 4}, LK::ScaleInvariant, false, 2, 37, false, EX::Halo},
      {"documents", {0, 0, 0, 0}, LK::LogN, false, 4, 40, true},
      // the halo under packed documents: bounds and SWAN's row read global positions (key_position)
      {"documents swa", {6, 6, 6, 6}, LK::SwanRow, false, 4, 40, true, EX::Halo},
      {"documents swa without reset", {4, 6, 2, 6}, LK::SwanRow, false, 2, 40, true, EX::Halo, false},
      {"documents temperature swa", {6, 6, 6, 6}, LK::Temperature, false, 4, 40, true, EX::Halo},
      {"documents logn swa, T 37", {4, 4, 4, 4}, LK::LogN, false, 4, 37, true, EX::Halo},
      // sinks need nothing from other ranks; FoX's log f travels with k and v
      {"sinks and fox causal", {0, 0, 0, 0}, LK::Identity, false, 2, 40, false, EX::AllGather, true, true, true},
      {"fox swa", {6, 6, 6, 6}, LK::Identity, false, 4, 40, false, EX::Halo, true, false, true},
      {"sinks and fox scope, documents", {2, 3, 5, 6}, LK::LogN, false, 4, 37, true, EX::Halo, true, true, true},
      // terms that read absolute positions on the halo path: LogN by position, Llama 4's temperature
      {"logn by position swa", {6, 6, 6, 6}, LK::LogN, false, 4, 40, false, EX::Halo, true, false, false, true},
      {"qtemp swa, documents", {6, 6, 6, 6}, LK::Identity, false, 4, 40, true, EX::Halo, false, false, false, false, 0.5},
      {"qtemp causal", {0, 0, 0, 0}, LK::SwanRow, false, 4, 37, false, EX::AllGather, true, false, false, false, 0.5},
      // the ring folds the sink once, after merging every block
      {"sinks causal, documents, gqa", {0, 0, 0, 0}, LK::LogN, false, 2, 37, true, EX::AllGather, true, true},
      {"sinks scope with an unbounded head", {1, 3, 9, 0}, LK::ScaleInvariant, true, 4, 40, false, EX::AllGather, true,
       true},
      // chunked layers reach at most C - 1 keys back: the halo, also with documents and position reset
      {"chunked causal", {0, 0, 0, 0}, LK::LogN, false, 4, 40, false, EX::Halo, true, false, false, false, 0.0, 6},
      {"chunked swa, documents", {4, 9, 9, 2}, LK::SwanRow, true, 2, 40, true, EX::Halo, true, true, true, false, 0.0, 7},
      {"chunks longer than a rank's", {0, 0, 0, 0}, LK::Identity, false, 4, 40, false, EX::AllGather, true, false, false,
       false, 0.0, 16},
      // sink tokens beside windows: the halo and the sequence's first S keys from rank 0 (a gap between
      // them and the tail on every chunk but the first few: token positions carry the true ones to the
      // terms that read distances or positions, and SSMax counts the sinks)
      {"sink tokens swa, halo", {6, 6, 6, 6}, LK::LogN, false, 4, 40, false, EX::Halo, true, false, false, false, 0.0, 0, 3},
      {"sink tokens per-head windows, alibi, sinks, gqa", {2, 3, 5, 6}, LK::ScaleInvariant, true, 2, 40, false, EX::Halo,
       true, true, false, false, 0.0, 0, 2},
      {"sink tokens swa, swan rows, qtemp, T 37", {4, 4, 4, 4}, LK::SwanRow, false, 4, 37, false, EX::Halo, true, false,
       false, false, 0.5, 0, 3},
      {"sink tokens swa, logn by position, alibi", {5, 5, 5, 5}, LK::LogN, true, 4, 40, false, EX::Halo, true, false,
       false, true, 0.0, 0, 4},
      // with FoX (its decay spans the gap), chunks or documents (a start anywhere): the global exchange
      {"sink tokens swa", {6, 6, 6, 6}, LK::LogN, false, 4, 40, false, EX::AllGather, true, true, true, false, 0.0, 0, 3},
      {"sink tokens chunked, documents", {0, 0, 0, 0}, LK::ScaleInvariant, false, 4, 40, true, EX::AllGather, true, false,
       false, false, 0.0, 5, 2},
      // GRAPE-A's key rates travel with the keys (beside FoX's log f), its query rates stay local
      {"grape rates causal, fox, gqa", {0, 0, 0, 0}, LK::Identity, true, 2, 37, false, EX::AllGather, true, false, true,
       false, 0.0, 0, 0, 3},
      {"grape key rates swa", {6, 6, 6, 6}, LK::LogN, false, 4, 40, false, EX::Halo, true, true, false, false, 0.0, 0, 0, 1},
      {"grape query rates scope", {1, 3, 9, 0}, LK::Identity, false, 4, 40, false, EX::AllGather, true, false, false,
       false, 0.0, 0, 0, 2},
      // key rates span the gap between sink tokens and a window: the global exchange
      {"grape rates, sink tokens swa", {6, 6, 6, 6}, LK::Identity, false, 4, 40, false, EX::AllGather, true, false, false,
       false, 0.0, 0, 3, 3},
  };
  for (const Case& c : cases)
    for (EX global : {EX::Ring, EX::AllGather}) {
    SCOPED_TRACE(c.name + " (global layers: " + dist::name(global) + ")");
    const int64_t T = c.T, Hkv = c.Hkv;
    dist::ContextRoute route(world(), T, global);
    attn::AttnConfig cfg;
    cfg.window = c.window;
    cfg.logit = c.logit;
    cfg.tau = 3.0;
    cfg.swan_a = 5.0;
    cfg.logn_position = c.logn_position;
    cfg.qtemp_alpha = c.qtemp;
    cfg.qtemp_beta = 4.0;
    cfg.chunk = c.chunk;
    cfg.sink_tokens = c.sink_tokens;
    if (c.alibi) cfg.alibi_slope = {0.5, 0.25, 0.125, 0.0625};
    if (c.documents)  // documents of 7, 13, 20 | 40 tokens (37: 7, 13, 17 | 37)
      cfg.documents = std::make_shared<attn::Documents>(
          B, T, std::vector<int64_t>{0, 7, 20, T, 2 * T}, c.position_reset);
    if (c.logit == LK::Temperature) {  // DroPE's per-document beta = 1 + c ln(length / train_len)
      cfg.temp_c = 0.4;
      cfg.train_len = 9;
    }
    cfg.block_q = cfg.block_k = 4;
    const bool keyed = c.fox || (c.dist & 1);  // per-key terms travel with the keys
    const EX path = dist::exchange_for(cfg, route.layout(), global, keyed);
    if (path == EX::Halo && global == EX::AllGather) continue;  // the same run as with the ring
    if (N == 2) {
      EXPECT_EQ(path, c.expect_at_2 == EX::Halo ? EX::Halo : global);
    }
    Generator g(11);  // the same tensors on every rank
    const Tensor q = g.normal({B, H, T, D}, 0, 1, DType::F64), k = g.normal({B, Hkv, T, D}, 0, 1, DType::F64),
                 v = g.normal({B, Hkv, T, D}, 0, 1, DType::F64), gout = g.normal({B, H, T, D}, 0, 1, DType::F64);
    const Tensor c0 = Tensor::from_vector({0.7, 0.9, 1.1, 1.3}, {H}, DType::F64);
    const Tensor z0 = g.normal({H}, 0, 1, DType::F64), f0 = g.uniform({B, H, T}, -1.0, 0.0, DType::F64);
    const Tensor rk0 = g.uniform({B, H, T}, -0.1, 0.6, DType::F64), rq0 = g.uniform({B, H, T}, -0.1, 0.6, DType::F64);
    // the whole sequence on one rank
    ag::Variable qf(q, true), kf(k, true), vf(v, true), cf(c0, true), zf(z0, true), ff(f0, true);
    attn::AttnTerms tf{cf, c.sink ? zf : ag::Variable(), c.fox ? ff : ag::Variable()};
    ag::Variable rkf(rk0, true), rqf(rq0, true);
    if (c.dist & 1) tf.dist_k = rkf;
    if (c.dist & 2) tf.dist_q = rqf;
    const ag::Variable of = attn::fused_attention(qf, kf, vf, cfg, tf).out;
    of.backward(gout);
    // this rank's share
    const dist::ZigzagLayout& L = route.layout();
    ag::Variable ql(dist::local_rows(q, 2, L), true), kl(dist::local_rows(k, 2, L), true),
        vl(dist::local_rows(v, 2, L), true), cl(c0, true), zl(z0, true), fl(dist::local_rows(f0, 2, L), true);
    attn::AttnTerms tl{cl, c.sink ? zl : ag::Variable(), c.fox ? fl : ag::Variable()};
    ag::Variable rkl(dist::local_rows(rk0, 2, L), true), rql(dist::local_rows(rq0, 2, L), true);
    if (c.dist & 1) tl.dist_k = rkl;
    if (c.dist & 2) tl.dist_q = rql;
    const ag::Variable ol = route.attend(ql, kl, vl, cfg, tl);
    ol.backward(dist::local_rows(gout, 2, L));
    EXPECT_LE(max_diff(ol.value(), dist::local_rows(of.value(), 2, L)), 1e-12);
    EXPECT_LE(max_diff(ql.grad(), dist::local_rows(qf.grad(), 2, L)), 1e-11);
    EXPECT_LE(max_diff(kl.grad(), dist::local_rows(kf.grad(), 2, L)), 1e-11);
    EXPECT_LE(max_diff(vl.grad(), dist::local_rows(vf.grad(), 2, L)), 1e-11);
    if (c.logit == LK::LogN) {  // each rank holds its rows' share of dc
      Tensor dc = cl.grad().clone();
      world().all_reduce(dc, ReduceOp::Sum);
      EXPECT_LE(max_diff(dc, cf.grad()), 1e-10);
    }
    if (c.sink) {  // likewise the sinks'
      Tensor dz = zl.grad().clone();
      world().all_reduce(dz, ReduceOp::Sum);
      EXPECT_LE(max_diff(dz, zf.grad()), 1e-10);
    }
    if (c.fox) {
      EXPECT_LE(max_diff(fl.grad(), dist::local_rows(ff.grad(), 2, L)), 1e-10);
    }
    if (c.dist & 1) {
      EXPECT_LE(max_diff(rkl.grad(), dist::local_rows(rkf.grad(), 2, L)), 1e-10);
    }
    if (c.dist & 2) {
      EXPECT_LE(max_diff(rql.grad(), dist::local_rows(rqf.grad(), 2, L)), 1e-10);
    }
    // the bytes: a halo layer sends at most (W - 1) / chunk of what the all-gather sends
    // (FoX's log f and GRAPE-A's key rates, (B H) each, beside k and v)
    const int64_t row = B * Hkv * D * 8 + (int64_t{c.fox} + (c.dist & 1)) * B * H * 8 / 2;
    const int64_t gather = 2 * 2 * (N - 1) * L.max_local_len() * row;  // k and v, forward and backward
    const int64_t sent = route.bytes_sent();
    const auto most = world().all_gather(sent);
    if (path == EX::Halo) {
      const int64_t W = attn::max_reach(cfg);  // the heads' reach: windows, or chunks
      int64_t Ww = 0;
      for (int64_t w : c.window) Ww = std::max(Ww, w > 0 && c.chunk > 0 ? std::min(w, c.chunk) : w > 0 ? w : c.chunk);
      EXPECT_EQ(W, Ww);
      for (int q2 = 0; q2 < N; ++q2) {  // sink tokens: rank 0 sends them to N - 1 ranks, their gradients come back
        const double sinks = 2.0 * 2 * (N - 1) * c.sink_tokens * static_cast<double>(row);
        EXPECT_LE(static_cast<double>(most[q2]), static_cast<double>(W - 1) / L.min_chunk() * gather + sinks)
            << "rank " << q2;
        const dist::ContextTraffic t = dist::context_traffic(cfg, dist::ZigzagLayout(T, N, q2), global, keyed);
        if (c.sink_tokens == 0) {
          EXPECT_EQ(t.fwd_rows, t.bwd_rows);
        }
        EXPECT_EQ(most[q2], 2 * (t.fwd_rows + t.bwd_rows) * row) << "rank " << q2;
      }
    } else if (path == EX::Ring) {  // k and v round twice, dK/dV home once: (2 (T - next's rows) + T) rows
      for (int q2 = 0; q2 < N; ++q2) {  // FoX: c with each row, and the chunk totals of log f and dc
        const dist::ZigzagLayout Lq(T, N, q2);
        const dist::ContextTraffic t = dist::context_traffic(cfg, Lq, global, keyed);
        EXPECT_EQ(t.fwd_rows, T - Lq.local_len_of((q2 + 1) % N));
        EXPECT_EQ(t.fox_totals, keyed ? 4 * (N - 1) : 0);
        EXPECT_EQ(most[q2], 2 * (t.fwd_rows + t.bwd_rows + t.bwd_acc_rows) * row + (c.fox ? t.fox_totals : 0) * B * H * 8)
            << "rank " << q2;
      }
    } else {
      EXPECT_EQ(sent, gather);
    }
  }
}

TEST_F(Context, ModelLossAndGradientsEqualTheWholeSequence) {
  const int N = world().size();
  const std::vector<std::pair<std::string, std::string>> models = {
      {"rope", "    k: {pos: rope, mask: causal}\n  pattern: [k]\n"},
      {"nope alibi", "    a: {pos: none, mask: causal}\n    b: {pos: alibi, mask: causal}\n  pattern: [a, b]\n"},
      {"swa rope", "    k: {pos: rope, mask: window, window: 5}\n  pattern: [k]\n"},
      {"scope", "    k: {pos: none, mask: scope, scope_gamma: 0, scope_min: 1}\n  pattern: [k]\n"},
      {"scale-invariant p-rope", "    k: {pos: prope, prope_fraction: 0.5, mask: causal, logit: scale_invariant, tau: 10, "
                                 "qk_norm: full}\n  pattern: [k]\n"},
      {"swan stack", "    g: {pos: none, mask: causal, logit: swan_row}\n    w: {pos: rope, mask: window, window: 4}\n"
                     "  pattern: [g, w]\n"},
      {"gated outputs", "    h: {pos: rope, mask: window, window: 5, gate: head}\n    e: {pos: none, mask: causal, gate: element}\n"
                        "  pattern: [h, e]\n"},
      {"fox, sinks, ssmax, partial rope", "    f: {pos: none, mask: causal, forget: true, sink: true, logit: ssmax}\n"
                                          "    w: {pos: rope, mask: window, window: 4, forget: true, rope_fraction: 0.5, "
                                          "qtemp_alpha: 0.3, qtemp_beta: 4}\n  pattern: [f, w]\n"},
      {"chunked", "    k: {pos: rope, mask: causal, chunk: 8, logit: ssmax}\n"
                  "    w: {pos: none, mask: window, window: 6, chunk: 5, forget: true}\n  pattern: [k, w]\n"},
      {"diff v2", "    k: {pos: rope, mask: causal, diff: true, logit: ssmax}\n"
                  "    w: {pos: none, mask: window, window: 6, diff: true, forget: true}\n  pattern: [k, w]\n"},
      {"sink tokens", "    k: {pos: rope, mask: window, window: 6, sink_tokens: 2, logit: ssmax}\n"
                      "    w: {pos: none, mask: causal, chunk: 5, sink_tokens: 3, forget: true}\n  pattern: [k, w]\n"},
      {"grape additive", "    k: {pos: none, mask: causal, additive: key}\n"
                         "    w: {pos: rope, mask: window, window: 5, additive: query_key, forget: true}\n  pattern: [k, w]\n"},
      {"rope frequency factors", "    k: {pos: rope, mask: causal, rope_freq_factors: [1, 0.8, 0.3, 0]}\n"
                                 "    w: {pos: rope, mask: window, window: 6, rope_freq_factors: [0.5, 0.5, 1, 2]}\n"
                                 "  pattern: [k, w]\n"},
      // the accumulated steps' running sum over the ranks (the ring's prefix), V rotated, GRAPE-M
      {"learned angles", "    k: {pos: rope, mask: causal, rope_angles: accumulated, angles_per_head: true, rotate_v: true}\n"
                         "    w: {pos: rope, mask: window, window: 6, rope_angles: accumulated, learned_freqs: head}\n"
                         "  pattern: [k, w]\n"},
  };
  for (const auto& [name, kinds] : models)
    for (int64_t T : {40, 37}) {
      // the global layers over the ring at T 40, the all-gather at T 37
      const dist::ContextExchange global = T == 40 ? dist::ContextExchange::Ring : dist::ContextExchange::AllGather;
      SCOPED_TRACE(name + " T " + std::to_string(T) + " " + dist::name(global));
      const Recipe r = parse_recipe("model:\n  layer_kinds:\n" + kinds, "ctx.yaml",
                                    {"model.d_model=32", "model.n_layers=2", "model.n_heads=4",
                                     name == "swa rope" ? "model.n_kv_heads=2" : "model.n_kv_heads=0",
                                     "data.seq_len=" + std::to_string(T)});
      nn::ModelConfig mc = r.model_config();
      mc.dtype = DType::F64;
      nn::Transformer m(mc, 5);
      Generator g(3);
      auto ints = [&](int64_t n) {
        std::vector<double> x = g.uniform({2, n}, 0, 250, DType::F64).to_vector();
        for (auto& v : x) v = std::floor(v);
        return Tensor::from_vector(x, {2, n}, DType::I64);
      };
      const Tensor ids = ints(T), targets = ints(T);
      // whole sequence
      m.loss(ids, targets).backward();
      std::vector<Tensor> full;
      for (auto& [n, p] : m.named_parameters()) full.push_back(p->grad().clone());
      const double loss_full = m.loss(ids, targets).item();
      m.zero_grad();
      // this rank's share: its mean weighted by its share of the tokens, gradients summed over the group
      nn::AttnCall call;
      const auto route = std::make_shared<dist::ContextRoute>(world(), T, global);
      call.route = route;
      const Tensor il = dist::local_rows(ids, 1, route->layout()), tl = dist::local_rows(targets, 1, route->layout());
      const double here = loss_weight(tl, Tensor());
      ag::Variable loss = ag::mul_scalar(m.loss(il, tl, Tensor(), call), here / (2.0 * T));
      std::vector<std::string> trace;
      ag::set_backward_trace(&trace);
      loss.backward();
      ag::set_backward_trace(nullptr);
      // every rank runs the same nodes in the same order: NCCL (one communication stream for the
      // context group's transfers and the gradient all-reduces that hooks post) deadlocks otherwise
      uint64_t h = kFnvOffset;
      for (const std::string& s : trace) h = fnv1a64(s.c_str(), s.size() + 1, h);
      const std::vector<int64_t> hs = world().all_gather(static_cast<int64_t>(h >> 1));
      for (int r = 1; r < N; ++r) EXPECT_EQ(hs[r], hs[0]) << "rank " << r << "'s backward runs another graph or order";
      EXPECT_NEAR(world().all_reduce_scalar(loss.item(), ReduceOp::Sum), loss_full, 1e-12);
      size_t i = 0;
      for (auto& [n, p] : m.named_parameters()) {
        Tensor gr = p->grad().clone();
        world().all_reduce(gr, ReduceOp::Sum);
        EXPECT_LE(max_diff(gr, full[i]), 1e-11 * (1 + max_abs(full[i]))) << n;
        ++i;
      }
      m.zero_grad();
    }
}

TEST_F(Context, EvaluationSplitOverTheGroupEqualsOneRank) {
  const int N = world().size();
  const std::string path = root() + "/ctx_eval_val.bin";
  if (world().rank() == 0) {
    std::filesystem::create_directories(root());
    Generator g(11);
    std::vector<std::vector<int32_t>> docs;
    for (int d = 0; d < 12; ++d) {
      std::vector<int32_t> doc;
      const int64_t n = 20 + 9 * d;
      for (double v : g.uniform({n}, 0, 250, DType::F64).to_vector()) doc.push_back(static_cast<int32_t>(v));
      docs.push_back(doc);
    }
    data::write_shard(path, docs);
  }
  world().barrier();
  const auto val = data::Shard::open(path);
  const std::vector<std::pair<std::string, std::string>> models = {
      {"rope", "    k: {pos: rope, mask: causal}\n  pattern: [k]\n"},
      {"swan stack", "    g: {pos: none, mask: causal}\n    w: {pos: rope, mask: window, window: 4}\n  pattern: [g, w]\n"},
  };
  for (const auto& [name, kinds] : models)
    for (const bool documents : {false, true}) {
      SCOPED_TRACE(name + (documents ? " documents" : ""));
      const Recipe r = parse_recipe("model:\n  layer_kinds:\n" + kinds, "ctx.yaml",
                                    {"model.d_model=32", "model.n_layers=2", "model.n_heads=4", "data.seq_len=32"});
      nn::ModelConfig mc = r.model_config();
      mc.dtype = DType::F64;
      nn::Transformer m(mc, 9);
      eval::EvalOptions o;
      o.train_len = 32;
      o.lengths = {37, 64};
      o.batch_size = 2;
      o.batches = 2;
      if (name == "swan stack") o.fit_swan_a = {4, 16};  // SWAN row scaling on the global NoPE layer, fitted
      if (documents) o.documents.mode = attn::DocumentMode::Masked;
      const eval::EvalReport one = eval::evaluate(m, *val, o);
      o.context = &world();
      const eval::EvalReport split = eval::evaluate(m, *val, o);
      ASSERT_EQ(split.lengths.size(), one.lengths.size());
      for (size_t i = 0; i < one.lengths.size(); ++i) {
        EXPECT_NEAR(split.lengths[i].loss, one.lengths[i].loss, 1e-12) << "length " << one.lengths[i].length;
        EXPECT_NEAR(split.lengths[i].last256_loss, one.lengths[i].last256_loss, 1e-12);
        EXPECT_EQ(split.lengths[i].tokens, one.lengths[i].tokens);
        EXPECT_EQ(split.lengths[i].swan_a, one.lengths[i].swan_a);
      }
      ASSERT_EQ(split.nll_by_position.size(), one.nll_by_position.size());
      ASSERT_EQ(one.nll_by_position.size(), 64u);
      EXPECT_LE(max_diff(Tensor::from_vector(split.nll_by_position, {64}, DType::F64),
                         Tensor::from_vector(one.nll_by_position, {64}, DType::F64)), 1e-12);
      ASSERT_EQ(split.swan_fit.size(), one.swan_fit.size());
      for (size_t i = 0; i < one.swan_fit.size(); ++i) EXPECT_EQ(split.swan_fit[i].best_a, one.swan_fit[i].best_a);
    }
  // a length that cannot be split is refused with the reason
  eval::EvalOptions o;
  o.lengths = {2 * N - 1};
  o.batch_size = 1;
  o.batches = 1;
  o.context = &world();
  nn::ModelConfig mc = tiny("ctx_eval_refuse", 1).model_config();
  nn::Transformer m(mc, 1);
  try {
    eval::evaluate(m, *val, o);
    ADD_FAILURE() << "a length shorter than 2N was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be split over"), std::string::npos) << e.what();
  }
}

TEST_F(Context, TrainingFollowsTheSingleRankRun) {
  const int N = world().size(), me = world().rank();
  // PoSE: the ranks of a sequence share its positions; with ALiBi, SWAN's row scale and Llama 4's
  // temperature in a window of 20 (the halo) and a global ALiBi layer with scale-invariant logits
  // (the ring), the logit terms read the drawn positions of keys other ranks hold
  for (const std::string kind : {"rope", "rope_pose", "alibi_pose"}) {
    std::vector<std::string> extra{"checkpoint.every=0", "data.seq_len=48", "model.n_heads=4"};
    if (kind != "rope") extra.insert(extra.end(), {"train.positions=pose", "train.position_max=300"});
    if (kind == "alibi_pose")
      extra.insert(extra.end(), {"model.layer_kinds.rope.pos=alibi", "model.layer_kinds.rope.logit=swan_row",
                                 "model.layer_kinds.rope.qtemp_alpha=0.3", "model.layer_kinds.rope.qtemp_beta=16",
                                 "model.layer_kinds.rope.mask=window", "model.layer_kinds.rope.window=20",
                                 "model.layer_kinds.g.pos=alibi", "model.layer_kinds.g.logit=scale_invariant",
                                 "model.pattern=[rope, g]"});
    // the single-rank run, on every rank alone (each in its own directories: no rank waits for another's data)
    TrainOptions alone;
    alone.quiet = true;
    std::vector<std::string> solo = extra;
    solo.push_back("data.cache_dir=" + root() + "/data_rank" + std::to_string(me));
    const std::vector<double> ref =
        hz::train::train(tiny("ctx1_" + kind + std::to_string(N) + "_" + std::to_string(me), 4, solo), alone).losses;
    std::vector<std::string> cp = extra;
    cp.push_back("parallel.context=" + std::to_string(N));
    TrainOptions o = on(&world());
    const std::vector<double> got = hz::train::train(tiny("ctxN_" + kind + std::to_string(N), 4, cp), o).losses;
    ASSERT_EQ(got.size(), ref.size());
    for (size_t s = 0; s < ref.size(); ++s) EXPECT_NEAR(got[s], ref[s], 2e-5 * (s + 1)) << kind << " step " << s + 1;
    EXPECT_LT(got.back(), got.front());
  }
}

TEST_F(Context, DataParallelTimesContextParallelFollowsDataParallelAlone) {
  // 4 ranks as 2 data-parallel groups of 2 context-parallel ranks, against 2 data-parallel ranks
  // that each hold whole sequences (the world's halves, each running that job on its own)
  if (world().size() != 4) GTEST_SKIP() << "needs 4 ranks";
  const int me = world().rank();
  const std::vector<std::string> extra{"checkpoint.every=0", "data.seq_len=48", "model.n_heads=4"};
  std::unique_ptr<dist::Communicator> half = world().split(me / 2);
  std::vector<std::string> dp = extra;
  dp.push_back("data.cache_dir=" + root() + "/data_half" + std::to_string(me / 2));
  const std::vector<double> ref =
      hz::train::train(tiny("dp2_half" + std::to_string(me / 2), 4, dp), on(half.get())).losses;
  std::vector<std::string> cp = extra;
  cp.push_back("parallel.context=2");
  const std::vector<double> got = hz::train::train(tiny("dp2_cp2", 4, cp), on(&world())).losses;
  ASSERT_EQ(got.size(), ref.size());
  for (size_t s = 0; s < ref.size(); ++s) EXPECT_NEAR(got[s], ref[s], 2e-5 * (s + 1)) << "step " << s + 1;
  EXPECT_LT(got.back(), got.front());
}
