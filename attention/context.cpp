#include "attention/context.h"

#include <algorithm>

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

constexpr const char* kExchange[] = {"halo", "all-gather"};

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

ContextExchange context_exchange(const AttnConfig& cfg, const ZigzagLayout& L) {
  const int64_t W = max_window(cfg);
  if (L.n > 1 && W > 0 && W - 1 <= L.min_chunk()) return ContextExchange::Halo;
  return ContextExchange::AllGather;
}

int64_t context_rows_sent(const AttnConfig& cfg, const ZigzagLayout& L) {
  if (L.n == 1) return 0;
  if (context_exchange(cfg, L) == ContextExchange::AllGather) return (L.n - 1) * L.max_local_len();
  const int64_t W = max_window(cfg);
  const auto ch = L.chunks();
  return (L.rank + 1 < L.n ? halo_len(L, W, ch[0] + 1) : 0) + (L.rank >= 1 ? halo_len(L, W, ch[1] + 1) : 0);
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
  if (context_exchange(cfg, L) == ContextExchange::Halo) {
    const int64_t W = max_window(cfg);
    const ag::Variable hk = exchange_halo(k, W, cp), hv = exchange_halo(v, W, cp);
    const ag::Variable hf = fox ? exchange_halo(f4, W, cp) : ag::Variable();
    int64_t hoff = 0;
    for (int i = 0; i < 2; ++i) {
      const int64_t len = L.chunk_len(ch[i]), h = halo_len(L, W, ch[i]);
      ag::Variable kc = ag::narrow(k, 2, offs[i], len), vc = ag::narrow(v, 2, offs[i], len);
      ag::Variable fc = fox ? ag::narrow(f4, 2, offs[i], len) : ag::Variable();
      if (h > 0) {
        kc = ag::cat({ag::narrow(hk, 2, hoff, h), kc}, 2);
        vc = ag::cat({ag::narrow(hv, 2, hoff, h), vc}, 2);
        if (fox) fc = ag::cat({ag::narrow(hf, 2, hoff, h), fc}, 2);
      }
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
