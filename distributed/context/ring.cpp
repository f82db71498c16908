// Horizon: context parallelism's ring (see ring.h).
#include "distributed/context/ring.h"

#include <limits>

#include "attention/partial.h"
#include "autograd/functions.h"
#include "core/ops.h"

namespace hz::dist {

namespace {

// rows [off, off + n) of t along dim 2 += x
void add_rows(const Tensor& t, int64_t off, int64_t n, const Tensor& x) {
  Tensor r = t.narrow(2, off, n);
  r.copy_(ops::add(r, x));
}

// The two local query chunks' rows of t (dim 2), each made contiguous once for every step's parts.
std::array<Tensor, 2> chunk_rows(const Tensor& t, const ZigzagLayout& L) {
  const int64_t la = L.chunk_len(L.chunks()[0]);
  return {t.narrow(2, 0, la).contiguous(), t.narrow(2, la, t.size(2) - la).contiguous()};
}

// Every chunk's total by chunk index, from the (2, a's shape) sums each rank gathers.
std::vector<Tensor> chunk_totals(ContextLink& link, const Tensor& a, const Tensor& b) {
  const ZigzagLayout& L = link.layout;
  Shape two{2}, every{L.n, 2};
  for (int64_t d : a.shape()) {
    two.push_back(d);
    every.push_back(d);
  }
  Tensor mine = Tensor::empty(two, a.dtype(), a.device());
  mine.select(0, 0).copy_(a);
  mine.select(0, 1).copy_(b);
  Tensor all = Tensor::empty(every, a.dtype(), a.device());
  link.comm->all_gather_into(mine, all);
  link.bytes_sent += bytes_of(mine) * (L.n - 1);
  std::vector<Tensor> t(2 * L.n);
  for (int q = 0; q < L.n; ++q)
    for (int i = 0; i < 2; ++i) t[L.chunks_of(q)[i]] = all.select(0, q).select(0, i);
  return t;
}

}  // namespace

ag::Variable sequence_prefix(const ag::Variable& x, const std::shared_ptr<ContextLink>& link) {
  const ZigzagLayout& L = link->layout;
  const auto ch = L.chunks();
  const int64_t la = L.chunk_len(ch[0]), lb = L.chunk_len(ch[1]);
  const Tensor xv = x.value();
  const Tensor ca = ops::cumsum(xv.narrow(2, 0, la), 2), cb = ops::cumsum(xv.narrow(2, la, lb), 2);
  const std::vector<Tensor> tot = chunk_totals(*link, ca.select(2, la - 1), cb.select(2, lb - 1));
  Tensor c = Tensor::empty(xv.shape(), xv.dtype(), xv.device());
  Tensor before = ops::mul_scalar(tot[0], 0.0);  // the sum of the chunks before chunk i, in order
  for (int64_t i = 0; i < 2 * L.n; ++i) {
    if (i == ch[0]) c.narrow(2, 0, la).copy_(ops::add(ca, before.unsqueeze(2)));
    if (i == ch[1]) c.narrow(2, la, lb).copy_(ops::add(cb, before.unsqueeze(2)));
    before = ops::add(before, tot[i]);
  }
  return ag::make_result(c, {x}, "context_prefix", [link, la, lb] {
    return [link, la, lb](const Tensor& g, ag::Grads& gr) {
      const ZigzagLayout& L = link->layout;
      const auto ch = L.chunks();
      const Tensor ga = g.narrow(2, 0, la), gb = g.narrow(2, la, lb);
      const std::vector<Tensor> tot = chunk_totals(*link, ops::sum(ga, 2), ops::sum(gb, 2));
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

// ---- the ring's pieces -------------------------------------------------------------------------

void Ring::Transfer::progress() {
  for (auto& p : pending) p->test();
}

void Ring::Transfer::wait() {
  for (auto& p : pending) p->wait();
  pending.clear();
}

Ring::Ring(std::shared_ptr<ContextLink> link, const attn::AttnConfig& cfg) : link_(std::move(link)), cfg_(cfg) {}

std::vector<Ring::Part> Ring::parts(int owner) const {
  // this rank's chunks against the chunks of the block held that start at or before them (a later
  // chunk is invisible to every causal head)
  std::vector<Part> out;
  const auto qch = L().chunks(), kch = L().chunks_of(owner);
  int64_t qoff = 0;
  for (int64_t qc : qch) {
    int64_t koff = 0;
    for (int64_t kc : kch) {
      if (kc <= qc) out.push_back({qc, qoff, L().chunk_len(qc), kc, koff, L().chunk_len(kc)});
      koff += L().chunk_len(kc);
    }
    qoff += L().chunk_len(qc);
  }
  return out;
}

attn::AttnConfig Ring::part_config(const Part& p) const {
  attn::AttnConfig c = cfg_;
  c.q_offset = L().chunk_begin(p.qc) - L().chunk_begin(p.kc);
  c.key_position = L().chunk_begin(p.kc);
  c.logn_whole_row = true;
  return c;
}

Ring::Block Ring::new_block(int owner, DType kvdt, bool zero) const {
  const int64_t rows = L().local_len_of(owner);
  Block b;
  b.kv = zero ? Tensor::zeros({2, B_, Hk_, rows, D_}, kvdt, dev_) : Tensor::empty({2, B_, Hk_, rows, D_}, kvdt, dev_);
  if (fox_) b.c = zero ? Tensor::zeros({B_, H_, rows}, adt_, dev_) : Tensor::empty({B_, H_, rows}, adt_, dev_);
  if (dist_k_) b.dk = zero ? Tensor::zeros({B_, H_, rows}, adt_, dev_) : Tensor::empty({B_, H_, rows}, adt_, dev_);
  return b;
}

Ring::Transfer Ring::start(const Block& send, Block& recv) {
  const int next = (L().rank + 1) % L().n, prev = (L().rank - 1 + L().n) % L().n;
  Transfer t;
  for (auto [s, r] : {std::pair<const Tensor*, Tensor*>{&send.kv, &recv.kv}, {&send.c, &recv.c}, {&send.dk, &recv.dk}}) {
    if (!s->defined()) continue;
    t.pending.push_back(link_->comm->send_recv_async(*s, next, *r, prev));
    link_->bytes_sent += bytes_of(*s);
  }
  return t;
}

Ring::Transfer Ring::pass_on(int step, const Block& held, Block& next) {
  if (step + 1 == L().n) return Transfer{};
  next = new_block(owner_at(step + 1), dt_, false);
  return start(held, next);
}

Tensor Ring::part_kv(const Block& b, int which, const Part& p) const {
  return b.kv.select(0, which).narrow(2, p.koff, p.klen).contiguous();
}

Tensor Ring::part_fox(const Block& b, const Part& p, int64_t q_offset) const {
  if (!fox_) return Tensor();
  // the keys' c at [0, klen), the queries' at [q_offset, q_offset + qlen); a diagonal part (the
  // chunk against itself) has them at the same place
  Tensor f = Tensor::zeros({B_, H_, std::max(p.klen, q_offset + p.qlen)}, adt_, dev_);
  f.narrow(2, 0, p.klen).copy_(b.c.narrow(2, p.koff, p.klen));
  f.narrow(2, q_offset, p.qlen).copy_(cq_.narrow(2, p.qoff, p.qlen));
  return f;
}

Tensor Ring::part_dist_q(const Part& p) const {
  return dq_.defined() ? dq_.narrow(2, p.qoff, p.qlen).contiguous() : Tensor();
}

Tensor Ring::part_dist_k(const Block& b, const Part& p) const {
  return dist_k_ ? b.dk.narrow(2, p.koff, p.klen).contiguous() : Tensor();
}

// ---- forward -----------------------------------------------------------------------------------

ag::Variable Ring::attend(const ag::Variable& q, const ag::Variable& k, const ag::Variable& v,
                          const attn::AttnTerms& terms, const ag::Variable& fox_c) {
  const int N = L().n;
  const Tensor qv = q.value().contiguous();
  dev_ = qv.device();
  dt_ = qv.dtype();
  adt_ = acc_dtype(dt_);
  B_ = qv.size(0);
  H_ = qv.size(1);
  D_ = qv.size(3);
  Hk_ = k.size(1);
  const int64_t Tl = qv.size(2);
  const bool logn = cfg_.logit == attn::LogitKind::LogN;
  fox_ = fox_c.defined();
  cval_ = logn ? terms.logn_c.value() : Tensor();
  cq_ = fox_ ? fox_c.value().contiguous() : Tensor();
  dist_k_ = terms.dist_k.defined();
  dq_ = terms.dist_q.defined() ? terms.dist_q.value().to(adt_).contiguous() : Tensor();
  own_ = new_block(L().rank, dt_, false);
  own_.kv.select(0, 0).copy_(k.value());
  own_.kv.select(0, 1).copy_(v.value());
  if (fox_) own_.c = cq_;
  if (dist_k_) own_.dk = terms.dist_k.value().to(adt_).contiguous();
  q_ = chunk_rows(qv, L());

  out_ = Tensor::zeros({B_, H_, Tl, D_}, adt_, dev_);
  lse_ = Tensor::full({B_, H_, Tl}, -std::numeric_limits<double>::infinity(), adt_, dev_);
  Block held = own_;
  for (int s = 0; s < N; ++s) {
    Block next;
    Transfer tr = pass_on(s, held, next);
    for (const Part& p : parts(owner_at(s))) {
      const attn::AttnConfig pc = part_config(p);
      const attn::Partial part =
          attn::partial_attention(pc, q_[chunk_index(p)], part_kv(held, 0, p), part_kv(held, 1, p), cval_,
                                  part_fox(held, p, pc.q_offset), part_dist_q(p), part_dist_k(held, p));
      attn::combine_partial(out_.narrow(2, p.qoff, p.qlen), lse_.narrow(2, p.qoff, p.qlen), part.out, part.lse);
      tr.progress();
    }
    if (s + 1 < N) {
      tr.wait();
      held = next;
    }
  }
  const bool sink = terms.sink.defined();
  if (sink) {
    zval_ = terms.sink.value().to(dev_).to(adt_);
    zdt_ = terms.sink.dtype();
    zdev_ = terms.sink.value().device();
    attn::fold_sink(zval_, out_, lse_);  // one more term of every row's denominator
  }

  std::vector<ag::Variable> inputs{q, k, v};
  if (logn && terms.logn_c.defined()) {
    ic_ = static_cast<int>(inputs.size());
    inputs.push_back(terms.logn_c);
  }
  if (sink) {
    iz_ = static_cast<int>(inputs.size());
    inputs.push_back(terms.sink);
  }
  if (fox_) {
    ifx_ = static_cast<int>(inputs.size());
    inputs.push_back(fox_c);
  }
  if (dq_.defined()) {
    idq_ = static_cast<int>(inputs.size());
    dq_dt_ = terms.dist_q.dtype();
    inputs.push_back(terms.dist_q);
  }
  if (dist_k_) {
    idk_ = static_cast<int>(inputs.size());
    dk_dt_ = terms.dist_k.dtype();
    inputs.push_back(terms.dist_k);
  }
  const Tensor result = out_.dtype() == dt_ ? out_ : out_.to(dt_);
  // the node keeps this ring alive (its members are what the backward reads); the link's
  // communicator outlives the graph
  return ag::make_result(result, inputs, "context_ring", [this] {
    return [self = shared_from_this()](const Tensor& gout, ag::Grads& gr) { self->backward(gout, gr); };
  });
}

// ---- backward ----------------------------------------------------------------------------------

void Ring::backward(const Tensor& gout, ag::Grads& gr) {
  const int N = L().n;
  const bool want_c = ic_ >= 0 && gr.needs(ic_);
  const std::array<Tensor, 2> och = chunk_rows(out_, L()), lch = chunk_rows(lse_, L()), gch = chunk_rows(gout, L());
  Tensor dq = Tensor::zeros(out_.shape(), adt_, dev_);
  Tensor dcq = fox_ ? Tensor::zeros(cq_.shape(), adt_, dev_) : Tensor();  // FoX: dLoss/dc at the local rows
  Tensor ddq = dq_.defined() ? Tensor::zeros(dq_.shape(), adt_, dev_) : Tensor();  // GRAPE-A: the query rates'
  Tensor dc;  // LogN's c, summed over the parts in step order
  Block held = own_, acc;  // the block held and the gradient of its rows gathered so far
  Transfer acc_tr;
  Block acc_in;  // what acc_tr receives
  for (int s = 0; s < N; ++s) {
    const int owner = owner_at(s);
    Block next;
    Transfer tr = pass_on(s, held, next);
    Block part = new_block(owner, adt_, true);
    for (const Part& p : parts(owner)) {
      const attn::AttnConfig pc = part_config(p);
      const int i = chunk_index(p);
      const attn::PartialGrads pg =
          attn::partial_attention_backward(pc, q_[i], part_kv(held, 0, p), part_kv(held, 1, p), och[i], lch[i], gch[i],
                                           cval_, part_fox(held, p, pc.q_offset), want_c, part_dist_q(p),
                                           part_dist_k(held, p));
      if (ddq.defined()) add_rows(ddq, p.qoff, p.qlen, pg.ddist_q);
      if (dist_k_) add_rows(part.dk, p.koff, p.klen, pg.ddist_k);
      add_rows(dq, p.qoff, p.qlen, pg.dq);
      add_rows(part.kv.select(0, 0), p.koff, p.klen, pg.dk);
      add_rows(part.kv.select(0, 1), p.koff, p.klen, pg.dv);
      if (want_c) dc = dc.defined() ? ops::add(dc, pg.dc) : pg.dc;
      if (fox_ && p.qc == p.kc) {  // the chunk against itself: rows and keys are the same positions
        add_rows(dcq, p.qoff, p.qlen, pg.dfox);
      } else if (fox_) {
        add_rows(part.c, p.koff, p.klen, pg.dfox.narrow(2, 0, p.klen));
        add_rows(dcq, p.qoff, p.qlen, pg.dfox.narrow(2, pc.q_offset, p.qlen));
      }
      tr.progress();
      acc_tr.progress();
    }
    if (s > 0) {  // the accumulator of this block, from the ranks it visited before
      acc_tr.wait();
      acc.kv = ops::add(acc_in.kv, part.kv);
      if (fox_) acc.c = ops::add(acc_in.c, part.c);
      if (dist_k_) acc.dk = ops::add(acc_in.dk, part.dk);
    } else {
      acc = part;
    }
    // pass it on with the block (the last step sends every accumulator home: rank r + 1 owns the
    // block rank r holds at step N - 1)
    if (N == 1) {
      acc_in = acc;
    } else {
      acc_in = new_block(owner_at(s + 1), adt_, false);
      acc_tr = start(acc, acc_in);
    }
    if (s + 1 < N) {
      tr.wait();
      held = next;
    }
  }
  acc_tr.wait();
  auto as_dt = [&](const Tensor& t) { return t.dtype() == dt_ ? t.contiguous() : t.to(dt_); };
  if (gr.needs(0)) gr.set(0, as_dt(dq));
  if (gr.needs(1)) gr.set(1, as_dt(acc_in.kv.select(0, 0)));
  if (gr.needs(2)) gr.set(2, as_dt(acc_in.kv.select(0, 1)));
  if (want_c) gr.set(ic_, dc.to(cval_.dtype()).to(cval_.device()));
  if (iz_ >= 0 && gr.needs(iz_)) gr.set(iz_, attn::sink_grad(zval_, lse_, out_, gout).to(zdt_).to(zdev_));
  if (fox_ && gr.needs(ifx_)) gr.set(ifx_, ops::add(dcq, acc_in.c));  // queries' part + keys' part
  if (idq_ >= 0 && gr.needs(idq_)) gr.set(idq_, ddq.to(dq_dt_));
  if (idk_ >= 0 && gr.needs(idk_)) gr.set(idk_, acc_in.dk.to(dk_dt_).contiguous());
}

}  // namespace hz::dist
