#include "attention/context.h"

#include <algorithm>
#include <limits>

#include "attention/fused_kernels.h"
#include "autograd/functions.h"
#include "core/names.h"
#include "core/ops.h"

namespace hz::attn {

ZigzagLayout::ZigzagLayout(int64_t T_, int n_, int rank_) : T(T_), n(n_), rank(rank_) {
  HZ_CHECK(n >= 1 && rank >= 0 && rank < n, ValueError, "context parallel: rank ", rank, " of a group of ", n);
  HZ_CHECK(T >= 2 * n, ValueError, "context parallel: a sequence of ", T, " tokens cannot be cut into ", 2 * n,
           " chunks (parallel.context=", n, " needs data.seq_len >= ", 2 * n, ")");
}

int64_t ZigzagLayout::min_chunk() const {
  int64_t m = T;
  for (int64_t c = 0; c < 2 * n; ++c) m = std::min(m, chunk_len(c));
  return m;
}

int64_t ZigzagLayout::local_len_of(int q) const {
  const auto c = chunks_of(q);
  return chunk_len(c[0]) + chunk_len(c[1]);
}

int64_t ZigzagLayout::max_local_len() const {
  int64_t m = 0;
  for (int q = 0; q < n; ++q) m = std::max(m, local_len_of(q));
  return m;
}

std::vector<int64_t> ZigzagLayout::positions_of(int q) const {
  std::vector<int64_t> p;
  for (int64_t c : chunks_of(q))
    for (int64_t t = chunk_begin(c); t < chunk_end(c); ++t) p.push_back(t);
  return p;
}

namespace {

constexpr const char* kExchange[] = {"halo", "all_gather", "ring"};

int64_t max_window(const AttnConfig& cfg) {
  int64_t w = 0;
  for (int64_t x : cfg.window) {
    if (x <= 0) return 0;  // an unbounded head
    w = std::max(w, x);
  }
  return w;
}

// Rows of the tail of chunk c - 1 that chunk c reads under windows of at most W keys.
int64_t halo_len(const ZigzagLayout& L, int64_t W, int64_t c) { return std::min(W - 1, L.chunk_begin(c)); }

int64_t bytes_of(const Tensor& t) { return t.numel() * static_cast<int64_t>(dtype_size(t.dtype())); }

// (B, Hkv, Tl, D) local rows -> (B, Hkv, T, D) in global order; backward: each owner receives the
// gradient of its rows from every rank and sums them in rank order.
ag::Variable gather_sequence(const ag::Variable& x, const ContextParallel& cp) {
  const ZigzagLayout& L = cp.layout;
  ContextGroup& g = *cp.group;
  const int N = L.n, r = L.rank;
  const int64_t B = x.size(0), Hk = x.size(1), Tl = x.size(2), D = x.size(3), Lmax = L.max_local_len();
  const DType dt = x.dtype();
  const Device dev = x.value().device();
  Tensor pad = Tensor::zeros({B, Hk, Lmax, D}, dt, dev);
  pad.narrow(2, 0, Tl).copy_(x.value());
  Tensor all = Tensor::empty({N, B, Hk, Lmax, D}, dt, dev);
  g.all_gather_into(pad, all);
  g.bytes_sent += bytes_of(pad) * (N - 1);
  Tensor out = Tensor::empty({B, Hk, L.T, D}, dt, dev);
  for (int q = 0; q < N; ++q) {
    int64_t off = 0;
    for (int64_t c : L.chunks_of(q)) {
      out.narrow(2, L.chunk_begin(c), L.chunk_len(c)).copy_(all.select(0, q).narrow(2, off, L.chunk_len(c)));
      off += L.chunk_len(c);
    }
  }
  return ag::make_result(out, {x}, "context_gather", [&cp, B, Hk, Tl, D, Lmax, dt, dev, N, r] {
    const ContextParallel c = cp;  // the group outlives the graph (the caller's call keeps it)
    return [c, B, Hk, Tl, D, Lmax, dt, dev, N, r](const Tensor& gout, ag::Grads& gr) {
      const ZigzagLayout& L = c.layout;
      ContextGroup& grp = *c.group;
      auto rows_of = [&](int q) {  // gout at rank q's positions, padded to Lmax
        Tensor s = Tensor::zeros({B, Hk, Lmax, D}, dt, dev);
        s.narrow(2, 0, L.local_len_of(q)).copy_(local_rows(gout, 2, ZigzagLayout(L.T, N, q)));
        return s;
      };
      std::vector<Tensor> from(N);
      from[r] = rows_of(r);
      for (int s = 1; s < N; ++s) {  // a shift schedule: every pair exchanges once
        const int dest = (r + s) % N, src = (r - s + N) % N;
        Tensor send = rows_of(dest);
        from[src] = Tensor::empty({B, Hk, Lmax, D}, dt, dev);
        grp.send_recv(send, dest, from[src], src);
        grp.bytes_sent += bytes_of(send);
      }
      Tensor sum = from[0].clone();
      for (int q = 1; q < N; ++q) ops::add_(sum, from[q]);  // rank order: deterministic
      gr.set(0, sum.narrow(2, 0, Tl).contiguous());
    };
  });
}

// One step of a shift: send (a view, made contiguous) to dest and receive into recv (a view) from
// src; -1 skips that side, both -1 skips the call. Counts the bytes sent.
void shift(ContextGroup& g, const Tensor& send, int dest, Tensor& recv, int src) {
  if (dest < 0 && src < 0) return;
  const Tensor s = dest >= 0 ? send.contiguous() : Tensor();
  Tensor rv = src >= 0 ? Tensor::empty(recv.shape(), recv.dtype(), recv.device()) : Tensor();
  g.send_recv(s, dest, rv, src);
  if (dest >= 0) g.bytes_sent += bytes_of(s);
  if (src >= 0) recv.copy_(rv);
}

// (B, Hkv, Tl, D) local rows -> (B, Hkv, h_a + h_b, D): the W - 1 keys before each local chunk
// (fewer at the sequence start), from the owners of the chunks before them; backward: the reverse.
ag::Variable exchange_halo(const ag::Variable& x, int64_t W, const ContextParallel& cp) {
  const ZigzagLayout& L = cp.layout;
  const int N = L.n, r = L.rank;
  const auto ch = L.chunks();
  const int64_t B = x.size(0), Hk = x.size(1), Tl = x.size(2), D = x.size(3);
  const int64_t len_a = L.chunk_len(ch[0]);
  const int64_t h_a = halo_len(L, W, ch[0]), h_b = halo_len(L, W, ch[1]);
  // what this rank sends: its chunk a's tail to chunk a + 1 (rank r + 1, or its own chunk b when
  // r = N - 1), its chunk b's tail to chunk b + 1 (rank r - 1's chunk b)
  const int64_t up = r + 1 < N ? halo_len(L, W, ch[0] + 1) : 0;
  const int64_t down = r >= 1 ? halo_len(L, W, ch[1] + 1) : 0;
  const DType dt = x.dtype();
  const Device dev = x.value().device();
  const Tensor xv = x.value();
  Tensor halo = Tensor::zeros({B, Hk, h_a + h_b, D}, dt, dev);
  {
    Tensor recv_a = halo.narrow(2, 0, h_a);
    shift(*cp.group, xv.narrow(2, len_a - up, up), up > 0 ? r + 1 : -1, recv_a, h_a > 0 ? r - 1 : -1);
    Tensor recv_b = halo.narrow(2, h_a, h_b);
    if (r == N - 1) {
      recv_b.copy_(xv.narrow(2, len_a - h_b, h_b));  // chunk N-1 is this rank's chunk a
      shift(*cp.group, xv.narrow(2, Tl - down, down), down > 0 ? r - 1 : -1, recv_b, -1);
    } else {
      shift(*cp.group, xv.narrow(2, Tl - down, down), down > 0 ? r - 1 : -1, recv_b, h_b > 0 ? r + 1 : -1);
    }
  }
  return ag::make_result(halo, {x}, "context_halo", [&cp, B, Hk, Tl, D, len_a, h_a, h_b, up, down, dt, dev, N, r] {
    const ContextParallel c = cp;
    return [c, B, Hk, Tl, D, len_a, h_a, h_b, up, down, dt, dev, N, r](const Tensor& gout, ag::Grads& gr) {
      Tensor dx = Tensor::zeros({B, Hk, Tl, D}, dt, dev);
      Tensor tail_a = dx.narrow(2, len_a - up, up), tail_b = dx.narrow(2, Tl - down, down);
      // reverse of the up shift: halo_a's gradient back to rank r - 1, chunk a's tail from r + 1
      shift(*c.group, gout.narrow(2, 0, h_a), h_a > 0 ? r - 1 : -1, tail_a, up > 0 ? r + 1 : -1);
      if (r == N - 1) {
        Tensor own = dx.narrow(2, len_a - h_b, h_b);
        own.copy_(ops::add(own, gout.narrow(2, h_a, h_b)));
        shift(*c.group, Tensor(), -1, tail_b, down > 0 ? r - 1 : -1);
      } else {
        shift(*c.group, gout.narrow(2, h_a, h_b), h_b > 0 ? r + 1 : -1, tail_b, down > 0 ? r - 1 : -1);
      }
      gr.set(0, dx);
    };
  });
}

// ---- the ring --------------------------------------------------------------------------------
// Layers that read the whole sequence, without gathering it: the group's key/value blocks (each
// rank's local k and v packed as one (2, B, Hkv, Tl, D) tensor) go round the ring r -> r + 1, one
// step at a time, N - 1 transfers; at step s rank r holds rank (r - s)'s block and attends each of
// its two query chunks to each key chunk of it that is not after the query chunk, one fused-op
// call per (query chunk, key chunk) pair, with q_offset and key_position placing both at their
// global positions (LogN's n counted over the whole row: logn_whole_row). The calls' outputs merge
// by their log-sum-exps,
//     lse = log(exp(lse_a) + exp(lse_b)),   out = out_a exp(lse_a - lse) + out_b exp(lse_b - lse),
// in the accumulation dtype, in step order (deterministic); the sink, one more term of every row's
// denominator, is folded in once at the end. The next block's transfer is posted before the
// step's calls and waited after them, so it overlaps the compute.
// Backward: the calls' backward with the rows' FINAL out and lse is exact for their keys
// (p_ij = exp(L_ij - lse_i), D_i = dO_i . O_i), so every block goes round again with its dK/dV
// accumulator beside it: rank r adds its share to the block it holds and passes both on; after N
// steps each accumulator reaches its owner. dQ accumulates locally. Never more than two blocks (and
// their accumulators) live at once, and nothing of the gathered sequence is kept for the backward.

// acc_out/acc_lse (rows of one query chunk) merged with a call's (out, lse); -inf rows stay 0.
void merge_into(Tensor acc_out, Tensor acc_lse, const Tensor& out, const Tensor& lse) {
  const DType adt = acc_lse.dtype();
  const Device dev = acc_lse.device();
  // m is -1e30 rather than -inf for rows that saw no key yet, so no inf - inf: their weights are
  // 0 and 0, and the denominator max(w_a + w_b, 1) (>= 1 whenever either side is finite) keeps 0
  const Tensor m = ops::binary(BinaryOp::Maximum, ops::binary(BinaryOp::Maximum, acc_lse, lse),
                               Tensor::full({1}, -1e30, adt, dev));
  const Tensor wa = ops::unary(UnaryOp::Exp, ops::sub(acc_lse, m)), wb = ops::unary(UnaryOp::Exp, ops::sub(lse, m));
  const Tensor den = ops::add(wa, wb);
  const Tensor safe = ops::binary(BinaryOp::Maximum, den, Tensor::full({1}, 1.0, adt, dev));
  const Tensor num = ops::add(ops::mul(acc_out, wa.unsqueeze(3)), ops::mul(out, wb.unsqueeze(3)));
  acc_out.copy_(ops::div(num, safe.unsqueeze(3)));
  acc_lse.copy_(ops::add(m, ops::unary(UnaryOp::Log, den)));
}

// One (query chunk, key chunk) call of the ring: chunk qc's rows [qoff, qoff + qlen) of the local
// rows, key chunk kc at rows [koff, koff + klen) of its owner's block.
struct RingPiece {
  int64_t qc, qoff, qlen, kc, koff, klen;
};

// The calls of step s at rank r: its chunks against the chunks of the block it holds (owner
// (r - s) mod N) that start at or before them (a later chunk is invisible to every causal head).
std::vector<RingPiece> ring_pieces(const ZigzagLayout& L, int owner) {
  std::vector<RingPiece> out;
  const auto qch = L.chunks(), kch = L.chunks_of(owner);
  int64_t qoff = 0;
  for (int64_t qc : qch) {
    int64_t koff = 0;
    for (int64_t kc : kch) {
      if (kc <= qc) out.push_back({qc, qoff, L.chunk_len(qc), kc, koff, L.chunk_len(kc)});
      koff += L.chunk_len(kc);
    }
    qoff += L.chunk_len(qc);
  }
  return out;
}

AttnConfig piece_config(const AttnConfig& cfg, const ZigzagLayout& L, const RingPiece& p) {
  AttnConfig c = cfg;
  c.q_offset = L.chunk_begin(p.qc) - L.chunk_begin(p.kc);
  c.key_position = L.chunk_begin(p.kc);
  c.logn_whole_row = true;
  return c;
}

// What goes round the ring: a rank's k and v, packed (2, B, Hkv, rows, D), and with FoX the global
// c = cumsum(log f) at those rows (B, H, rows); in the backward, the gradients of both.
struct RingBlock {
  Tensor kv, c;
};

// The transfers of one ring step (the block, and its c with FoX), overlapping the step's calls.
struct RingTransfer {
  std::vector<std::unique_ptr<ContextGroup::Pending>> pending;
  void progress() {
    for (auto& p : pending) p->progress();
  }
  void wait() {
    for (auto& p : pending) p->wait();
    pending.clear();
  }
};

RingTransfer start_ring(ContextGroup& g, const RingBlock& send, RingBlock& recv, int next, int prev) {
  RingTransfer t;
  for (auto [s, r] : {std::pair<const Tensor*, Tensor*>{&send.kv, &recv.kv}, {&send.c, &recv.c}}) {
    if (!s->defined()) continue;
    t.pending.push_back(g.start_send_recv(*s, next, *r, prev));
    g.bytes_sent += bytes_of(*s);
  }
  return t;
}

// (B, H, Tl) local rows of log f -> c (B, H, Tl), the prefix sums over the whole sequence at the
// local positions: each chunk's own prefix sum plus the sum of every chunk before it (the chunks'
// totals all-gathered, added in chunk order). Backward: dLoss/d(log f_m) = sum_{p >= m} dc_p, each
// chunk's reverse prefix sum plus the totals of every chunk after it.
ag::Variable global_prefix(const ag::Variable& x, const ContextParallel& cp) {
  const ZigzagLayout& L = cp.layout;
  const auto ch = L.chunks();
  const int64_t la = L.chunk_len(ch[0]), lb = L.chunk_len(ch[1]);
  // every chunk's total by chunk index, from the (2, B, H) sums each rank gathers
  auto chunk_totals = [](const ContextParallel& c, const Tensor& a, const Tensor& b) {
    const ZigzagLayout& L = c.layout;
    Tensor mine = Tensor::empty(Shape{2, a.size(0), a.size(1)}, a.dtype(), a.device());
    mine.select(0, 0).copy_(a);
    mine.select(0, 1).copy_(b);
    Tensor all = Tensor::empty(Shape{L.n, 2, a.size(0), a.size(1)}, a.dtype(), a.device());
    c.group->all_gather_into(mine, all);
    c.group->bytes_sent += bytes_of(mine) * (L.n - 1);
    std::vector<Tensor> t(2 * L.n);
    for (int q = 0; q < L.n; ++q)
      for (int i = 0; i < 2; ++i) t[L.chunks_of(q)[i]] = all.select(0, q).select(0, i);
    return t;
  };
  const Tensor xv = x.value();
  const Tensor ca = ops::cumsum(xv.narrow(2, 0, la), 2), cb = ops::cumsum(xv.narrow(2, la, lb), 2);
  const std::vector<Tensor> tot = chunk_totals(cp, ca.select(2, la - 1), cb.select(2, lb - 1));
  Tensor c = Tensor::empty(xv.shape(), xv.dtype(), xv.device());
  Tensor before = ops::mul_scalar(tot[0], 0.0);  // the sum of the chunks before chunk i, in order
  for (int64_t i = 0; i < 2 * L.n; ++i) {
    if (i == ch[0]) c.narrow(2, 0, la).copy_(ops::add(ca, before.unsqueeze(2)));
    if (i == ch[1]) c.narrow(2, la, lb).copy_(ops::add(cb, before.unsqueeze(2)));
    before = ops::add(before, tot[i]);
  }
  return ag::make_result(c, {x}, "context_prefix", [&] {
    const ContextParallel cpc = cp;
    return [cpc, la, lb, chunk_totals](const Tensor& g, ag::Grads& gr) {
      const ZigzagLayout& L = cpc.layout;
      const auto ch = L.chunks();
      const Tensor ga = g.narrow(2, 0, la), gb = g.narrow(2, la, lb);
      const std::vector<Tensor> tot = chunk_totals(cpc, ops::sum(ga, 2), ops::sum(gb, 2));
      Tensor dx = Tensor::empty(g.shape(), g.dtype(), g.device());
      Tensor after = ops::mul_scalar(tot[0], 0.0);  // the sum of the chunks after chunk i
      for (int64_t i = 2 * L.n - 1; i >= 0; --i) {
        if (i == ch[0]) dx.narrow(2, 0, la).copy_(ops::add(ops::cumsum(ga, 2, true), after.unsqueeze(2)));
        if (i == ch[1]) dx.narrow(2, la, lb).copy_(ops::add(ops::cumsum(gb, 2, true), after.unsqueeze(2)));
        after = ops::add(after, tot[i]);
      }
      gr.set(0, dx);
    };
  });
}

// FoX's c for one call (piece_forward's layout): the keys' c at [0, klen), the queries' at
// [q_offset, q_offset + qlen); a diagonal call (the chunk against itself) has them at the same place.
Tensor piece_fox(const Tensor& cq, const Tensor& ck, const RingPiece& p, int64_t q_offset) {
  Tensor f = Tensor::zeros({cq.size(0), cq.size(1), std::max(p.klen, q_offset + p.qlen)}, cq.dtype(), cq.device());
  f.narrow(2, 0, p.klen).copy_(ck.narrow(2, p.koff, p.klen));
  f.narrow(2, q_offset, p.qlen).copy_(cq.narrow(2, p.qoff, p.qlen));
  return f;
}

// rows [off, off + n) of t along dim 2 += x
void add_rows(const Tensor& t, int64_t off, int64_t n, const Tensor& x) {
  Tensor r = t.narrow(2, off, n);
  r.copy_(ops::add(r, x));
}

// The two local query chunks' rows of t (dim 2), each made contiguous once for every step's calls.
std::array<Tensor, 2> chunk_rows(const Tensor& t, const ZigzagLayout& L) {
  const int64_t la = L.chunk_len(L.chunks()[0]);
  return {t.narrow(2, 0, la).contiguous(), t.narrow(2, la, t.size(2) - la).contiguous()};
}

// The owner of the block rank L.rank holds at ring step s.
int ring_owner(const ZigzagLayout& L, int s) { return (L.rank - s + L.n) % L.n; }

ag::Variable ring_attention(const ag::Variable& q, const ag::Variable& k, const ag::Variable& v,
                            const AttnConfig& cfg, const ContextParallel& cp, const AttnTerms& terms,
                            const ag::Variable& fox_c) {
  const ZigzagLayout& L = cp.layout;
  const int N = L.n, r = L.rank, next = (r + 1) % N, prev = (r - 1 + N) % N;
  const Tensor qv = q.value().contiguous();
  const Device dev = qv.device();
  const DType dt = qv.dtype(), adt = acc_dtype(dt);
  const int64_t B = qv.size(0), H = qv.size(1), Tl = qv.size(2), D = qv.size(3), Hk = k.size(1);
  const bool logn = cfg.logit == LogitKind::LogN, fox = fox_c.defined();
  const Tensor cval = logn ? terms.logn_c.value() : Tensor();
  const Tensor cq = fox ? fox_c.value().contiguous() : Tensor();  // FoX's c at the local rows
  // an empty block of `owner`'s rows: k/v in `kvdt`, FoX's c in the accumulation dtype
  auto new_block = [=](int owner, DType kvdt, bool zero) {
    const int64_t rows = L.local_len_of(owner);
    RingBlock b;
    b.kv = zero ? Tensor::zeros({2, B, Hk, rows, D}, kvdt, dev) : Tensor::empty({2, B, Hk, rows, D}, kvdt, dev);
    if (fox) b.c = zero ? Tensor::zeros({B, H, rows}, adt, dev) : Tensor::empty({B, H, rows}, adt, dev);
    return b;
  };
  // step s's transfer: the held block on to the next rank, the next step's block (nxt) from the
  // previous one; nothing at the last step
  auto pass_on = [=](ContextGroup& g, int s, const RingBlock& blk, RingBlock& nxt) {
    if (s + 1 == N) return RingTransfer{};
    nxt = new_block(ring_owner(L, s + 1), dt, false);
    return start_ring(g, blk, nxt, next, prev);
  };
  // one call's k, v and FoX c
  auto call_kv = [=](const RingBlock& blk, int which, const RingPiece& p) {
    return blk.kv.select(0, which).narrow(2, p.koff, p.klen).contiguous();
  };
  auto call_fox = [=](const RingBlock& blk, const RingPiece& p, int64_t q_offset) {
    return fox ? piece_fox(cq, blk.c, p, q_offset) : Tensor();
  };
  RingBlock own = new_block(r, dt, false);
  own.kv.select(0, 0).copy_(k.value());
  own.kv.select(0, 1).copy_(v.value());
  if (fox) own.c = cq;

  const std::array<Tensor, 2> qch = chunk_rows(qv, L);
  auto chunk = [&](const RingPiece& p) { return p.qoff == 0 ? 0 : 1; };
  Tensor out = Tensor::zeros({B, H, Tl, D}, adt, dev);
  Tensor lse = Tensor::full({B, H, Tl}, -std::numeric_limits<double>::infinity(), adt, dev);
  RingBlock blk = own;
  for (int s = 0; s < N; ++s) {
    RingBlock nxt;
    RingTransfer tr = pass_on(*cp.group, s, blk, nxt);
    for (const RingPiece& p : ring_pieces(L, ring_owner(L, s))) {
      const AttnConfig pc = piece_config(cfg, L, p);
      Tensor plse;
      const Tensor pout = detail::piece_forward(pc, qch[chunk(p)], call_kv(blk, 0, p), call_kv(blk, 1, p), cval,
                                                call_fox(blk, p, pc.q_offset), plse);
      merge_into(out.narrow(2, p.qoff, p.qlen), lse.narrow(2, p.qoff, p.qlen), pout, plse);
      tr.progress();
    }
    if (s + 1 < N) {
      tr.wait();
      blk = nxt;
    }
  }
  const bool sink = terms.sink.defined();
  const Tensor zval = sink ? terms.sink.value().to(dev).to(adt) : Tensor();
  if (sink) detail::fold_sink(zval, out, lse);  // one more term of every row's denominator

  std::vector<ag::Variable> inputs{q, k, v};
  const int ic = logn && terms.logn_c.defined() ? static_cast<int>(inputs.size()) : -1;
  if (ic >= 0) inputs.push_back(terms.logn_c);
  const int iz = sink ? static_cast<int>(inputs.size()) : -1;
  if (sink) inputs.push_back(terms.sink);
  const int ifx = fox ? static_cast<int>(inputs.size()) : -1;
  if (fox) inputs.push_back(fox_c);
  const DType zdt = sink ? terms.sink.dtype() : adt;
  const Device zdev = sink ? terms.sink.value().device() : dev;
  const Tensor result = out.dtype() == dt ? out : out.to(dt);
  return ag::make_result(result, inputs, "context_ring", [&] {
    const ContextParallel c = cp;  // the group outlives the graph (the caller's call keeps it)
    return [c, cfg, qch, cq, own, out, lse, cval, zval, zdt, zdev, ic, iz, ifx, dt, adt, dev, new_block, pass_on,
            call_kv, call_fox, chunk](const Tensor& gout, ag::Grads& gr) {
      const ZigzagLayout& L = c.layout;
      ContextGroup& grp = *c.group;
      const int N = L.n, r = L.rank, next = (r + 1) % N, prev = (r - 1 + N) % N;
      const bool want_c = ic >= 0 && gr.needs(ic), fox = ifx >= 0;
      const std::array<Tensor, 2> och = chunk_rows(out, L), lch = chunk_rows(lse, L), gch = chunk_rows(gout, L);
      Tensor dq = Tensor::zeros(out.shape(), adt, dev);
      Tensor dcq = fox ? Tensor::zeros(cq.shape(), adt, dev) : Tensor();  // FoX: dLoss/dc at the local rows
      Tensor dc;  // LogN's c, summed over the calls in step order
      RingBlock blk = own, acc;  // the block held and the gradient of its rows gathered so far
      RingTransfer acc_tr;
      RingBlock acc_in;  // what acc_tr receives
      for (int s = 0; s < N; ++s) {
        const int owner = ring_owner(L, s);
        RingBlock nxt;
        RingTransfer tr = pass_on(grp, s, blk, nxt);
        RingBlock part = new_block(owner, adt, true);
        for (const RingPiece& p : ring_pieces(L, owner)) {
          const AttnConfig pc = piece_config(cfg, L, p);
          const int i = chunk(p);
          const detail::PieceGrads pg =
              detail::piece_backward(pc, qch[i], call_kv(blk, 0, p), call_kv(blk, 1, p), och[i], lch[i], gch[i], cval,
                                     call_fox(blk, p, pc.q_offset), want_c);
          add_rows(dq, p.qoff, p.qlen, pg.dq);
          add_rows(part.kv.select(0, 0), p.koff, p.klen, pg.dk);
          add_rows(part.kv.select(0, 1), p.koff, p.klen, pg.dv);
          if (want_c) dc = dc.defined() ? ops::add(dc, pg.dc) : pg.dc;
          if (fox && p.qc == p.kc) {  // the chunk against itself: rows and keys are the same positions
            add_rows(dcq, p.qoff, p.qlen, pg.dfox);
          } else if (fox) {
            add_rows(part.c, p.koff, p.klen, pg.dfox.narrow(2, 0, p.klen));
            add_rows(dcq, p.qoff, p.qlen, pg.dfox.narrow(2, pc.q_offset, p.qlen));
          }
          tr.progress();
          acc_tr.progress();
        }
        if (s > 0) {  // the accumulator of this block, from the ranks it visited before
          acc_tr.wait();
          acc.kv = ops::add(acc_in.kv, part.kv);
          if (fox) acc.c = ops::add(acc_in.c, part.c);
        } else {
          acc = part;
        }
        // pass it on with the block (the last step sends every accumulator home: rank r + 1 owns
        // the block rank r holds at step N - 1)
        if (N == 1) {
          acc_in = acc;
        } else {
          acc_in = new_block(ring_owner(L, s + 1), adt, false);
          acc_tr = start_ring(grp, acc, acc_in, next, prev);
        }
        if (s + 1 < N) {
          tr.wait();
          blk = nxt;
        }
      }
      acc_tr.wait();
      auto as_dt = [&](const Tensor& t) { return t.dtype() == dt ? t.contiguous() : t.to(dt); };
      if (gr.needs(0)) gr.set(0, as_dt(dq));
      if (gr.needs(1)) gr.set(1, as_dt(acc_in.kv.select(0, 0)));
      if (gr.needs(2)) gr.set(2, as_dt(acc_in.kv.select(0, 1)));
      if (want_c) gr.set(ic, dc.to(cval.dtype()).to(cval.device()));
      if (iz >= 0 && gr.needs(iz)) gr.set(iz, detail::sink_grad(zval, lse, out, gout).to(zdt).to(zdev));
      if (fox && gr.needs(ifx)) gr.set(ifx, ops::add(dcq, acc_in.c));  // queries' part + keys' part
    };
  });
}

}  // namespace

Tensor local_rows(const Tensor& t, int64_t dim, const ZigzagLayout& L) {
  HZ_CHECK(dim >= 0 && dim < t.dim() && t.size(dim) == L.T, ShapeError, "context parallel: ", shape_str(t.shape()),
           " has no dimension ", dim, " of the sequence's ", L.T, " positions");
  Shape shape = t.shape();
  shape[dim] = L.local_len();
  Tensor out = Tensor::empty(shape, t.dtype(), t.device());
  int64_t off = 0;
  for (int64_t c : L.chunks()) {
    out.narrow(dim, off, L.chunk_len(c)).copy_(t.narrow(dim, L.chunk_begin(c), L.chunk_len(c)));
    off += L.chunk_len(c);
  }
  return out;
}

const char* name(ContextExchange e) { return kExchange[static_cast<int>(e)]; }

ContextExchange parse_context_exchange(const std::string& s) {
  if (s == "ring") return ContextExchange::Ring;
  if (s == "all_gather") return ContextExchange::AllGather;
  throw ValueError("context exchange '" + s + "': expected ring or all_gather");
}

ContextExchange context_exchange(const AttnConfig& cfg, const ZigzagLayout& L, ContextExchange global) {
  const int64_t W = max_window(cfg);
  if (L.n > 1 && W > 0 && W - 1 <= L.min_chunk()) return ContextExchange::Halo;
  HZ_CHECK(global != ContextExchange::Halo, ValueError, "context parallel: the halo is not a global exchange");
  return global;
}

ContextTraffic context_traffic(const AttnConfig& cfg, const ZigzagLayout& L, ContextExchange global, bool fox) {
  ContextTraffic t;
  if (L.n == 1) return t;
  switch (context_exchange(cfg, L, global)) {
    case ContextExchange::AllGather:
      t.fwd_rows = t.bwd_rows = (L.n - 1) * L.max_local_len();
      break;
    case ContextExchange::Ring:
      t.fwd_rows = t.bwd_rows = L.T - L.local_len_of((L.rank + 1) % L.n);
      t.bwd_acc_rows = L.T;
      if (fox) t.fox_totals = 4 * (L.n - 1);
      break;
    case ContextExchange::Halo: {
      const int64_t W = max_window(cfg);
      const auto ch = L.chunks();
      t.fwd_rows = t.bwd_rows =
          (L.rank + 1 < L.n ? halo_len(L, W, ch[0] + 1) : 0) + (L.rank >= 1 ? halo_len(L, W, ch[1] + 1) : 0);
      break;
    }
  }
  return t;
}

ag::Variable context_attention(const ag::Variable& q, const ag::Variable& k, const ag::Variable& v, const AttnConfig& cfg,
                               const ContextParallel& cp, const AttnTerms& terms) {
  const ZigzagLayout& L = cp.layout;
  HZ_CHECK(cp.group && cp.group->size() == L.n && cp.group->rank() == L.rank, ValueError,
           "context_attention: the group (", cp.group ? cp.group->size() : 0, " ranks) does not match the layout (", L.n,
           ")");
  HZ_CHECK(q.dim() == 4 && k.dim() == 4 && q.size(2) == L.local_len() && k.size(2) == L.local_len(), ShapeError,
           "context_attention: q and k must hold this rank's ", L.local_len(), " rows of a ", L.T, "-token sequence");
  HZ_CHECK(cfg.q_offset == -1 && cfg.key_begin == 0 && cfg.key_end == -1 && cfg.min_distance == 0 &&
               cfg.key_position == 0, ValueError,
           "context_attention: q_offset, key limits, min_distance and key_position are set per chunk; ",
           "leave them at their defaults");
  HZ_CHECK(!cfg.documents || cfg.documents->seq_len() == L.T, ShapeError, "context_attention: documents over ",
           cfg.documents ? cfg.documents->seq_len() : 0, " positions, the sequence has ", L.T);
  const bool fox = terms.forget.defined();
  HZ_CHECK(!fox || (terms.forget.dim() == 3 && terms.forget.size(2) == L.local_len()), ShapeError,
           "context_attention: FoX's log forget gates must hold this rank's ", L.local_len(), " rows");
  // FoX's log f travels with k and v (as a (B, H, Tl, 1) tensor): the decay c_i - c_j is a sum of
  // log f over positions (j, i], so any buffer holding the keys' rows gives it by a prefix sum
  const ag::Variable f4 = fox ? ag::unsqueeze(terms.forget, 3) : ag::Variable();
  auto chunk_terms = [&](const ag::Variable& f) {
    AttnTerms t = terms;
    if (fox) t.forget = ag::squeeze(f, 3);
    return t;
  };
  const auto ch = L.chunks();
  const int64_t len_a = L.chunk_len(ch[0]);
  const int64_t offs[2] = {0, len_a};
  std::vector<ag::Variable> outs;
  const ContextExchange ex = context_exchange(cfg, L, cp.global);
  if (ex == ContextExchange::Ring) {
    // FoX's c over the whole sequence at the local rows, in the accumulation dtype
    const DType adt = acc_dtype(q.dtype());
    const ag::Variable c = fox ? global_prefix(terms.forget.dtype() == adt ? terms.forget : ag::cast(terms.forget, adt), cp)
                               : ag::Variable();
    return ring_attention(q, k, v, cfg, cp, terms, c);
  }
  if (ex == ContextExchange::Halo) {
    const int64_t W = max_window(cfg);
    const ag::Variable hk = exchange_halo(k, W, cp), hv = exchange_halo(v, W, cp);
    const ag::Variable hf = fox ? exchange_halo(f4, W, cp) : ag::Variable();
    int64_t hoff = 0;
    for (int i = 0; i < 2; ++i) {
      const int64_t len = L.chunk_len(ch[i]), h = halo_len(L, W, ch[i]);
      ag::Variable kc = ag::narrow(k, 2, offs[i], len), vc = ag::narrow(v, 2, offs[i], len);
      ag::Variable fc = fox ? ag::narrow(f4, 2, offs[i], len) : ag::Variable();
      // joined also when h is 0 (context rank 0's first chunk): every rank then builds the same
      // graph, so its backward runs the same nodes in the same order and posts its transfers and the
      // gradient hooks' all-reduces in the same order as the other ranks (one NCCL stream carries
      // both: another order would deadlock)
      kc = ag::cat({ag::narrow(hk, 2, hoff, h), kc}, 2);
      vc = ag::cat({ag::narrow(hv, 2, hoff, h), vc}, 2);
      if (fox) fc = ag::cat({ag::narrow(hf, 2, hoff, h), fc}, 2);
      hoff += h;
      AttnConfig c = cfg;
      c.q_offset = h;
      c.key_position = L.chunk_begin(ch[i]) - h;  // the buffer's first key, for documents and SWAN's row
      outs.push_back(fused_attention(ag::contiguous(ag::narrow(q, 2, offs[i], len)), ag::contiguous(kc),
                                     ag::contiguous(vc), c, chunk_terms(fc)).out);
    }
  } else {
    const ag::Variable K = gather_sequence(k, cp), V = gather_sequence(v, cp);
    const ag::Variable F = fox ? gather_sequence(f4, cp) : ag::Variable();
    for (int i = 0; i < 2; ++i) {
      AttnConfig c = cfg;
      c.q_offset = L.chunk_begin(ch[i]);
      c.key_end = L.chunk_end(ch[i]);
      outs.push_back(fused_attention(ag::contiguous(ag::narrow(q, 2, offs[i], L.chunk_len(ch[i]))), K, V, c,
                                     chunk_terms(F)).out);
    }
  }
  return ag::cat(outs, 2);
}

}  // namespace hz::attn
