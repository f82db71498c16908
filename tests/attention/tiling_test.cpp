// attention/tiling.h against brute force over (i, j): key ranges, their transpose, the nonempty
// rows and keys, and the block classes seen row-major (forward, CPU and CUDA) and key-major (the
// CUDA dK/dV pass) for thousands of random masks, alignments, ragged tiles and packed documents
// (two sequences with different cuts; the second is checked). The mask here is written from
// docs/methods.md's definition, independently of tiling.h.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "attention/accounting.h"
#include "attention/fused.h"
#include "attention/tiling.h"

using namespace hz;
using namespace hz::attn;

namespace {

struct Case {
  int64_t Tq, Tk, H;
  AttnConfig cfg;
  std::vector<int64_t> doc_of;  // document id of each absolute position of the checked sequence (empty: none)
  int64_t b = 0;                // the sequence checked
  bool reset = false;           // documents with position reset
};

// The position chunks count: absolute, or from the document's first position with position reset.
int64_t chunk_position(const Case& c, int64_t abs) {
  if (c.doc_of.empty() || !c.reset) return abs;
  int64_t first = abs;
  while (first > 0 && c.doc_of[first - 1] == c.doc_of[abs]) --first;
  return abs - first;
}

// Visibility straight from the definition: keys in [key_begin, key_end), distance t = p - j with
// p = q_offset + i, t >= min_distance, t < w for a bounded window (the first interval).
bool visible_main(const Case& c, int64_t h, int64_t i, int64_t j) {
  const int64_t off = c.cfg.q_offset < 0 ? c.Tk - c.Tq : c.cfg.q_offset;
  const int64_t kb = std::max<int64_t>(0, c.cfg.key_begin);
  const int64_t ke = c.cfg.key_end < 0 ? c.Tk : std::min(c.cfg.key_end, c.Tk);
  const int64_t w = c.cfg.window[h], t = off + i - j;
  const int64_t kp = c.cfg.key_position;  // key j is absolute position kp + j
  if (!c.doc_of.empty() && c.doc_of[kp + j] != c.doc_of[kp + off + i]) return false;  // another document
  const int64_t C = c.cfg.chunk;  // another chunk of C positions
  if (C > 0 && chunk_position(c, kp + j) / C != chunk_position(c, kp + off + i) / C) return false;
  return j >= kb && j < ke && t >= c.cfg.min_distance && t >= 0 && (w == 0 || t < w);
}
// Sink tokens: keys in [key_begin, key_end) at t >= min_distance among the first S positions of the
// query's document (of the sequence from absolute position 0 without documents).
bool visible_sink(const Case& c, int64_t i, int64_t j) {
  const int64_t off = c.cfg.q_offset < 0 ? c.Tk - c.Tq : c.cfg.q_offset;
  const int64_t kb = std::max<int64_t>(0, c.cfg.key_begin);
  const int64_t ke = c.cfg.key_end < 0 ? c.Tk : std::min(c.cfg.key_end, c.Tk);
  const int64_t kp = c.cfg.key_position, t = off + i - j;
  if (c.cfg.sink_tokens == 0 || j < kb || j >= ke || t < c.cfg.min_distance || t < 0) return false;
  if (c.doc_of.empty()) return kp + j < c.cfg.sink_tokens;
  int64_t first = kp + j;  // the first position of key j's document
  while (first > 0 && c.doc_of[first - 1] == c.doc_of[kp + j]) --first;
  return c.doc_of[kp + j] == c.doc_of[kp + off + i] && kp + j - first < c.cfg.sink_tokens;
}
// Prefix-LM: query and key both among the first P positions of one document (of the sequence).
bool visible_prefix(const Case& c, int64_t i, int64_t j) {
  if (c.cfg.prefix == 0) return false;
  const int64_t off = c.cfg.q_offset < 0 ? c.Tk - c.Tq : c.cfg.q_offset, kp = c.cfg.key_position;
  auto in_prefix = [&](int64_t abs) {
    if (c.doc_of.empty()) return abs < c.cfg.prefix;
    int64_t first = abs;
    while (first > 0 && c.doc_of[first - 1] == c.doc_of[abs]) --first;
    return abs - first < c.cfg.prefix;
  };
  const int64_t ke = c.cfg.key_end < 0 ? c.Tk : std::min(c.cfg.key_end, c.Tk);
  const bool same_doc = c.doc_of.empty() || c.doc_of[kp + j] == c.doc_of[kp + off + i];
  return j >= std::max<int64_t>(0, c.cfg.key_begin) && j < ke && same_doc && in_prefix(kp + j) && in_prefix(kp + off + i);
}
// The first interval: the mask's, or a prefix row's whole prefix
bool visible_first(const Case& c, int64_t h, int64_t i, int64_t j) {
  const int64_t off = c.cfg.q_offset < 0 ? c.Tk - c.Tq : c.cfg.q_offset;
  const bool prefix_row = off + i < c.Tk && visible_prefix(c, i, off + i);  // the row's own position
  return prefix_row ? visible_prefix(c, i, j) : visible_main(c, h, i, j);
}
bool visible(const Case& c, int64_t h, int64_t i, int64_t j) {
  return visible_first(c, h, i, j) || visible_sink(c, i, j);
}

Case random_case(std::mt19937_64& rng) {
  auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  Case c;
  c.Tk = uni(1, 40);
  c.Tq = uni(1, 40);
  c.H = uni(1, 3);
  c.cfg.q_offset = c.Tq <= c.Tk && uni(0, 1) ? -1 : uni(0, 45);
  c.cfg.key_begin = uni(0, 3) == 0 ? uni(-2, c.Tk) : 0;
  c.cfg.key_end = uni(0, 3) == 0 ? uni(0, c.Tk + 3) : -1;
  c.cfg.min_distance = uni(0, 3) == 0 ? uni(0, 12) : 0;
  for (int64_t h = 0; h < c.H; ++h) c.cfg.window.push_back(uni(0, 2) == 0 ? 0 : uni(1, 30));
  c.cfg.block_q = uni(1, 9);
  c.cfg.block_k = uni(1, 9);
  const int64_t off = c.cfg.q_offset < 0 ? c.Tk - c.Tq : c.cfg.q_offset;
  if (c.cfg.min_distance == 0 && off + c.Tq <= c.Tk && uni(0, 1)) {  // packed documents, 2 sequences
    // the keys may start inside the documents' sequences (a context-parallel halo buffer)
    c.cfg.key_position = uni(0, 1) ? uni(1, 10) : 0;
    const int64_t T = c.Tk + c.cfg.key_position + (uni(0, 1) ? uni(0, 5) : 0);
    std::vector<int64_t> cu{0};
    for (int64_t b = 0; b < 2; ++b) {
      for (int64_t t = 1; t < T; ++t)
        if (uni(0, 5) == 0) cu.push_back(b * T + t);  // a cut before position t
      cu.push_back((b + 1) * T);
    }
    c.reset = uni(0, 1) == 1;
    c.cfg.documents = std::make_shared<Documents>(2, T, cu, c.reset);
    c.b = 1;
    int64_t d = 0;
    for (size_t k = 0; k + 1 < cu.size(); ++k)
      if (cu[k] >= T) {
        for (int64_t g = cu[k]; g < cu[k + 1]; ++g) c.doc_of.push_back(d);
        ++d;
      }
  }
  if (c.cfg.min_distance == 0 && uni(0, 2) == 0) {  // chunked attention, its chunks from absolute position 0
    c.cfg.chunk = uni(1, 12);
    if (!c.cfg.documents && uni(0, 1)) c.cfg.key_position = uni(1, 10);
  }
  if (uni(0, 2) == 0) {  // sink tokens beside the windows and chunks
    c.cfg.sink_tokens = uni(1, 6);
    if (!c.cfg.documents && uni(0, 1)) c.cfg.key_position = uni(0, 6);
  }
  // prefix-LM: in calls that take the keys from 0 and put the queries last among them (a KV cache's
  // buffer: key_end = the keys held so far)
  const int64_t ke = c.cfg.key_end < 0 ? c.Tk : std::min(c.cfg.key_end, c.Tk);
  if (c.cfg.min_distance == 0 && c.cfg.key_begin <= 0 && uni(0, 2) == 0 && c.Tq <= ke) {
    c.cfg.q_offset = ke - c.Tq;
    if (!c.cfg.documents || c.cfg.q_offset + c.Tq <= c.Tk) c.cfg.prefix = uni(1, 15);
  }
  return c;
}

std::string describe(const Case& c) {
  std::string w;
  for (int64_t x : c.cfg.window) w += std::to_string(x) + " ";
  return "Tq " + std::to_string(c.Tq) + " Tk " + std::to_string(c.Tk) + " q_offset " + std::to_string(c.cfg.q_offset) +
         " keys [" + std::to_string(c.cfg.key_begin) + ", " + std::to_string(c.cfg.key_end) + ") min_distance " +
         std::to_string(c.cfg.min_distance) + " windows " + w + "tiles " + std::to_string(c.cfg.block_q) + "x" +
         std::to_string(c.cfg.block_k) + (c.cfg.chunk ? " chunk " + std::to_string(c.cfg.chunk) : "") +
         (c.cfg.sink_tokens ? " sink_tokens " + std::to_string(c.cfg.sink_tokens) : "") +
         (c.cfg.prefix ? " prefix " + std::to_string(c.cfg.prefix) : "") +
         (c.cfg.key_position && !c.cfg.documents ? " key_position " + std::to_string(c.cfg.key_position) : "") +
         (c.cfg.documents ? " " + c.cfg.documents->describe() + " key_position " + std::to_string(c.cfg.key_position)
                          : "");
}

// A block's class: Skip when no pair is visible, Full when one interval alone covers every pair (the
// kernels then need no mask), else Boundary.
BlockClass brute_class(const Case& c, int64_t h, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  int64_t n = 0, nm = 0, ns = 0;
  for (int64_t i = i0; i <= i1; ++i)
    for (int64_t j = j0; j <= j1; ++j) {
      n += visible(c, h, i, j);
      nm += visible_first(c, h, i, j);
      ns += visible_sink(c, i, j) && !visible_first(c, h, i, j);
    }
  const int64_t all = (i1 - i0 + 1) * (j1 - j0 + 1);
  return n == 0 ? BlockClass::Skip : (nm == all || ns == all ? BlockClass::Full : BlockClass::Boundary);
}

}  // namespace

TEST(Tiling, RangesAndBlockClassesMatchBruteForce) {
  std::mt19937_64 rng(2024);
  int64_t reach_met = 0;  // rows whose farthest key lies exactly at a bounded head's reach
  for (int trial = 0; trial < 10000; ++trial) {
    const Case c = random_case(rng);
    const AttnKernelParams P = make_kernel_params(c.cfg, c.cfg.documents ? 2 : 1, c.H, 1, c.Tq, c.Tk, 8);
    const int64_t b = c.b;
    SCOPED_TRACE(describe(c));
    for (int64_t h = 0; h < c.H; ++h) {
      // key_range, visible_count, nonempty_rows
      int64_t first_row = -1, last_row = -2;
      for (int64_t i = 0; i < c.Tq; ++i) {
        int64_t lo = -1, hi = -2, n = 0, slo = -1, shi = -2, ns = 0;
        for (int64_t j = 0; j < c.Tk; ++j)
          if (visible_first(c, h, i, j)) {
            if (lo < 0) lo = j;
            hi = j;
            ++n;
          } else if (visible_sink(c, i, j)) {  // the second interval: the sinks the first misses
            if (slo < 0) slo = j;
            shi = j;
            ++ns;
          }
        ASSERT_EQ(visible_count(P, b, h, i), n + ns) << "row " << i;
        // attn::head_reach, what the KV cache's rings and the context halo keep: no key farther back
        // (a prefix's rows see their whole prefix: outside its reach)
        const int64_t reach = c.cfg.prefix > 0 ? 0 : head_reach(c.cfg, static_cast<size_t>(h)),
                      off = c.cfg.q_offset < 0 ? c.Tk - c.Tq : c.cfg.q_offset;
        if (reach > 0 && lo >= 0) {
          ASSERT_LT(off + i - lo, reach) << "row " << i;
          reach_met += off + i - lo == reach - 1;
        }
        if (const int64_t most = max_reach(c.cfg); most > 0) {  // every head bounded, none beyond it
          ASSERT_GT(head_reach(c.cfg, static_cast<size_t>(h)), 0);
          ASSERT_GE(most, head_reach(c.cfg, static_cast<size_t>(h)));
        }
        const IndexRange sr = sink_range(P, b, h, i);
        if (ns > 0) {
          ASSERT_EQ(sr.lo, slo) << "row " << i;
          ASSERT_EQ(sr.hi, shi) << "row " << i;
          ASSERT_EQ(shi - slo + 1, ns) << "a row's sink tokens are an interval";
          ASSERT_LT(shi, lo < 0 ? c.Tk : lo) << "the sinks come before the first interval";
        } else {
          ASSERT_TRUE(range_empty(sr)) << "row " << i;
        }
        if (n > 0) {
          const IndexRange r = key_range(P, b, h, i);
          ASSERT_EQ(r.lo, lo) << "row " << i;
          ASSERT_EQ(r.hi, hi) << "row " << i;
          ASSERT_EQ(hi - lo + 1, n) << "visible keys of a row are an interval";
          if (first_row < 0) first_row = i;
          else ASSERT_EQ(last_row, i - 1) << "nonempty rows are an interval";
          last_row = i;
        } else {
          ASSERT_TRUE(range_empty(key_range(P, b, h, i))) << "row " << i;
        }
      }
      const IndexRange rows = nonempty_rows(P, b, h);
      if (first_row < 0) {
        ASSERT_TRUE(range_empty(rows));
      } else {
        ASSERT_EQ(rows.lo, first_row);
        ASSERT_EQ(rows.hi, last_row);
      }
      // query_range (transpose), nonempty_keys
      int64_t first_key = -1, last_key = -2;
      for (int64_t j = 0; j < c.Tk; ++j) {
        int64_t lo = -1, hi = -2, slo = -1, shi = -2;
        for (int64_t i = 0; i < c.Tq; ++i)
          if (visible_first(c, h, i, j)) {
            if (lo < 0) lo = i;
            hi = i;
          } else if (visible_sink(c, i, j)) {
            if (slo < 0) slo = i;
            shi = i;
          }
        const IndexRange sq = sink_rows(P, b, h, j);
        if (slo < 0) {
          ASSERT_TRUE(range_empty(sq)) << "key " << j << " (sink rows)";
        } else {
          ASSERT_EQ(sq.lo, slo) << "key " << j << " (sink rows)";
          ASSERT_EQ(sq.hi, shi) << "key " << j << " (sink rows)";
        }
        const IndexRange r = query_range(P, b, h, j);
        if (lo < 0) {
          ASSERT_TRUE(range_empty(r)) << "key " << j;
        } else {
          ASSERT_EQ(r.lo, lo) << "key " << j;
          ASSERT_EQ(r.hi, hi) << "key " << j;
          if (first_key < 0) first_key = j;
          last_key = j;
        }
      }
      const IndexRange keys = nonempty_keys(P, b, h);
      if (first_key < 0) {
        ASSERT_TRUE(range_empty(keys));
      } else {
        ASSERT_EQ(keys.lo, first_key);
        ASSERT_EQ(keys.hi, last_key);
      }
      // block classes, row-major (forward) and key-major (dK/dV): the same pairs, the same classes
      const int64_t Bq = P.block_q, Bk = P.block_k;
      for (int64_t qb = 0; qb < num_blocks(c.Tq, Bq); ++qb) {
        const int64_t i0 = qb * Bq, i1 = std::min(c.Tq, i0 + Bq) - 1;
        const BlockSpans rs = key_block_spans(P, b, h, i0, i1, Bk);
        int64_t visits = 0, want_visits = 0, full = 0;
        for (int64_t kb = spans_next(rs, -1); kb <= spans_last(rs); kb = spans_next(rs, kb)) {
          ++visits;
          full += spans_class(rs, kb) == BlockClass::Full;
          // a block only the sinks meet, narrowed to their keys, keeps every visible pair
          int64_t j0 = kb * Bk, nk = std::min(c.Tk - j0, Bk);
          const int64_t jb = j0, je = j0 + nk;
          narrow_to_sinks(rs, kb, j0, nk);
          ASSERT_TRUE(nk >= 1 && j0 >= jb && j0 + nk <= je) << "key block " << kb;
          for (int64_t i = i0; i <= i1; ++i)
            for (int64_t j = jb; j < je; ++j) {
              if (visible(c, h, i, j)) {
                ASSERT_TRUE(j >= j0 && j < j0 + nk) << "row " << i << " key " << j;
              }
            }
        }
        for (int64_t kb = 0; kb < num_blocks(c.Tk, Bk); ++kb) {
          const int64_t j0 = kb * Bk, j1 = std::min(c.Tk, j0 + Bk) - 1;
          const BlockClass want = brute_class(c, h, i0, i1, j0, j1);
          want_visits += want != BlockClass::Skip;
          ASSERT_EQ(spans_class(rs, kb), want) << "query block " << qb << " key block " << kb << " (row-major)";
          const BlockSpans cs = query_block_spans(P, b, h, j0, j1, Bq);
          ASSERT_EQ(spans_class(cs, qb), want) << "query block " << qb << " key block " << kb << " (key-major)";
        }
        ASSERT_EQ(visits, want_visits) << "query block " << qb << ": the iteration visits each visible block once";
        ASSERT_EQ(spans_blocks(rs), visits) << "query block " << qb;
        ASSERT_EQ(spans_full_blocks(rs), full) << "query block " << qb;
      }
    }
  }
  EXPECT_GT(reach_met, 100) << "the reach is the farthest key, not a loose bound";
}

TEST(Tiling, LogitCoefficientsFollowTheirDefinitions) {
  // scale-invariant test vectors (docs/methods.md, tau = 10), in double and in float
  const double t[] = {0, 1, 10, 100, 1000};
  const double a_want[] = {1, 1.0912, 1.5448, 2.4074, 3.1985}, m_want[] = {0, -0.1906, -1.3863, -4.7958, -9.2302};
  for (int k = 0; k < 5; ++k) {
    double a, m;
    scale_invariant_coef<double>(t[k], 10.0, a, m);
    EXPECT_NEAR(a, a_want[k], 1e-4);
    EXPECT_NEAR(m, m_want[k], 1e-4);
    float af, mf;
    scale_invariant_coef<float>(static_cast<float>(t[k]), 10.f, af, mf);
    EXPECT_NEAR(af, a, 1e-6 * a);
    EXPECT_NEAR(mf, m, 1e-6 * std::max(1.0, std::fabs(m)));
  }
  AttnConfig cfg;
  cfg.window = {0, 5};
  cfg.alibi_slope = {0.5, 0.25};
  cfg.logit = LogitKind::LogN;
  AttnKernelParams P = make_kernel_params(cfg, 1, 2, 1, 9, 12, 16);
  EXPECT_DOUBLE_EQ(P.scale, 0.25);
  EXPECT_EQ(P.q_offset, 3);
  for (int64_t i = 0; i < 9; ++i) {
    EXPECT_DOUBLE_EQ(row_factor<double>(P, 0, 0, i), std::log(static_cast<double>(3 + i + 1)));  // causal: p + 1 keys
    EXPECT_DOUBLE_EQ(row_factor<double>(P, 0, 1, i), std::log(std::min<double>(3 + i + 1, 5.0)));  // window 5
  }
  const LogitCoef<double> c = logit_coef<double>(P, 1, 2.0, 7.0);  // identity transform + ALiBi
  EXPECT_DOUBLE_EQ(c.mul, 2.0);
  EXPECT_DOUBLE_EQ(c.add, -0.25 * 7);
  P.logit = LogitKind::SwanRow;
  P.swan_a = 362.0;
  EXPECT_DOUBLE_EQ(row_factor<double>(P, 0, 0, 4), std::log(362.0 + 7) / std::log(362.0));
  P.logit = LogitKind::Temperature;
  P.beta = 1.3;
  EXPECT_DOUBLE_EQ(row_factor<double>(P, 0, 1, 4), 1.3);
  P.logit = LogitKind::ScaleInvariant;
  P.tau = 10.0;
  P.alibi = false;
  const LogitCoef<double> s = logit_coef<double>(P, 0, 1.5, 10.0);
  EXPECT_NEAR(s.mul, 1.5 * 1.5448, 1.5e-4);
  EXPECT_NEAR(s.add, -1.3863, 1e-4);
}

TEST(Tiling, PlanningRefusesWhatItCannotRepresent) {
  AttnConfig cfg;
  EXPECT_THROW(make_kernel_params(cfg, 1, 3, 2, 4, 4, 8), ShapeError);           // heads
  EXPECT_THROW(make_kernel_params(cfg, 1, kMaxAttnHeads * 2, 1, 4, 4, 8), ShapeError);
  EXPECT_THROW(make_kernel_params(cfg, 1, 1, 1, 6, 4, 8), ShapeError);           // Tq > Tk without q_offset
  cfg.q_offset = 0;
  EXPECT_NO_THROW(make_kernel_params(cfg, 1, 1, 1, 6, 4, 8));
  cfg.window = {-1};
  EXPECT_THROW(make_kernel_params(cfg, 1, 1, 1, 6, 4, 8), ValueError);
  cfg.window = {0, 0};
  EXPECT_THROW(make_kernel_params(cfg, 1, 1, 1, 6, 4, 8), ShapeError);
}

TEST(Tiling, AccountingUsesTheKernelsBlocks) {
  // attention_cost's block count equals the blocks key_blocks() hands the kernels
  AttnConfig cfg;
  cfg.window = scope_windows(4, 300);
  cfg.block_q = 64;
  cfg.block_k = 32;
  const LayerCost cost = attention_cost(cfg, 4, 300, 300, 64);
  const AttnKernelParams P = make_kernel_params(cfg, 1, 4, 1, 300, 300, 64);
  int64_t blocks = 0;
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i0 = 0; i0 < 300; i0 += 64) blocks += span_blocks(key_blocks(P, 0, h, i0, std::min<int64_t>(300, i0 + 64) - 1, 32));
  EXPECT_EQ(cost.blocks, blocks);
  EXPECT_GT(blocks, 0);
}

TEST(Tiling, KernelGridsCoverEveryTileOnce) {
  AttnConfig cfg;
  const AttnKernelParams P = make_kernel_params(cfg, 3, 6, 2, 70, 130, 8);
  for (int64_t Bq : {1, 16, 64, 128}) {
    std::vector<int> seen(3 * 6 * 70, 0);
    for (int64_t cta = 0; cta < 3 * 6 * num_blocks(70, Bq); ++cta) {
      const QueryTile t = query_tile(P, cta, Bq);
      ASSERT_EQ(t.hk, t.h / 3);
      ASSERT_LE(t.i1 - t.i0 + 1, Bq);
      for (int64_t i = t.i0; i <= t.i1; ++i) ++seen[(t.b * 6 + t.h) * 70 + i];
    }
    for (int s : seen) ASSERT_EQ(s, 1) << "query tile " << Bq;
  }
  for (int64_t Bk : {1, 64}) {
    std::vector<int> seen(3 * 2 * 130, 0);
    for (int64_t cta = 0; cta < 3 * 2 * num_blocks(130, Bk); ++cta) {
      const KeyTile t = key_tile(P, cta, Bk);
      for (int64_t j = t.j0; j <= t.j1; ++j) ++seen[(t.b * 2 + t.hk) * 130 + j];
    }
    for (int s : seen) ASSERT_EQ(s, 1) << "key tile " << Bk;
  }
}

// Under a causal mask a head's tiles come heaviest first (the grid ends on light ones): the key
// blocks a query tile visits, and the query blocks a key tile meets, never grow along the grid.
TEST(Tiling, HeavierCausalTilesComeFirstWithinAHead) {
  AttnConfig cfg;
  const AttnKernelParams P = make_kernel_params(cfg, 2, 4, 2, 300, 300, 8);
  for (int64_t B : {16, 64}) {
    const int64_t n = num_blocks(300, B);
    for (int64_t bh = 0; bh < 2 * 4; ++bh) {
      int64_t prev = INT64_MAX;
      for (int64_t cta = bh * n; cta < (bh + 1) * n; ++cta) {
        const QueryTile t = query_tile(P, cta, B);
        const int64_t w = span_blocks(key_blocks(P, t.b, t.h, t.i0, t.i1, 32));
        EXPECT_LE(w, prev) << "query tile " << cta;
        prev = w;
      }
    }
    for (int64_t bh = 0; bh < 2 * 2; ++bh) {
      int64_t prev = INT64_MAX;
      for (int64_t cta = bh * n; cta < (bh + 1) * n; ++cta) {
        const KeyTile t = key_tile(P, cta, B);
        const int64_t w = span_blocks(query_blocks(P, t.b, t.hk * 2, t.j0, t.j1, 32));
        EXPECT_LE(w, prev) << "key tile " << cta;
        prev = w;
      }
    }
  }
}
