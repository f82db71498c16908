// Horizon: context parallelism's exchanges (see exchange.h): the choice per layer, the traffic
// plan, the all-gather and the halo. The ring is ring.cpp's.
#include "distributed/context/exchange.h"

#include <algorithm>

#include "autograd/functions.h"
#include "core/names.h"
#include "core/ops.h"

namespace hz::dist {

namespace {

constexpr const char* kExchange[] = {"halo", "all_gather", "ring"};

// One step of a shift: send (a view, made contiguous) to dest and receive into recv (a view) from
// src; -1 skips that side, both -1 skips the call. Counts the bytes sent.
void shift(ContextLink& g, const Tensor& send, int dest, Tensor& recv, int src) {
  if (dest < 0 && src < 0) return;
  const Tensor s = dest >= 0 ? send.contiguous() : Tensor();
  Tensor rv = src >= 0 ? Tensor::empty(recv.shape(), recv.dtype(), recv.device()) : Tensor();
  g.comm->send_recv(s, dest, rv, src);
  if (dest >= 0) g.bytes_sent += bytes_of(s);
  if (src >= 0) recv.copy_(rv);
}

}  // namespace

const char* name(ContextExchange e) { return enum_name(e, kExchange); }

ContextExchange parse_context_exchange(const std::string& s) {
  const ContextExchange e = parse_name<ContextExchange>(s, kExchange, "context exchange");
  HZ_CHECK(e != ContextExchange::Halo, ValueError,
           "context exchange 'halo' is chosen per layer where every head's window fits a chunk; the layers that read "
           "the whole sequence take ring or all_gather");
  return e;
}

int64_t bytes_of(const Tensor& t) { return t.numel() * static_cast<int64_t>(dtype_size(t.dtype())); }

int64_t halo_len(const ZigzagLayout& L, int64_t W, int64_t c) { return std::min(W - 1, L.chunk_begin(c)); }

ContextExchange exchange_for(const attn::AttnConfig& cfg, const ZigzagLayout& L, ContextExchange global, bool fox) {
  const int64_t W = attn::max_reach(cfg);
  // sink tokens: the sequence's first S keys, sent once, beside windows, where attention/ lets them
  // be pinned (attn::sinks_pinnable) and they lie in rank 0's first chunk; global otherwise
  const bool sinks_ok = cfg.sink_tokens == 0 || (attn::sinks_pinnable(cfg, fox) && cfg.sink_tokens <= L.chunk_len(0));
  if (L.n > 1 && W > 0 && W - 1 <= L.min_chunk() && sinks_ok) return ContextExchange::Halo;
  HZ_CHECK(global != ContextExchange::Halo, ValueError, "context parallel: the halo is not a global exchange");
  return global;
}

ContextTraffic context_traffic(const attn::AttnConfig& cfg, const ZigzagLayout& L, ContextExchange global, bool fox) {
  ContextTraffic t;
  if (L.n == 1) return t;
  switch (exchange_for(cfg, L, global, fox)) {
    case ContextExchange::AllGather:
      t.fwd_rows = t.bwd_rows = (L.n - 1) * L.max_local_len();
      break;
    case ContextExchange::Ring:
      t.fwd_rows = t.bwd_rows = L.T - L.local_len_of((L.rank + 1) % L.n);
      t.bwd_acc_rows = L.T;
      if (fox) t.fox_totals = 4 * (L.n - 1);
      break;
    case ContextExchange::Halo: {
      const int64_t W = attn::max_reach(cfg);
      const auto ch = L.chunks();
      t.fwd_rows = t.bwd_rows =
          (L.rank + 1 < L.n ? halo_len(L, W, ch[0] + 1) : 0) + (L.rank >= 1 ? halo_len(L, W, ch[1] + 1) : 0);
      if (cfg.sink_tokens > 0) {  // the sinks: rank 0's broadcast, everyone's gradients all-gathered
        if (L.rank == 0) t.fwd_rows += (L.n - 1) * cfg.sink_tokens;
        t.bwd_rows += (L.n - 1) * cfg.sink_tokens;
      }
      break;
    }
    case ContextExchange::Count: break;
  }
  return t;
}

ag::Variable gather_sequence(const ag::Variable& x, const std::shared_ptr<ContextLink>& link) {
  const ZigzagLayout& L = link->layout;
  const int N = L.n, r = L.rank;
  const int64_t B = x.size(0), Hk = x.size(1), Tl = x.size(2), D = x.size(3), Lmax = L.max_local_len();
  const DType dt = x.dtype();
  const Device dev = x.value().device();
  Tensor pad = Tensor::zeros({B, Hk, Lmax, D}, dt, dev);
  pad.narrow(2, 0, Tl).copy_(x.value());
  Tensor all = Tensor::empty({N, B, Hk, Lmax, D}, dt, dev);
  link->comm->all_gather_into(pad, all);
  link->bytes_sent += bytes_of(pad) * (N - 1);
  Tensor out = Tensor::empty({B, Hk, L.T, D}, dt, dev);
  for (int q = 0; q < N; ++q) {
    int64_t off = 0;
    for (int64_t c : L.chunks_of(q)) {
      out.narrow(2, L.chunk_begin(c), L.chunk_len(c)).copy_(all.select(0, q).narrow(2, off, L.chunk_len(c)));
      off += L.chunk_len(c);
    }
  }
  return ag::make_result(out, {x}, "context_gather", [link, B, Hk, Tl, D, Lmax, dt, dev, N, r] {
    return [link, B, Hk, Tl, D, Lmax, dt, dev, N, r](const Tensor& gout, ag::Grads& gr) {
      const ZigzagLayout& L = link->layout;
      auto rows_of = [&](int q) {  // gout at rank q's positions, padded to Lmax
        Tensor s = Tensor::zeros({B, Hk, Lmax, D}, dt, dev);
        s.narrow(2, 0, L.local_len_of(q)).copy_(local_rows(gout, 2, L.of_rank(q)));
        return s;
      };
      std::vector<Tensor> from(N);
      from[r] = rows_of(r);
      for (int s = 1; s < N; ++s) {  // a shift schedule: every pair exchanges once
        const int dest = (r + s) % N, src = (r - s + N) % N;
        Tensor send = rows_of(dest);
        from[src] = Tensor::empty({B, Hk, Lmax, D}, dt, dev);
        link->comm->send_recv(send, dest, from[src], src);
        link->bytes_sent += bytes_of(send);
      }
      Tensor sum = from[0].clone();
      for (int q = 1; q < N; ++q) ops::add_(sum, from[q]);  // rank order: deterministic
      gr.set(0, sum.narrow(2, 0, Tl).contiguous());
    };
  });
}

ag::Variable broadcast_sinks(const ag::Variable& x, int64_t S, const std::shared_ptr<ContextLink>& link) {
  const ZigzagLayout& L = link->layout;
  const int N = L.n, r = L.rank;
  HZ_CHECK(S >= 1 && S <= L.chunk_len(0), ValueError, "context parallel: ", S, " sink tokens do not lie in chunk 0 (",
           L.chunk_len(0), " positions)");
  const int64_t B = x.size(0), Hk = x.size(1), Tl = x.size(2), D = x.size(3);
  const DType dt = x.dtype();
  const Device dev = x.value().device();
  Tensor sinks = r == 0 ? x.value().narrow(2, 0, S).contiguous() : Tensor::empty({B, Hk, S, D}, dt, dev);
  link->comm->broadcast(sinks, 0);
  if (r == 0) link->bytes_sent += bytes_of(sinks) * (N - 1);
  return ag::make_result(sinks, {x}, "context_sinks", [link, B, Hk, Tl, D, S, dt, dev, N, r] {
    return [link, B, Hk, Tl, D, S, dt, dev, N, r](const Tensor& gout, ag::Grads& gr) {
      const Tensor mine = gout.contiguous();
      Tensor all = Tensor::empty({N, B, Hk, S, D}, dt, dev);
      link->comm->all_gather_into(mine, all);
      link->bytes_sent += bytes_of(mine) * (N - 1);
      Tensor dx = Tensor::zeros({B, Hk, Tl, D}, dt, dev);
      if (r == 0) {  // the sinks' gradient from every rank, summed in rank order
        Tensor sum = all.select(0, 0).clone();
        for (int q = 1; q < N; ++q) ops::add_(sum, all.select(0, q));
        dx.narrow(2, 0, S).copy_(sum);
      }
      gr.set(0, dx);
    };
  });
}

ag::Variable exchange_halo(const ag::Variable& x, int64_t W, const std::shared_ptr<ContextLink>& link) {
  const ZigzagLayout& L = link->layout;
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
    shift(*link, xv.narrow(2, len_a - up, up), up > 0 ? r + 1 : -1, recv_a, h_a > 0 ? r - 1 : -1);
    Tensor recv_b = halo.narrow(2, h_a, h_b);
    if (r == N - 1) {
      recv_b.copy_(xv.narrow(2, len_a - h_b, h_b));  // chunk N-1 is this rank's chunk a
      shift(*link, xv.narrow(2, Tl - down, down), down > 0 ? r - 1 : -1, recv_b, -1);
    } else {
      shift(*link, xv.narrow(2, Tl - down, down), down > 0 ? r - 1 : -1, recv_b, h_b > 0 ? r + 1 : -1);
    }
  }
  return ag::make_result(halo, {x}, "context_halo", [link, B, Hk, Tl, D, len_a, h_a, h_b, up, down, dt, dev, N, r] {
    return [link, B, Hk, Tl, D, len_a, h_a, h_b, up, down, dt, dev, N, r](const Tensor& gout, ag::Grads& gr) {
      Tensor dx = Tensor::zeros({B, Hk, Tl, D}, dt, dev);
      Tensor tail_a = dx.narrow(2, len_a - up, up), tail_b = dx.narrow(2, Tl - down, down);
      // reverse of the up shift: halo_a's gradient back to rank r - 1, chunk a's tail from r + 1
      shift(*link, gout.narrow(2, 0, h_a), h_a > 0 ? r - 1 : -1, tail_a, up > 0 ? r + 1 : -1);
      if (r == N - 1) {
        Tensor own = dx.narrow(2, len_a - h_b, h_b);
        own.copy_(ops::add(own, gout.narrow(2, h_a, h_b)));
        shift(*link, Tensor(), -1, tail_b, down > 0 ? r - 1 : -1);
      } else {
        shift(*link, gout.narrow(2, h_a, h_b), h_b > 0 ? r + 1 : -1, tail_b, down > 0 ? r - 1 : -1);
      }
      gr.set(0, dx);
    };
  });
}

}  // namespace hz::dist
