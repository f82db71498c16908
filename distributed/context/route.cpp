// Horizon: context parallelism as a layer's route (see route.h).
#include "distributed/context/route.h"

#include <fmt/core.h>

#include <algorithm>

#include "autograd/functions.h"
#include "distributed/context/ring.h"

namespace hz::dist {

ContextRoute::ContextRoute(Communicator* group, const ZigzagLayout& layout, ContextExchange global)
    : link_(std::make_shared<ContextLink>(ContextLink{group, layout, 0})), global_(global) {
  HZ_CHECK(global != ContextExchange::Halo, ValueError, "context parallel: the halo is not a global exchange");
}

ContextRoute::ContextRoute(Communicator& group, int64_t T, ContextExchange global)
    : ContextRoute(&group, ZigzagLayout(T, group.size(), group.rank()), global) {}

std::shared_ptr<ContextRoute> ContextRoute::planning(int64_t T, int N, ContextExchange global) {
  return std::shared_ptr<ContextRoute>(new ContextRoute(nullptr, ZigzagLayout(T, N, 0), global));
}

int64_t ContextRoute::rows_held(int64_t T) const {
  HZ_CHECK(T == layout().T, ValueError, "context parallel: a route over ", layout().T, " tokens asked about ", T);
  return layout().max_local_len();
}

int64_t ContextRoute::kept_bytes(const attn::AttnConfig& cfg, const nn::AttnShape& s) const {
  const ZigzagLayout L = layout().of_rank(0);
  const int64_t a = s.call.act, B = s.call.batch, T_local = L.max_local_len(), N = B * T_local;
  const int64_t kv_row = 2 * B * s.kv_heads * s.head_dim * a;  // k and v of one position
  switch (exchange_for(cfg, L, global_, s.fox || s.key_rates)) {
    case ContextExchange::AllGather: return kv_row * L.T;
    case ContextExchange::Halo: {  // the halos and their copies in the chunks' buffers; the sinks and theirs
      const int64_t W = attn::max_reach(cfg);
      const auto ch = L.chunks();
      return kv_row * 2 * (halo_len(L, W, ch[0] + 1) + halo_len(L, W, ch[1] + 1) + cfg.sink_tokens);
    }
    case ContextExchange::Ring:  // its packed own block, out (f32 under bf16) and lse
      return kv_row * T_local + (a == 2 ? N * s.heads * s.head_dim * 4 : 0) + N * s.heads * 4;
    case ContextExchange::Count: break;
  }
  return 0;
}

int64_t ContextRoute::traffic_bytes(const attn::AttnConfig& cfg, const nn::AttnShape& s) const {
  const int64_t a = s.call.act, B = s.call.batch;
  const int64_t fa = a == 2 ? 4 : a;  // the accumulation dtype: f32 under bf16
  const int64_t kv_row = B * s.kv_heads * s.head_dim * 2;  // elements of k and v per row
  // the per-key terms (B H per row each): FoX's log f or c, GRAPE-A's key rates
  const int64_t fox_row = (s.fox + s.key_rates) * B * s.heads * fa;
  int64_t bytes = 0;
  for (int q = 0; q < layout().n; ++q) {
    const ContextTraffic t = context_traffic(cfg, layout().of_rank(q), global_, s.fox || s.key_rates);
    bytes = std::max(bytes, (t.fwd_rows + t.bwd_rows) * (kv_row * a + fox_row) + t.bwd_acc_rows * (kv_row * fa + fox_row) +
                                (s.fox ? t.fox_totals : 0) * B * s.heads * fa);
  }
  return bytes;
}

std::string ContextRoute::name() const {
  return fmt::format("context parallelism over {} ranks ({})", layout().n, dist::name(global_));
}

int64_t ContextRoute::sequence_length(int64_t rows) const {
  HZ_CHECK(rows == layout().local_len(), ShapeError, "model: context-parallel rank ", layout().rank, " holds ",
           layout().local_len(), " tokens of each ", layout().T, "-token sequence, got ", rows);
  return layout().T;
}

// The whole sequence's running sum at this rank's rows (accumulated RoPE angles): the ring's prefix
// over the chunks, the totals of the chunks before each one all-gathered (forward and backward).
ag::Variable ContextRoute::running_sum(const ag::Variable& x) {
  HZ_CHECK(link_->comm, ValueError, "context parallel: a planning route sums nothing (it has no ranks)");
  HZ_CHECK(x.dim() >= 3 && x.size(2) == layout().local_len(), ShapeError, "context parallel: a running sum needs this ",
           "rank's ", layout().local_len(), " rows on dim 2, got ", shape_str(x.shape()));
  return sequence_prefix(x, link_);
}

ag::Variable ContextRoute::attend(const ag::Variable& q, const ag::Variable& k, const ag::Variable& v,
                                  const attn::AttnConfig& cfg, const attn::AttnTerms& terms) {
  HZ_CHECK(link_->comm, ValueError, "context parallel: a planning route attends nothing (it has no ranks)");
  const ZigzagLayout& L = layout();
  HZ_CHECK(q.dim() == 4 && k.dim() == 4 && q.size(2) == L.local_len() && k.size(2) == L.local_len(), ShapeError,
           "context parallel: q and k must hold this rank's ", L.local_len(), " rows of a ", L.T, "-token sequence");
  HZ_CHECK(cfg.q_offset == -1 && cfg.key_begin == 0 && cfg.key_end == -1 && cfg.min_distance == 0 &&
               cfg.key_position == 0, ValueError,
           "context parallel: q_offset, key limits, min_distance and key_position are set per chunk; ",
           "leave them at their defaults");
  HZ_CHECK(!cfg.documents || cfg.documents->seq_len() == L.T, ShapeError, "context parallel: documents over ",
           cfg.documents ? cfg.documents->seq_len() : 0, " positions, the sequence has ", L.T);
  HZ_CHECK(cfg.prefix == 0, NotImplementedError, "context parallel: a prefix-LM layer attends ahead inside its prefix, "
           "which the exchanges do not carry; run it on one rank");
  const bool fox = terms.forget.defined(), dk = terms.dist_k.defined(), dq = terms.dist_q.defined();
  HZ_CHECK(!fox || (terms.forget.dim() == 3 && terms.forget.size(2) == L.local_len()), ShapeError,
           "context parallel: FoX's log forget gates must hold this rank's ", L.local_len(), " rows");
  for (const ag::Variable* r : {&terms.dist_q, &terms.dist_k})
    HZ_CHECK(!r->defined() || (r->dim() == 3 && r->size(2) == L.local_len()), ShapeError,
             "context parallel: GRAPE-A's rates must hold this rank's ", L.local_len(), " rows");
  // per-key terms (FoX's gates, GRAPE-A's key rates) keep the sinks unpinned: they span the gap
  const ContextExchange ex = exchange_for(cfg, L, global_, fox || dk);
  if (ex == ContextExchange::Ring) {
    // FoX's c over the whole sequence at the local rows, in the accumulation dtype (f64 on the CPU,
    // as the fused op's: c_i - c_j of long prefix sums loses float32's digits)
    const DType adt = q.value().device().is_cpu() ? DType::F64 : acc_dtype(q.dtype());
    const ag::Variable c =
        fox ? sequence_prefix(terms.forget.dtype() == adt ? terms.forget : ag::cast(terms.forget, adt), link_) : ag::Variable();
    return std::make_shared<Ring>(link_, cfg)->attend(q, k, v, terms, c);
  }
  // The per-key terms travel with k and v as one (B, H, Tl, c) tensor: FoX's log f (the decay
  // c_i - c_j is a sum of log f over positions (j, i], so any buffer holding the keys' rows gives it
  // by a prefix sum), then GRAPE-A's key rates (in log f's dtype beside it). The query rates stay local.
  ag::Variable f4;
  if (fox || dk) {
    std::vector<ag::Variable> parts;
    if (fox) parts.push_back(ag::unsqueeze(terms.forget, 3));
    if (dk) parts.push_back(ag::unsqueeze(fox ? ag::cast(terms.dist_k, terms.forget.dtype()) : terms.dist_k, 3));
    f4 = parts.size() == 1 ? parts[0] : ag::cat(parts, 3);
  }
  // the terms of chunk i's queries (at local rows [off, off + len)) over keys whose per-key terms are f
  auto chunk_terms = [&](const ag::Variable& f, int64_t off, int64_t len) {
    attn::AttnTerms t = terms;
    if (fox) t.forget = ag::squeeze(ag::narrow(f, 3, 0, 1), 3);
    if (dk) {
      const ag::Variable r = ag::squeeze(ag::narrow(f, 3, fox ? 1 : 0, 1), 3);
      t.dist_k = r.dtype() == terms.dist_k.dtype() ? r : ag::cast(r, terms.dist_k.dtype());
    }
    if (dq) t.dist_q = ag::contiguous(ag::narrow(terms.dist_q, 2, off, len));
    return t;
  };
  const auto ch = L.chunks();
  const int64_t offs[2] = {0, L.chunk_len(ch[0])};
  std::vector<ag::Variable> outs;
  if (ex == ContextExchange::Halo) {
    const int64_t W = attn::max_reach(cfg), S = cfg.sink_tokens;
    const ag::Variable hk = exchange_halo(k, W, link_), hv = exchange_halo(v, W, link_);
    const ag::Variable hf = f4.defined() ? exchange_halo(f4, W, link_) : ag::Variable();
    const ag::Variable sk = S > 0 ? broadcast_sinks(k, S, link_) : ag::Variable();
    const ag::Variable sv = S > 0 ? broadcast_sinks(v, S, link_) : ag::Variable();
    int64_t hoff = 0;
    for (int i = 0; i < 2; ++i) {
      const int64_t len = L.chunk_len(ch[i]), h = halo_len(L, W, ch[i]);
      const int64_t first = L.chunk_begin(ch[i]) - h;  // the buffer's first position after the sinks
      ag::Variable kc = ag::narrow(k, 2, offs[i], len), vc = ag::narrow(v, 2, offs[i], len);
      ag::Variable fc = f4.defined() ? ag::narrow(f4, 2, offs[i], len) : ag::Variable();
      // joined also when h is 0 (context rank 0's first chunk): every rank then builds the same
      // graph, so its backward runs the same nodes in the same order and posts its transfers and the
      // gradient hooks' all-reduces in the same order as the other ranks (one NCCL stream carries
      // both: another order would deadlock); likewise the sinks, with no rows where none is missing
      std::vector<ag::Variable> kp{ag::narrow(hk, 2, hoff, h), kc}, vp{ag::narrow(hv, 2, hoff, h), vc};
      const int64_t ns = std::min(S, first);  // sinks before the buffer's first position
      if (S > 0) {
        kp.insert(kp.begin(), ag::narrow(sk, 2, 0, ns));
        vp.insert(vp.begin(), ag::narrow(sv, 2, 0, ns));
      }
      kc = ag::cat(kp, 2);
      vc = ag::cat(vp, 2);
      if (f4.defined()) fc = ag::cat({ag::narrow(hf, 2, hoff, h), fc}, 2);
      hoff += h;
      attn::AttnConfig c = cfg;
      c.q_offset = ns + h;
      c.key_position = first - ns;  // the buffer's first key, for documents and SWAN's row
      if (S > 0 && first > S) {  // a gap between the sinks and the tail: rows 0..S-1, then first..
        c.key_position = 0;
        c.positions = attn::pinned_sink_positions(cfg.positions, q.size(0), S, first, h + len, q.value().device());
      }
      outs.push_back(attn::fused_attention(ag::contiguous(ag::narrow(q, 2, offs[i], len)), ag::contiguous(kc),
                                           ag::contiguous(vc), c, chunk_terms(fc, offs[i], len)).out);
    }
  } else {
    const ag::Variable K = gather_sequence(k, link_), V = gather_sequence(v, link_);
    const ag::Variable F = f4.defined() ? gather_sequence(f4, link_) : ag::Variable();
    for (int i = 0; i < 2; ++i) {
      attn::AttnConfig c = cfg;
      c.q_offset = L.chunk_begin(ch[i]);
      c.key_end = L.chunk_end(ch[i]);
      outs.push_back(attn::fused_attention(ag::contiguous(ag::narrow(q, 2, offs[i], L.chunk_len(ch[i]))), K, V, c,
                                           chunk_terms(F, offs[i], L.chunk_len(ch[i]))).out);
    }
  }
  return ag::cat(outs, 2);
}

}  // namespace hz::dist
