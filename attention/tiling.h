// Horizon: the index and coefficient arithmetic of the fused attention op, written once as plain
// __host__ __device__ functions over a POD parameter struct. The CPU kernel (fused_cpu.cpp), the
// CUDA kernels (attention/cuda/) and the cost accounting (accounting.cpp) all call these, so both
// devices mask, skip and classify exactly the same blocks (tests/attention/tiling_test.cpp checks
// every function against brute force over (i, j)).
//
// Legend: B batch, H query heads, Hkv key/value heads (G = H / Hkv query heads per kv head; query
// head h reads kv head h / G), Tq queries, Tk keys, D head dim; i a query row (0-based, i < Tq),
// j a key (0 <= j < Tk), Bq x Bk the tiles (query rows x keys) of a block.
//
// Alignment: query row i sits at absolute position p_i = q_offset + i, key j at position j. The op
// resolves q_offset = Tk - Tq by default (the queries are the LAST Tq positions: decoding, chunked
// prefill, LaMPE regions). Distance t = p_i - j.
//
// Mask: key j is visible to row i of head h (in sequence b) iff
//     key_begin <= j < key_end,   t >= min_distance (>= 0, so causal),   t < window[h] if window[h] > 0,
//     with packed documents start_b(p_i) <= j: the key lies in the query's document,
//     and with chunked attention (chunk C > 0, Llama 4's) j lies in p_i's chunk: chunks are the runs
//     of C positions from absolute position 0 (key_position + j), or from the document's start with
//     packed documents and position reset, so a query sees keys from its chunk's start to itself;
//   or (sink tokens S > 0, StreamingLLM's attention sinks) j is one of the first S positions of p_i's
//     document (of the sequence, absolute positions 0 .. S-1, without documents), inside the key
//     limits, with t >= min_distance: a second interval before the first (sink_range below);
//   or (prefix-LM, prefix P > 0) p_i and j both lie in the first P positions of one document (of the
//     sequence): the prefix attends bidirectionally (t < 0 there; logit terms read |t|), and a row
//     of the prefix sees the whole prefix, whatever its window or chunk. Prefix calls take the keys
//     from 0 and put the queries last among them (make_kernel_params checks it).
// Packed documents: start_b(p) / end_b(p) are the first position and one past the last of the
// document holding position p of sequence b (doc_start / doc_end, (B, Tk) int32, built from the
// loader's cumulative lengths by attention/documents.h, indexed by absolute position: key j is
// absolute key_position + j, fused.h). A key before the query is in the query's
// document iff it is at or after the document's start, so the document rule only raises lo.
// Row i's visible keys form the interval key_range(i) = [lo_i, hi_i] (empty when lo_i > hi_i) with
//     lo_i = max(key_begin, p_i - window + 1, start_b(p_i), chunk_start(p_i)),   hi_i = min(key_end - 1, p_i - min_distance).
// Each ingredient of lo_i is a lower-bound term (below: KeyBegin, Window, Document, Chunk), non-decreasing
// along the rows, with its transpose and its reach; key_range, query_range (the window's transpose
// written out there), nonempty_rows/keys, sink_rows, logn_count and attn::head_reach fold over the
// one list of them, so an ingredient that raises lo is written once (its term) and named once
// (term::BoundsFrom).
// Both ends are non-decreasing in i, and a nonempty row's hi reaches the next row's lo (no gaps; with
// documents min_distance must be 0), so (1) the rows with a visible key form an interval
// (nonempty_rows), (2) the visible keys of a run of consecutive rows form one interval, and a query
// block touches exactly the key blocks from the first nonempty row's lo to the last's hi
// (key_blocks), and (3) the transpose holds too: the rows that see key j are an interval
// (query_range: p_i < end_b(j) with documents), used by the key-major backward. A block is Full
// when every (i, j) in it is visible (no masking needed), Boundary when some are, Skip when none
// are: a kernel never reads a Skip block. With documents a query block inside one document meets
// only that document's key blocks: a pack of short documents costs what the documents cost.
//
// Logits: L_ij = r_i * a_t * s_ij + m_t - slope_h * t,  s_ij = scale * q_i . k_j, with
//   identity        r = 1,                                    a = 1, m = 0;
//   scale_invariant a_t = sqrt(2 ln(1 + t/tau) + 1), m_t = -2 ln(1 + t/tau) (computed with log1p);
//   logn            r = c_h ln(n_i), n_i the number of visible keys of row i (SSMax; c_h per head,
//                   learned or fixed; row_factor() returns ln(n_i), the kernels multiply by c_h);
//                   with documents n_i counts the keys of the row's document only (the mask does
//                   it); with logn_position n_i = P_i + 1 instead (LogN), P_i the row's position;
//   swan_row        r = ln(swan_a + n) / ln(swan_a), n = key_position + p_i (the absolute position),
//                   or p_i - start_b(p_i) (the position inside the document) with position reset;
//   temperature     r = beta; with documents and DroPE's beta = 1 + c ln s (temp_c != 0), s is
//                   each row's document length over train_len (s <= 1: beta = 1), the s the
//                   document would get evaluated alone;
//   ALiBi (position encoding alibi) adds -slope_h * t to any of them, and GRAPE's additive term
//   -t (dist_q_i + dist_k_j) (per-token rates, dist_rate below) likewise; Llama 4's temperature
//   multiplies r by 1 + alpha ln(floor((P_i + 1) / beta) + 1) (qtemp_alpha != 0). P_i, the row's
//   position: key_position + p_i, or p_i - start_b(p_i) with position reset.
// Token positions (positions != null: PoSE's, randomized or real-valued positions drawn by the data,
//   data/positions.h): token j of sequence b carries the position pi_b(j) = positions[b, key_position
//   + j] instead of its index. The logit terms read them: the distance of ALiBi and scale-invariant
//   attention becomes t = pi_b(p_i) - pi_b(j) (|t| in a prefix), and P_i = pi_b(p_i) for LogN by
//   position, SWAN's row and Llama 4's temperature. The mask, the block arithmetic and SSMax's
//   visible count stay on indices (a window or chunk counts tokens). Not with packed documents.
#pragma once
#include <math.h>

#include <cstdint>
#include <type_traits>

#include "attention/spec.h"
#include "core/hd.h"
#include "core/math.h"

namespace hz::attn {

constexpr int kMaxAttnHeads = 128;  // per-head windows and slopes travel inside the parameters

// Everything a kernel needs, resolved once per call by make_kernel_params() (fused.h). Plain old
// data: passed by value to CUDA kernels.
struct AttnKernelParams {
  int64_t B = 0, H = 0, Hkv = 0, G = 0, Tq = 0, Tk = 0, D = 0;
  int64_t q_offset = 0;               // absolute position of query row 0
  int64_t key_begin = 0, key_end = 0; // resolved: 0 <= key_begin, key_end <= Tk
  int64_t min_distance = 0;           // >= 0
  int64_t block_q = 64, block_k = 64; // tiles of the CPU kernel and the CUDA reference kernels
  LogitKind logit = LogitKind::Identity;
  bool alibi = false;
  double scale = 1.0;                 // 1/sqrt(D) unless given
  int64_t chunk = 0;                  // chunked attention: C positions per chunk (0 = off; needs min_distance 0)
  int64_t sink_tokens = 0;            // the first S positions of each document stay visible (0 = off)
  int64_t prefix = 0;                 // prefix-LM: the first P positions of each document attend bidirectionally
  double tau = 10.0, swan_a = 362.0, beta = 1.0;
  double temp_c = 0.0;                // temperature beta = 1 + c ln s per document (documents only)
  bool logn_position = false;         // logn's n: the position + 1 instead of the visible keys
  double qtemp_alpha = 0.0, qtemp_beta = 8192.0;  // Llama 4's position temperature (0 = off)
  int64_t temp_train_len = 0;
  // Packed documents (null: one document per sequence). Device pointers on CUDA; row b of each is
  // sequence b's start_b / end_b over positions [0, Tk). The op keeps the tensors alive.
  const int32_t* doc_start = nullptr;
  const int32_t* doc_end = nullptr;
  int64_t doc_T = 0;                  // the documents' sequence length (the tables' row stride)
  bool pos_reset = false;             // position-dependent logit terms use the position in the document
  int64_t key_position = 0;           // absolute position of key 0 (documents, SWAN's row; fused.h)
  bool sink = false;                  // a sink logit per head joins each row's denominator (fused.h)
  bool fox = false;                   // FoX: logits gain c[q_offset + i] - c[j] (fused.h)
  int64_t fox_T = 0;                  // FoX: the length of c's rows, >= Tk and q_offset + Tq (the op: Tk)
  bool logn_whole_row = false;        // logn's visible count ignores the key limits (fused.h)
  const double* positions = nullptr;  // token positions (B, positions_T), indexed by key_position + j (null: indices)
  int64_t positions_T = 0;
  // GRAPE's additive distance term (fused.h AttnTerms::dist_q / dist_k): logits gain -|t| (dist_q_i +
  // dist_k_j), t the distance ALiBi reads; dist_q (B, H, Tq) and dist_k (B, H, Tk) f64 on the call's
  // device, contiguous, null = 0 (dist_rate below).
  bool dist = false;                  // the term is on (either pointer set; planning reads this alone)
  const double* dist_q = nullptr;
  const double* dist_k = nullptr;
  int64_t window[kMaxAttnHeads] = {};  // per query head, 0 = unbounded
  double slope[kMaxAttnHeads] = {};    // ALiBi slope per query head (used when alibi)
};

// The tiles (query rows x keys) of a call's forward and backward kernels.
struct AttnTiles {
  int64_t fwd_q, fwd_k, bwd_q, bwd_k;
  bool tensor_core = false;
};

struct IndexRange {  // [lo, hi], empty when lo > hi
  int64_t lo, hi;
};
HZ_HD bool range_empty(IndexRange r) { return r.lo > r.hi; }

// ---- masks -------------------------------------------------------------------------------------
HZ_HD bool has_documents(const AttnKernelParams& p) { return p.doc_start != nullptr; }
// First position and one past the last of the document holding key position pos (< Tk) of
// sequence b, in key positions (the tables hold absolute positions; key j is absolute
// key_position + j, so a document that began before key 0 has a negative start).
HZ_HD int64_t doc_start_of(const AttnKernelParams& p, int64_t b, int64_t pos) {
  return p.doc_start[b * p.doc_T + p.key_position + pos] - p.key_position;
}
HZ_HD int64_t doc_end_of(const AttnKernelParams& p, int64_t b, int64_t pos) {
  return p.doc_end[b * p.doc_T + p.key_position + pos] - p.key_position;
}

// Whether this compilation handles chunks, sink tokens, a prefix, token positions and GRAPE's distance term. The device pass of
// the tensor-core kernels' plain variant (attention/cuda/attn_mma.cu defines HZ_TILING_PLAIN) leaves
// them out: the extra index arithmetic spilled the dK/dV kernel's registers past its budget
// (tests/kernel_registers.sh), and calls that have them run the general variant
// (attn_mma_general.cu, attention/cuda/mma_body.h). Host code and every other kernel handle them;
// device code is compiled per file (no relocatable device code), so no two definitions of these
// inline functions ever meet.
#if defined(__CUDA_ARCH__) && defined(HZ_TILING_PLAIN)
#define HZ_CHUNKS(p) false
#define HZ_SINK_TOKENS(p) false
#define HZ_PREFIX(p) false
#define HZ_TOKEN_POSITIONS(p) false
#define HZ_DIST(p) false
#else
#define HZ_CHUNKS(p) ((p).chunk > 0)
#define HZ_SINK_TOKENS(p) ((p).sink_tokens > 0)
#define HZ_PREFIX(p) ((p).prefix > 0)
#define HZ_TOKEN_POSITIONS(p) ((p).positions != nullptr)
#define HZ_DIST(p) ((p).dist)
#endif

// The first position of the document holding key position pos (of the sequence, key index
// -key_position, without documents): where sink tokens and a prefix count from.
HZ_HD int64_t sink_origin(const AttnKernelParams& p, int64_t b, int64_t pos) {
  return has_documents(p) ? doc_start_of(p, b, pos) : -p.key_position;
}
// Prefix-LM: one past the last prefix position of the document holding pos (its first P positions,
// fewer when the document is shorter).
HZ_HD int64_t prefix_end_of(const AttnKernelParams& p, int64_t b, int64_t pos) {
  int64_t e = sink_origin(p, b, pos) + p.prefix;
  if (has_documents(p) && doc_end_of(p, b, pos) < e) e = doc_end_of(p, b, pos);
  return e;
}

// Chunked attention (p.chunk > 0): the first key of the chunk holding key position pos (< Tk), and one
// past its last, in key indices. Chunks count from absolute position 0 (key index -key_position), or
// from the document's start with packed documents and position reset.
// (32-bit division: positions and C stay below 2^25, and a 64-bit one costs the CUDA kernels registers)
HZ_HD int64_t chunk_start_of(const AttnKernelParams& p, int64_t b, int64_t pos) {
  const int64_t origin = has_documents(p) && p.pos_reset ? doc_start_of(p, b, pos) : -p.key_position;
  const int32_t off = static_cast<int32_t>(pos - origin), c = static_cast<int32_t>(p.chunk);
  return origin + static_cast<int64_t>(off - off % c);
}
HZ_HD int64_t chunk_end_of(const AttnKernelParams& p, int64_t b, int64_t pos) {
  return chunk_start_of(p, b, pos) + p.chunk;
}

// ---- lower-bound terms ---------------------------------------------------------------------------
// Each ingredient that raises a row's first visible key lo_i is a term: a stateless struct of
//   on(p, h)                whether it bounds the rows of head h in this call;
//   key_lo(p, b, h, pos)    the lowest key it lets the query at key position pos see (when on),
//                           non-decreasing in pos;
//   last_row(p, b, h, j)    its transpose: the last query row it lets see key j (an index that may
//                           lie outside [0, Tq)): key_lo(q_offset + i) <= j iff i <= last_row(j), for
//                           a key inside the call's limits (query_range refuses the others first);
//   reach(c, h)             how far back it lets a query see, key_lo(pos) > pos - reach (t < reach),
//                           0 when it bounds no distance; c an AttnConfig or AttnKernelParams
//                           (attn::head_reach in fused.h reads the same terms).
// The range functions below fold over a list of them (the max of key_lo, the min of last_row, the
// nearest nonzero reach; a list's first term bounds every row and starts the folds), so a new
// ingredient is one struct here and one name in BoundsFrom (query_range writes the window's transpose
// out by hand, for the dK/dV kernels' registers, and folds the rest). Sink tokens and the prefix are
// second intervals, not bounds: written out where they apply.
namespace term {
struct KeyBegin {  // the call's first key
  HZ_HD static bool on(const AttnKernelParams&, int64_t) { return true; }
  HZ_HD static int64_t key_lo(const AttnKernelParams& p, int64_t, int64_t, int64_t) { return p.key_begin; }
  HZ_HD static int64_t last_row(const AttnKernelParams& p, int64_t, int64_t, int64_t) { return p.Tq - 1; }
  template <class C>
  HZ_HD static int64_t reach(const C&, int64_t) { return 0; }
};
struct SequenceStart {  // the sequence's first position (key index -key_position), whatever the call's limits
  HZ_HD static bool on(const AttnKernelParams&, int64_t) { return true; }
  HZ_HD static int64_t key_lo(const AttnKernelParams& p, int64_t, int64_t, int64_t) { return -p.key_position; }
  HZ_HD static int64_t last_row(const AttnKernelParams& p, int64_t, int64_t, int64_t) { return p.Tq - 1; }
  template <class C>
  HZ_HD static int64_t reach(const C&, int64_t) { return 0; }
};
struct Window {  // sliding window of w keys per head: t < w
  HZ_HD static bool on(const AttnKernelParams& p, int64_t h) { return p.window[h] > 0; }
  HZ_HD static int64_t key_lo(const AttnKernelParams& p, int64_t, int64_t h, int64_t pos) {
    return pos - p.window[h] + 1;
  }
  HZ_HD static int64_t last_row(const AttnKernelParams& p, int64_t, int64_t h, int64_t j) {
    return j + p.window[h] - 1 - p.q_offset;
  }
  template <class C>
  HZ_HD static int64_t reach(const C& c, int64_t h) { return c.window[h] > 0 ? c.window[h] : 0; }
};
struct Document {  // packed documents: keys from the start of the query's document
  HZ_HD static bool on(const AttnKernelParams& p, int64_t) { return has_documents(p); }
  HZ_HD static int64_t key_lo(const AttnKernelParams& p, int64_t b, int64_t, int64_t pos) {
    return doc_start_of(p, b, pos);
  }
  HZ_HD static int64_t last_row(const AttnKernelParams& p, int64_t b, int64_t, int64_t j) {
    return doc_end_of(p, b, j) - 1 - p.q_offset;
  }
  template <class C>
  HZ_HD static int64_t reach(const C&, int64_t) { return 0; }  // a document may be any length
};
struct Chunk {  // chunked attention: keys from the start of the query's chunk (at most C keys back)
  HZ_HD static bool on(const AttnKernelParams& p, int64_t) { return HZ_CHUNKS(p); }
  HZ_HD static int64_t key_lo(const AttnKernelParams& p, int64_t b, int64_t, int64_t pos) {
    return chunk_start_of(p, b, pos);
  }
  HZ_HD static int64_t last_row(const AttnKernelParams& p, int64_t b, int64_t, int64_t j) {
    return chunk_end_of(p, b, j) - 1 - p.q_offset;
  }
  template <class C>
  HZ_HD static int64_t reach(const C& c, int64_t) { return HZ_CHUNKS(c) ? c.chunk : 0; }
};
template <class... T>
struct List {};
// The mask's lower bounds after a first term that bounds every row: add a new ingredient here.
template <class First>
using BoundsFrom = List<First, Window, Document, Chunk>;
}  // namespace term
// A row's bounds in this call; logn_whole_row's (the row's keys over the whole sequence, from its
// first position, whatever the call's key limits).
using LowerTerms = term::BoundsFrom<term::KeyBegin>;
using WholeRowTerms = term::BoundsFrom<term::SequenceStart>;

namespace detail {
template <class T>
HZ_HD void raise_key_lo(const AttnKernelParams& p, int64_t b, int64_t h, int64_t pos, int64_t& lo) {
  if (T::on(p, h)) {
    const int64_t x = T::key_lo(p, b, h, pos);
    if (x > lo) lo = x;
  }
}
template <class T>
HZ_HD void lower_last_row(const AttnKernelParams& p, int64_t b, int64_t h, int64_t j, int64_t& last) {
  if (T::on(p, h)) {
    const int64_t x = T::last_row(p, b, h, j);
    if (x < last) last = x;
  }
}
template <class T, class C>
HZ_HD void lower_reach(const C& c, int64_t h, int64_t& r) {
  const int64_t x = T::reach(c, h);
  if (x > 0 && (r == 0 || x < r)) r = x;
}
template <class T>
HZ_HD bool out_of_reach(const AttnKernelParams& p, int64_t h) {
  const int64_t r = T::reach(p, h);
  return r > 0 && p.min_distance > r - 1;
}
}  // namespace detail
// The first key the terms let the query at key position pos see.
template <class T0, class... T>
HZ_HD int64_t terms_key_lo(term::List<T0, T...>, const AttnKernelParams& p, int64_t b, int64_t h, int64_t pos) {
  int64_t lo = T0::key_lo(p, b, h, pos);
  (detail::raise_key_lo<T>(p, b, h, pos, lo), ...);
  return lo;
}
// The last query row the terms let see key j (in the call's limits; at most Tq - 1).
template <class T0, class... T>
HZ_HD int64_t terms_last_row(term::List<T0, T...>, const AttnKernelParams& p, int64_t b, int64_t h, int64_t j) {
  int64_t last = T0::last_row(p, b, h, j);
  (detail::lower_last_row<T>(p, b, h, j, last), ...);
  return last;
}
// terms_last_row's fold from `last` (the first term's bound or below) over the other terms but Skip.
template <class Skip, class T0, class... T>
HZ_HD int64_t terms_last_row_but(term::List<T0, T...>, const AttnKernelParams& p, int64_t b, int64_t h, int64_t j,
                                 int64_t last) {
  ((std::is_same<T, Skip>::value ? void() : detail::lower_last_row<T>(p, b, h, j, last)), ...);
  return last;
}
// How far back a query of head h sees at most (the nearest nonzero reach); 0: unbounded.
template <class C, class... T>
HZ_HD int64_t terms_reach(term::List<T...>, const C& c, int64_t h) {
  int64_t r = 0;
  (detail::lower_reach<T>(c, h, r), ...);
  return r;
}
// Whether every row of head h has an empty first interval: min_distance at or beyond a term's reach.
template <class... T>
HZ_HD bool terms_out_of_reach(term::List<T...>, const AttnKernelParams& p, int64_t h) {
  return (detail::out_of_reach<T>(p, h) || ...);
}

// Visible keys of query row i of head h in sequence b.
HZ_HD IndexRange key_range(const AttnKernelParams& p, int64_t b, int64_t h, int64_t i) {
  const int64_t pos = p.q_offset + i;
  int64_t lo = terms_key_lo(LowerTerms{}, p, b, h, pos), hi = pos - p.min_distance;
  if (HZ_PREFIX(p) && pos < prefix_end_of(p, b, pos)) {  // a prefix row sees the whole prefix
    const int64_t o = sink_origin(p, b, pos);
    lo = o > p.key_begin ? o : p.key_begin;
    hi = prefix_end_of(p, b, pos) - 1;
  }
  if (p.key_end - 1 < hi) hi = p.key_end - 1;
  return {lo, hi};
}
HZ_HD int64_t range_size(IndexRange r) { return r.hi >= r.lo ? r.hi - r.lo + 1 : 0; }

// The sink tokens row i sees besides key_range(i) = [lo_i, hi_i]: a second interval, before the first,
//     [max(key_begin, o_i), min(o_i + S - 1, lo_i - 1, hi_i)],   o_i = sink_origin(p_i),
// empty while the row's window or chunk still reaches back to o_i (the first interval has them).
// Both ends are non-decreasing along the rows of one document.
namespace detail {
// The last sink key of a row whose first interval is [lo, hi] and whose document starts at o.
HZ_HD int64_t sink_hi(const AttnKernelParams& p, int64_t o, int64_t lo, int64_t hi) {
  int64_t s = o + p.sink_tokens - 1;
  if (lo - 1 < s) s = lo - 1;
  return hi < s ? hi : s;
}
}  // namespace detail
HZ_HD IndexRange sink_range(const AttnKernelParams& p, int64_t b, int64_t h, int64_t i) {
  if (!HZ_SINK_TOKENS(p)) return {0, -1};
  const int64_t o = sink_origin(p, b, p.q_offset + i);
  const IndexRange m = key_range(p, b, h, i);
  return {o > p.key_begin ? o : p.key_begin, detail::sink_hi(p, o, m.lo, m.hi)};
}
// Visible keys of row i: both intervals.
HZ_HD int64_t visible_count(const AttnKernelParams& p, int64_t b, int64_t h, int64_t i) {
  return range_size(key_range(p, b, h, i)) + range_size(sink_range(p, b, h, i));
}
// Whether key j is visible to row i (j inside one of the row's intervals kr, sr).
HZ_HD bool in_ranges(IndexRange kr, IndexRange sr, int64_t j) {
  return (j >= kr.lo && j <= kr.hi) || (j >= sr.lo && j <= sr.hi);
}
// LogN's n_i: visible_count, or with logn_whole_row the keys the row sees over the whole sequence
// from absolute position 0 (key index -key_position), whatever this call's key limits (a caller
// that splits a row's keys over several calls gives each call the whole row's n).
HZ_HD int64_t logn_count(const AttnKernelParams& p, int64_t b, int64_t h, int64_t i) {
  if (!p.logn_whole_row) return visible_count(p, b, h, i);
  const int64_t pos = p.q_offset + i;
  const int64_t lo = terms_key_lo(WholeRowTerms{}, p, b, h, pos), hi = pos - p.min_distance;
  int64_t n = hi >= lo ? hi - lo + 1 : 0;
  if (HZ_SINK_TOKENS(p)) {  // the sink tokens before lo, as sink_range
    const int64_t o = sink_origin(p, b, pos), shi = detail::sink_hi(p, o, lo, hi);
    n += shi >= o ? shi - o + 1 : 0;
  }
  return n;
}
// Query rows of head h that see key j of sequence b (the transpose of key_range), clamped to [0, Tq).
// The window's bound (term::Window::last_row's) is written out ahead of the other terms' fold: the
// dK/dV kernels call this per key inside their main loop, and with the window folded like the others
// the plain D 128 one spilled 172 bytes rather than 36 (its budget is 64; tests/kernel_registers.sh).
HZ_HD IndexRange query_range(const AttnKernelParams& p, int64_t b, int64_t h, int64_t j) {
  if (j < p.key_begin || j >= p.key_end) return {0, -1};
  const int64_t w = p.window[h];
  int64_t lo = j + p.min_distance - p.q_offset, hi = p.Tq - 1;
  if (lo < 0) lo = 0;
  if (w > 0 && j + w - 1 - p.q_offset < hi) hi = j + w - 1 - p.q_offset;
  hi = terms_last_row_but<term::Window>(LowerTerms{}, p, b, h, j, hi);
  if (HZ_PREFIX(p) && j < prefix_end_of(p, b, j)) {  // a prefix key: every prefix row of its document sees it
    int64_t plo = sink_origin(p, b, j) - p.q_offset, phi = prefix_end_of(p, b, j) - 1 - p.q_offset;
    if (plo < 0) plo = 0;
    if (phi > p.Tq - 1) phi = p.Tq - 1;
    if (plo <= phi) {
      if (lo > hi) return {plo, phi};
      if (plo < lo) lo = plo;
      if (phi > hi) hi = phi;
    }
  }
  return {lo, hi};
}
// Query rows of head h that see key j through the sink tokens (the transpose of sink_range): key j is
// one of its document's first S, and the rows are those of its document whose first interval
// starts after j (past every term's last_row(j): beyond the window, p_i >= j + w, or in a later
// chunk, p_i >= chunk_end(j)), from j + min_distance on; the lower end is non-decreasing in j, the
// upper one fixed per document. Without a bounded reach no row of the document passes j.
HZ_HD IndexRange sink_rows(const AttnKernelParams& p, int64_t b, int64_t h, int64_t j) {
  if (!HZ_SINK_TOKENS(p) || j < p.key_begin || j >= p.key_end || j - sink_origin(p, b, j) >= p.sink_tokens ||
      terms_reach(LowerTerms{}, p, h) == 0)
    return {0, -1};
  int64_t lo = terms_last_row(LowerTerms{}, p, b, h, j) + 1, hi = p.Tq - 1;  // the first row whose first interval starts after j
  if (j + p.min_distance - p.q_offset > lo) lo = j + p.min_distance - p.q_offset;
  if (HZ_PREFIX(p) && prefix_end_of(p, b, j) - p.q_offset > lo) lo = prefix_end_of(p, b, j) - p.q_offset;  // prefix rows see j already
  if (lo < 0) lo = 0;
  if (has_documents(p) && doc_end_of(p, b, j) - 1 - p.q_offset < hi) hi = doc_end_of(p, b, j) - 1 - p.q_offset;
  return {lo, hi};
}
// Query rows of head h with at least one key in the first interval (an interval, see the header comment).
HZ_HD IndexRange nonempty_rows(const AttnKernelParams& p, int64_t b, int64_t h) {
  if (p.key_begin >= p.key_end || terms_out_of_reach(LowerTerms{}, p, h)) return {0, -1};
  int64_t lo = p.key_begin + p.min_distance - p.q_offset;
  if (lo < 0) lo = 0;
  // the rows up to the last one that sees key key_end - 1 (with documents or chunks, min_distance 0:
  // a row past key_end sees keys only while its document or chunk started before key_end)
  const int64_t hi = terms_last_row(LowerTerms{}, p, b, h, p.key_end - 1);
  return {lo, hi};
}
// Keys of head h in sequence b seen by at least one query row through the first interval.
HZ_HD IndexRange nonempty_keys(const AttnKernelParams& p, int64_t b, int64_t h) {
  if (p.Tq <= 0 || terms_out_of_reach(LowerTerms{}, p, h)) return {0, -1};
  // from the first key the first query sees (a key before it is seen only inside its document, chunk
  // or window)
  int64_t lo = terms_key_lo(LowerTerms{}, p, b, h, p.q_offset), hi = p.key_end - 1;
  // a first query inside its document's prefix sees the prefix from its start
  if (HZ_PREFIX(p) && p.q_offset < prefix_end_of(p, b, p.q_offset)) {
    const int64_t o = sink_origin(p, b, p.q_offset);
    const int64_t plo = o > p.key_begin ? o : p.key_begin;
    if (plo < lo) lo = plo;
  }
  if (p.Tq - 1 + p.q_offset - p.min_distance < hi) hi = p.Tq - 1 + p.q_offset - p.min_distance;
  return {lo, hi};
}

// ---- blocks ------------------------------------------------------------------------------------
enum class BlockClass : uint8_t { Skip, Boundary, Full };

// The blocks one tile meets along the other axis: [first, last] are visited (each holds a visible
// entry), those in [full_first, full_last] are Full, the rest of [first, last] Boundary.
struct BlockSpan {
  int64_t first, last, full_first, full_last;
};
HZ_HD BlockClass block_class(const BlockSpan& s, int64_t b) {
  if (b < s.first || b > s.last) return BlockClass::Skip;
  return b >= s.full_first && b <= s.full_last ? BlockClass::Full : BlockClass::Boundary;
}
HZ_HD int64_t span_blocks(const BlockSpan& s) { return s.last >= s.first ? s.last - s.first + 1 : 0; }
HZ_HD int64_t span_full_blocks(const BlockSpan& s) {
  const int64_t a = s.full_first > s.first ? s.full_first : s.first;
  const int64_t b = s.full_last < s.last ? s.full_last : s.last;
  return b >= a ? b - a + 1 : 0;
}

namespace detail {
// Blocks of size n over [0, extent) met by the union [u_lo, u_hi] of monotone intervals, and fully
// inside their common part [c_lo, c_hi] (only when `all_nonempty`).
HZ_HD BlockSpan span_of(int64_t u_lo, int64_t u_hi, bool all_nonempty, int64_t c_lo, int64_t c_hi, int64_t n,
                        int64_t extent) {
  BlockSpan s{u_lo / n, u_hi / n, 0, -1};
  if (all_nonempty && c_lo <= c_hi) {
    s.full_first = (c_lo + n - 1) / n;
    s.full_last = c_hi == extent - 1 ? c_hi / n : (c_hi + 1) / n - 1;
  }
  return s;
}
}  // namespace detail

namespace detail {
// The two directions of the same interval structure: rows -> their visible keys (forward, dQ) and
// keys -> the rows that see them (the key-major dK/dV pass).
struct RowsToKeys {
  HZ_HD static IndexRange nonempty(const AttnKernelParams& p, int64_t b, int64_t h) { return nonempty_rows(p, b, h); }
  HZ_HD static IndexRange range(const AttnKernelParams& p, int64_t b, int64_t h, int64_t i) {
    return key_range(p, b, h, i);
  }
  HZ_HD static int64_t extent(const AttnKernelParams& p) { return p.Tk; }
};
struct KeysToRows {
  HZ_HD static IndexRange nonempty(const AttnKernelParams& p, int64_t b, int64_t h) { return nonempty_keys(p, b, h); }
  HZ_HD static IndexRange range(const AttnKernelParams& p, int64_t b, int64_t h, int64_t j) {
    return query_range(p, b, h, j);
  }
  HZ_HD static int64_t extent(const AttnKernelParams& p) { return p.Tq; }
};
// Blocks of size n along the other axis met by [a0, a1] of this axis: from the first nonempty
// index's range start to the last one's range end; Full inside the common part of every range
// when all of [a0, a1] is nonempty.
template <class Axis>
HZ_HD BlockSpan blocks_across(const AttnKernelParams& p, int64_t bt, int64_t h, int64_t a0, int64_t a1, int64_t n) {
  const IndexRange ne = Axis::nonempty(p, bt, h);
  const int64_t a = a0 > ne.lo ? a0 : ne.lo, b = a1 < ne.hi ? a1 : ne.hi;
  if (a > b) return {0, -1, 0, -1};
  return span_of(Axis::range(p, bt, h, a).lo, Axis::range(p, bt, h, b).hi, a == a0 && b == a1,
                 Axis::range(p, bt, h, a1).lo, Axis::range(p, bt, h, a0).hi, n, Axis::extent(p));
}
}  // namespace detail

// Key blocks (size Bk) met by query rows [i0, i1] of head h in sequence b.
HZ_HD BlockSpan key_blocks(const AttnKernelParams& p, int64_t b, int64_t h, int64_t i0, int64_t i1, int64_t Bk) {
  return detail::blocks_across<detail::RowsToKeys>(p, b, h, i0, i1, Bk);
}
// Query blocks (size Bq) met by keys [j0, j1] of head h in sequence b (the key-major backward's loop).
HZ_HD BlockSpan query_blocks(const AttnKernelParams& p, int64_t b, int64_t h, int64_t j0, int64_t j1, int64_t Bq) {
  return detail::blocks_across<detail::KeysToRows>(p, b, h, j0, j1, Bq);
}
HZ_HD int64_t num_blocks(int64_t n, int64_t tile) { return (n + tile - 1) / tile; }

// The sink tokens' blocks met by query rows [i0, i1] (key-major: by keys [j0, j1]). Their intervals
// are monotone within a document only, so a tile spanning documents meets one sink interval per
// document; all but one of them lie inside the first interval's span (a later document's sinks sit
// between the earlier rows' first-interval keys and its own rows'; an earlier document's, key-major,
// between the keys' rows), so the span here covers the one that may not: that of the first
// row with a nonempty first interval (else row i0) -- key-major, the last such key's (else j1).
// Full blocks only when every row (key) of the tile shares that document and sees sinks.
namespace detail {
// The row of [i0, i1] whose document's sinks the span covers (see above) and that document's last row
// in the tile, whose sink interval reaches furthest.
HZ_HD void sink_anchor(const AttnKernelParams& p, int64_t b, int64_t h, int64_t i0, int64_t i1, int64_t& a,
                       int64_t& last) {
  const IndexRange ne = nonempty_rows(p, b, h);
  a = i0 > ne.lo ? i0 : ne.lo;
  if (a > (i1 < ne.hi ? i1 : ne.hi)) a = i0;
  last = i1;
  if (has_documents(p) && doc_end_of(p, b, p.q_offset + a) - 1 - p.q_offset < last)
    last = doc_end_of(p, b, p.q_offset + a) - 1 - p.q_offset;
}
}  // namespace detail
namespace detail {
// The span, and in `keys` the keys of that sink interval (every sink key of the tile outside the first
// interval's span).
HZ_HD BlockSpan sink_key_blocks_and_keys(const AttnKernelParams& p, int64_t b, int64_t h, int64_t i0, int64_t i1,
                                         int64_t Bk, IndexRange& keys) {
  keys = {0, -1};
  if (!HZ_SINK_TOKENS(p)) return {0, -1, 0, -1};
  int64_t a, last;
  sink_anchor(p, b, h, i0, i1, a, last);
  const IndexRange u = sink_range(p, b, h, last), c = sink_range(p, b, h, i0);
  if (u.lo > u.hi) return {0, -1, 0, -1};
  keys = u;
  return span_of(u.lo, u.hi, a == i0 && last == i1 && c.lo <= c.hi, c.lo, c.hi, Bk, p.Tk);
}
}  // namespace detail
HZ_HD BlockSpan sink_query_blocks(const AttnKernelParams& p, int64_t b, int64_t h, int64_t j0, int64_t j1, int64_t Bq) {
  if (!HZ_SINK_TOKENS(p)) return {0, -1, 0, -1};
  const IndexRange ne = nonempty_keys(p, b, h);
  int64_t a = j1 < ne.hi ? j1 : ne.hi;
  if (a < (j0 > ne.lo ? j0 : ne.lo)) a = j1;
  int64_t first = j0 > p.key_begin ? j0 : p.key_begin;  // the first key of a's document in the tile
  if (has_documents(p) && doc_start_of(p, b, a) > first) first = doc_start_of(p, b, a);
  if (first > a) return {0, -1, 0, -1};
  const IndexRange u = sink_rows(p, b, h, first), c = sink_rows(p, b, h, j1);  // rows' upper end: one per document
  if (u.lo > u.hi) return {0, -1, 0, -1};
  return detail::span_of(u.lo, u.hi, first == j0 && a == j1 && c.lo <= c.hi, c.lo, u.hi, Bq, p.Tq);
}

// A tile's blocks along the other axis: those of the first interval and those of the sink tokens;
// a block is visited once, Full when one interval alone covers it. Iterate with
//     for (int64_t kb = spans_next(s, -1); kb <= spans_last(s); kb = spans_next(s, kb))
struct BlockSpans {
  BlockSpan main, sink;
  IndexRange sink_keys{0, -1};  // row-major: the keys of the sink span (narrow_to_sinks); key-major: empty
};
HZ_HD bool span_has(const BlockSpan& s, int64_t k) { return k >= s.first && k <= s.last; }
HZ_HD BlockClass spans_class(const BlockSpans& s, int64_t k) {
  const BlockClass a = block_class(s.main, k), c = block_class(s.sink, k);
  if (a == BlockClass::Full || c == BlockClass::Full) return BlockClass::Full;
  return a == BlockClass::Skip ? c : a;
}
HZ_HD int64_t spans_last(const BlockSpans& s) { return s.main.last > s.sink.last ? s.main.last : s.sink.last; }
// The first visited block after k (k = -1: the first one); past spans_last when none.
HZ_HD int64_t spans_next(const BlockSpans& s, int64_t k) {
  ++k;
  if (span_has(s.main, k) || span_has(s.sink, k)) return k;
  int64_t n = spans_last(s) + 1;
  if (s.main.last >= s.main.first && s.main.first > k && s.main.first < n) n = s.main.first;
  if (s.sink.last >= s.sink.first && s.sink.first > k && s.sink.first < n) n = s.sink.first;
  return n;
}
namespace detail {
HZ_HD int64_t overlap(int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
  const int64_t lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
  return hi >= lo ? hi - lo + 1 : 0;
}
}  // namespace detail
HZ_HD int64_t spans_blocks(const BlockSpans& s) {
  return span_blocks(s.main) + span_blocks(s.sink) - detail::overlap(s.main.first, s.main.last, s.sink.first, s.sink.last);
}
HZ_HD int64_t spans_full_blocks(const BlockSpans& s) {
  const BlockSpan& a = s.main;
  const BlockSpan& c = s.sink;
  return span_full_blocks(a) + span_full_blocks(c) -
         detail::overlap(a.full_first > a.first ? a.full_first : a.first, a.full_last < a.last ? a.full_last : a.last,
                         c.full_first > c.first ? c.full_first : c.first, c.full_last < c.last ? c.full_last : c.last);
}
// Both intervals' blocks met by query rows [i0, i1] (row-major) or keys [j0, j1] (key-major).
HZ_HD BlockSpans key_block_spans(const AttnKernelParams& p, int64_t b, int64_t h, int64_t i0, int64_t i1, int64_t Bk) {
  BlockSpans s;
  s.main = key_blocks(p, b, h, i0, i1, Bk);
  s.sink = detail::sink_key_blocks_and_keys(p, b, h, i0, i1, Bk, s.sink_keys);
  return s;
}
// Key block kb of a row-major tile, [j0, j0 + nk), narrowed to the span's sink keys when only the sink
// tokens meet it: the CPU kernel then multiplies S columns there rather than Bk.
HZ_HD void narrow_to_sinks(const BlockSpans& s, int64_t kb, int64_t& j0, int64_t& nk) {
  if (span_has(s.main, kb) || !span_has(s.sink, kb)) return;
  const IndexRange sk = s.sink_keys;
  const int64_t lo = j0 > sk.lo ? j0 : sk.lo, hi = j0 + nk - 1 < sk.hi ? j0 + nk - 1 : sk.hi;
  j0 = lo;
  nk = hi - lo + 1;
}
HZ_HD BlockSpans query_block_spans(const AttnKernelParams& p, int64_t b, int64_t h, int64_t j0, int64_t j1,
                                   int64_t Bq) {
  BlockSpans s;
  s.main = query_blocks(p, b, h, j0, j1, Bq);
  s.sink = sink_query_blocks(p, b, h, j0, j1, Bq);
  return s;
}

// The work of thread block `cta` in the kernels' grids: B * H query tiles of Bq rows (query block
// fastest: the forward and dQ), or B * Hkv key tiles of Bk keys (dK/dV). Within a head the heaviest
// tiles under a causal mask come first, so that a GPU, which starts blocks in index order, ends its
// grid on light ones instead of leaving the heaviest for a last, partly empty wave: query tiles
// from the last rows back (they see the most keys), key tiles from the first keys on (the most
// queries see them).
struct QueryTile {
  int64_t b, h, hk, i0, i1;  // batch, query head, its kv head, rows [i0, i1]
};
HZ_HD QueryTile query_tile(const AttnKernelParams& p, int64_t cta, int64_t Bq) {
  const int64_t n = num_blocks(p.Tq, Bq), bh = cta / n;
  QueryTile t;
  t.h = bh % p.H;
  t.b = bh / p.H;
  t.hk = t.h / p.G;
  t.i0 = (n - 1 - cta % n) * Bq;
  t.i1 = (t.i0 + Bq < p.Tq ? t.i0 + Bq : p.Tq) - 1;
  return t;
}
struct KeyTile {
  int64_t b, hk, j0, j1;  // batch, kv head, keys [j0, j1]
};
HZ_HD KeyTile key_tile(const AttnKernelParams& p, int64_t cta, int64_t Bk) {
  const int64_t n = num_blocks(p.Tk, Bk), bh = cta / n;
  KeyTile t;
  t.hk = bh % p.Hkv;
  t.b = bh / p.Hkv;
  t.j0 = (cta % n) * Bk;
  t.j1 = (t.j0 + Bk < p.Tk ? t.j0 + Bk : p.Tk) - 1;
  return t;
}

// ---- logit coefficients ---------------------------------------------------------------------------
// Scale-invariant a_t and m_t (the scale-invariant attention paper), in F arithmetic.
template <class F>
HZ_HD void scale_invariant_coef(F t, F tau, F& a, F& m) {
  const F l = math::log1p_(t / tau);
  a = math::sqrt_(F(2) * l + F(1));
  m = F(-2) * l;
}

// SWAN's row scale g(n) = ln(a + n) / ln(a) for a query at position n.
template <class F>
HZ_HD F swan_scale(F a, F n) {
  return math::log_(a + n) / math::log_(a);
}

// The position a row's position-dependent terms read: absolute (key_position + q_offset + i), or
// inside its document with position reset.
// The position token j (a key index; a query's is q_offset + i) of sequence b carries: the drawn
// one, or its absolute index.
HZ_HD double token_position(const AttnKernelParams& p, int64_t b, int64_t j) {
  if (HZ_TOKEN_POSITIONS(p)) return p.positions[b * p.positions_T + p.key_position + j];
  return static_cast<double>(p.key_position + j);
}
// The distance t of the logit terms between the query at key index pos and key j (pos - j
// without token positions).
template <class F>
HZ_HD F pair_distance(const AttnKernelParams& p, int64_t b, int64_t pos, int64_t j) {
  if (HZ_TOKEN_POSITIONS(p)) return static_cast<F>(token_position(p, b, pos) - token_position(p, b, j));
  return static_cast<F>(pos - j);
}
// P_i, row i's position for the terms that read it (header comment).
HZ_HD double row_position(const AttnKernelParams& p, int64_t b, int64_t i) {
  const int64_t pos = p.q_offset + i;
  if (HZ_TOKEN_POSITIONS(p)) return token_position(p, b, pos);
  return static_cast<double>(has_documents(p) && p.pos_reset ? pos - doc_start_of(p, b, pos) : p.key_position + pos);
}

// Row factor r_i without LogN's c_h (see the header comment), times Llama 4's position
// temperature 1 + alpha ln(floor((P + 1) / beta) + 1) when alpha != 0.
template <class F>
HZ_HD F row_factor(const AttnKernelParams& p, int64_t b, int64_t h, int64_t i) {
  const int64_t pos = p.q_offset + i;
  F r = F(1);
  switch (p.logit) {
    case LogitKind::LogN: {
      const double n = p.logn_position ? row_position(p, b, i) + 1 : static_cast<double>(logn_count(p, b, h, i));
      r = n > 0 ? math::log_(static_cast<F>(n)) : F(0);
      break;
    }
    case LogitKind::SwanRow:
      r = swan_scale<F>(static_cast<F>(p.swan_a), static_cast<F>(row_position(p, b, i)));
      break;
    case LogitKind::Temperature: {
      if (!has_documents(p) || p.temp_c == 0.0 || p.temp_train_len <= 0) {
        r = static_cast<F>(p.beta);
        break;
      }
      const F s = static_cast<F>(doc_end_of(p, b, pos) - doc_start_of(p, b, pos)) / static_cast<F>(p.temp_train_len);
      r = s > F(1) ? F(1) + static_cast<F>(p.temp_c) * math::log_(s) : F(1);
      break;
    }
    default: break;
  }
  if (p.qtemp_alpha != 0.0) {
    const int64_t steps = static_cast<int64_t>((row_position(p, b, i) + 1) / p.qtemp_beta);
    r *= F(1) + static_cast<F>(p.qtemp_alpha) * math::log_(static_cast<F>(steps + 1));
  }
  return r;
}

// L = mul * s + add for a visible entry at distance t (pair_distance) of a row with scale r (row
// factor times c_h).
template <class F>
struct LogitCoef {
  F mul, add;
};
// `rate`: GRAPE's additive term of the pair (dist_rate), a per-pair slope beside ALiBi's.
template <class F>
HZ_HD LogitCoef<F> logit_coef(const AttnKernelParams& p, int64_t h, F r, F t, F rate = F(0)) {
  if (t < F(0)) t = -t;  // a prefix's later keys (prefix-LM): the distance both ways
  LogitCoef<F> c{r, F(0)};
  if (p.logit == LogitKind::ScaleInvariant) {
    F a, m;
    scale_invariant_coef(t, static_cast<F>(p.tau), a, m);
    c.mul = r * a;
    c.add = m;
  }
  if (p.alibi) c.add -= static_cast<F>(p.slope[h]) * t;
  if (HZ_DIST(p)) c.add -= rate * t;
  return c;
}
// GRAPE's additive term (fused.h): the rate dist_q_i + dist_k_j of row i and key j of (b, h), whose
// logit gains -|t| times it; 0 without the term. Its gradients are -sum_j dL_ij |t_ij| per row and
// -sum_i dL_ij |t_ij| per key.
template <class F>
HZ_HD F dist_rate(const AttnKernelParams& p, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (!HZ_DIST(p)) return F(0);
  F r = F(0);
  if (p.dist_q != nullptr) r += static_cast<F>(p.dist_q[(b * p.H + h) * p.Tq + i]);
  if (p.dist_k != nullptr) r += static_cast<F>(p.dist_k[(b * p.H + h) * p.Tk + j]);
  return r;
}
// Whether logits depend on the distance t (otherwise L = r * s).
HZ_HD bool logits_depend_on_t(const AttnKernelParams& p) {
  return p.logit == LogitKind::ScaleInvariant || p.alibi || HZ_DIST(p);
}

}  // namespace hz::attn
