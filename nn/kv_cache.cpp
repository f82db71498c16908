#include "nn/kv_cache.h"

#include <algorithm>

#include "autograd/functions.h"
#include "core/ops.h"

namespace hz::nn {

namespace {

// The config of query heads [h0, h1): their windows and ALiBi slopes, the rest unchanged.
attn::AttnConfig heads_config(const attn::AttnConfig& cfg, int64_t h0, int64_t h1) {
  attn::AttnConfig c = cfg;
  c.window.assign(cfg.window.begin() + h0, cfg.window.begin() + h1);
  if (!cfg.alibi_slope.empty()) c.alibi_slope.assign(cfg.alibi_slope.begin() + h0, cfg.alibi_slope.begin() + h1);
  return c;
}

}  // namespace

LayerKV::LayerKV(const attn::AttnConfig& cfg, int64_t Hkv, int64_t D, int64_t capacity, bool keep_all, bool forget,
                 DType dt, Device dev)
    : capacity_(capacity) {
  const int64_t H = static_cast<int64_t>(cfg.window.size());
  HZ_CHECK(capacity >= 1, ValueError, "kv cache: the capacity must hold at least one token, got ", capacity);
  HZ_CHECK(Hkv > 0 && H % Hkv == 0, ShapeError, "kv cache: ", H, " query heads do not group over ", Hkv,
           " key/value heads");
  G_ = H / Hkv;
  cap_.assign(Hkv, 0);
  // sink tokens beside windows: the first S keys pinned ahead of the window's ring where attention/
  // allows it (attn::sinks_pinnable), every key kept otherwise
  const bool pin = attn::sinks_pinnable(cfg, forget) && !keep_all;
  for (int64_t h = 0; h < H; ++h) {
    const int64_t w = attn::head_reach(cfg, static_cast<size_t>(h));  // its window or chunk; 0: unbounded
    const bool all = keep_all || w <= 0 || (cfg.sink_tokens > 0 && !pin);
    cap_[h / G_] = std::max(cap_[h / G_], all ? capacity : std::min(w, capacity));
  }
  for (int64_t g = 0; g < Hkv;) {
    Band b;
    b.kv0 = g;
    b.cap = cap_[g];
    while (g < Hkv && cap_[g] == b.cap) ++g;
    b.kv1 = g;
    const int64_t slack = (b.cap + 7) / 8;
    if (pin && b.cap < capacity && cfg.sink_tokens + b.cap + slack < capacity) b.sinks = cfg.sink_tokens;
    else if (cfg.sink_tokens > 0) b.cap = capacity;  // the sinks and the window span the capacity anyway
    b.base = b.sinks;
    b.rows = b.cap < capacity ? b.sinks + b.cap + slack : capacity;
    b.k = Tensor::zeros({1, b.kv1 - b.kv0, b.rows, D}, dt, dev);
    b.v = Tensor::zeros({1, b.kv1 - b.kv0, b.rows, D}, dt, dev);
    for (int64_t kv = b.kv0; kv < b.kv1; ++kv) cap_[kv] = b.sinks + b.cap;
    bands_.push_back(std::move(b));
  }
}

int64_t LayerKV::bytes() const {
  int64_t n = 0;
  for (const Band& b : bands_) {
    n += (b.k.numel() + b.v.numel()) * static_cast<int64_t>(dtype_size(b.k.dtype()));
    if (b.f.defined()) n += b.f.numel() * static_cast<int64_t>(dtype_size(b.f.dtype()));
  }
  return n;
}

// Appends k, v (1, heads, n, D) of positions first .. first + n - 1 after the buffer's keys; when
// they do not fit, the last cap - 1 keys move to the front first (all a later query sees besides
// itself). The caller made sure that n then fits.
void LayerKV::store(Band& b, const Tensor& k, const Tensor& v, const Tensor& f, int64_t first) {
  const int64_t n = k.size(2), o = b.sinks;  // the ring's rows follow the pinned sinks
  HZ_CHECK(b.base + b.len == first, ValueError, "kv cache: keys of position ", first, " after position ",
           b.base + b.len - 1);
  if (b.len + n > b.rows - o) {
    const int64_t keep = std::min(b.len, b.cap - 1);
    if (keep > 0) {  // source and destination may overlap: copy through a temporary
      const Tensor ks = b.k.narrow(2, o + b.len - keep, keep).clone(), vs = b.v.narrow(2, o + b.len - keep, keep).clone();
      b.k.narrow(2, o, keep).copy_(ks);
      b.v.narrow(2, o, keep).copy_(vs);
      if (f.defined()) {
        const Tensor fs = b.f.narrow(2, b.len - keep, keep).clone();
        b.f.narrow(2, 0, keep).copy_(fs);
      }
    }
    b.base += b.len - keep;
    b.len = keep;
  }
  b.k.narrow(2, o + b.len, n).copy_(k);
  b.v.narrow(2, o + b.len, n).copy_(v);
  if (f.defined()) b.f.narrow(2, b.len, n).copy_(f);
  b.len += n;
}

// A band with pinned sinks: the buffer's rows are positions 0 .. S-1, then base .. base + len - 1,
// so a buffer index is no position. The op sees the rows as consecutive keys from key_position 0:
// the window rule holds (the ring's distances are the sequence's; a query's window reaches below
// base only while base = S, where index and position agree), the sink interval is the first S rows,
// LogN's visible count is the sequence's, and the terms that read distances or positions (ALiBi,
// scale-invariant, SWAN's row, LogN by position, Llama 4's temperature) take each row's true
// position through the op's token positions.
ag::Variable LayerKV::attend_pinned(Band& b, const ag::Variable& qb, const Tensor& kb, const Tensor& vb,
                                    attn::AttnConfig c, const attn::AttnTerms& tb, int64_t p0) {
  const int64_t n = kb.size(2), S = b.sinks;
  c.key_position = 0;
  c.key_begin = 0;
  if (p0 < S) {  // the sinks are still arriving: every earlier key is a sink row, index = position
    const Tensor K = p0 > 0 ? ag::cat({ag::Variable(b.k.narrow(2, 0, p0)), ag::Variable(kb)}, 2).value() : kb.contiguous();
    const Tensor V = p0 > 0 ? ag::cat({ag::Variable(b.v.narrow(2, 0, p0)), ag::Variable(vb)}, 2).value() : vb.contiguous();
    c.q_offset = p0;
    c.key_end = -1;
    const ag::Variable out = attn::fused_attention(qb, ag::Variable(K), ag::Variable(V), c, tb).out;
    const int64_t in_sinks = std::min(S - p0, n), rest = n - in_sinks;
    b.k.narrow(2, p0, in_sinks).copy_(kb.narrow(2, 0, in_sinks));
    b.v.narrow(2, p0, in_sinks).copy_(vb.narrow(2, 0, in_sinks));
    if (rest > 0) {  // positions S .. p0 + n - 1: the ring keeps the last cap of them
      const int64_t tail = std::min(b.cap, rest);
      b.k.narrow(2, S, tail).copy_(kb.narrow(2, n - tail, tail));
      b.v.narrow(2, S, tail).copy_(vb.narrow(2, n - tail, tail));
      b.base = p0 + n - tail;
      b.len = tail;
    }
    return out;
  }
  const int64_t kept = b.len + n > b.rows - S ? std::min(b.len, b.cap - 1) : b.len;  // the ring after a shift
  if (kept + n <= b.rows - S) {  // in place
    store(b, kb, vb, Tensor(), p0);
    c.q_offset = S + p0 - b.base;
    c.key_end = S + b.len;
    if (b.pos_base != b.base) {  // each row's position (rows past len are masked keys), made once per shift
      b.pos = attn::pinned_sink_positions(Tensor(), 1, S, b.base, b.rows - S, kb.device());
      b.pos_base = b.base;
    }
    c.positions = b.pos;
    return attn::fused_attention(qb, ag::Variable(b.k), ag::Variable(b.v), c, tb).out;
  }
  // (a prompt arrives while the sinks do, p0 < S above; later calls are single decoding steps)
  throw NotImplementedError(detail::concat_msg("kv cache: ", n, " new keys at position ", p0, " exceed the ",
                                               b.rows - S - kept, " free rows of a ring with pinned sinks; give the "
                                               "prompt in the first call and then one token per call"));
}

ag::Variable LayerKV::attend(const ag::Variable& q, const ag::Variable& kvar, const ag::Variable& vvar,
                             const attn::AttnConfig& cfg, const attn::AttnTerms& terms) {
  const Tensor& k = kvar.value();  // kept as values: decoding records no graph through the cache
  const Tensor& v = vvar.value();
  const int64_t n = k.size(2), p0 = length_;
  const ag::Variable& logn_c = terms.logn_c;
  // The per-key terms of the new tokens as (1, H, n, c), stored beside the keys: FoX's log f (the
  // decay between a kept key and a query sums the log f of the positions between them, all inside
  // the buffer) and GRAPE-A's key rates dist_k, in that order along the last dimension
  const bool fox = terms.forget.defined(), dk = terms.dist_k.defined();
  const bool keyed = fox || dk;
  Tensor fnew;
  if (keyed) {
    std::vector<ag::Variable> parts;
    if (fox) parts.push_back(ag::Variable(terms.forget.value().unsqueeze(3)));
    if (dk) parts.push_back(ag::Variable(terms.dist_k.value().to(fox ? terms.forget.dtype() : terms.dist_k.dtype()).unsqueeze(3)));
    fnew = parts.size() == 1 ? parts[0].value() : ag::cat(parts, 3).value();
  }
  // the kept per-key terms F (1, h, keys, c) as the op's inputs
  auto key_terms = [&](attn::AttnTerms& tb, const Tensor& F) {
    if (fox) tb.forget = ag::Variable(F.narrow(3, 0, 1).squeeze(3).contiguous());
    if (dk) tb.dist_k = ag::Variable(F.narrow(3, fox ? 1 : 0, 1).squeeze(3).contiguous());
  };
  HZ_CHECK(k.dim() == 4 && k.size(0) == 1 && k.size(1) == static_cast<int64_t>(cap_.size()), ShapeError,
           "kv cache: keys must be (1, ", cap_.size(), ", n, D), got ", shape_str(k.shape()));
  HZ_CHECK(p0 + n <= capacity_, ValueError, "kv cache: ", p0 + n, " tokens do not fit the capacity of ", capacity_);
  // prefix-LM: a prefix row sees the whole prefix, so the prefix arrives in one call (the prompt)
  HZ_CHECK(cfg.prefix == 0 || p0 >= cfg.prefix || (p0 == 0 && n >= cfg.prefix), ValueError,
           "kv cache: the layer's prefix of ", cfg.prefix, " tokens attends bidirectionally; decode with a prompt of "
           "at least ", cfg.prefix, " tokens (this call holds positions ", p0, "..", p0 + n - 1, ")");
  const bool whole = bands_.size() == 1;
  // A decoding step has one query row: the CPU kernel's cost is then two small GEMMs per key block,
  // so it visits the keys in blocks of 512 rather than 64 (fewer calls; the same keys and logits).
  const int64_t block_k = n <= 16 ? std::max<int64_t>(cfg.block_k, 512) : cfg.block_k;
  std::vector<ag::Variable> outs;
  for (Band& b : bands_) {
    const int64_t h0 = b.kv0 * G_, h1 = b.kv1 * G_, nh = b.kv1 - b.kv0;
    const ag::Variable qb = whole ? q : ag::narrow(q, 1, h0, h1 - h0);
    const Tensor kb = whole ? k : k.narrow(1, b.kv0, nh), vb = whole ? v : v.narrow(1, b.kv0, nh);
    attn::AttnConfig c = whole ? cfg : heads_config(cfg, h0, h1);
    c.block_k = block_k;
    attn::AttnTerms tb;
    tb.logn_c = logn_c.defined() && !whole ? ag::narrow(logn_c, 0, h0, h1 - h0) : logn_c;
    tb.sink = terms.sink.defined() && !whole ? ag::narrow(terms.sink, 0, h0, h1 - h0) : terms.sink;
    if (terms.dist_q.defined()) tb.dist_q = whole ? terms.dist_q : ag::narrow(terms.dist_q, 1, h0, h1 - h0);
    const Tensor fb = keyed ? (whole ? fnew : fnew.narrow(1, h0, h1 - h0)) : Tensor();
    if (b.sinks > 0) {  // (the constructor pins no sinks for layers with per-key terms)
      HZ_CHECK(!keyed, NotImplementedError, "kv cache: per-key terms (FoX's decay, GRAPE-A's key rates) beside pinned "
               "sink tokens are not kept");
      outs.push_back(attend_pinned(b, qb, kb, vb, c, tb, p0));
      continue;
    }
    if (keyed && !b.f.defined()) b.f = Tensor::zeros({1, h1 - h0, b.rows, fnew.size(3)}, fnew.dtype(), fnew.device());
    const int64_t kept = b.len + n > b.rows ? std::min(b.len, b.cap - 1) : b.len;  // after a shift
    if (kept + n <= b.rows) {
      // in place: the queries sit at buffer index (position - base), keys beyond len are masked
      store(b, kb, vb, fb, p0);
      c.q_offset = p0 - b.base;
      c.key_position = b.base;  // terms that read absolute positions (LogN's position, Llama 4's temperature)
      c.key_begin = 0;
      c.key_end = b.len;
      if (keyed) key_terms(tb, b.f);  // rows past len are masked keys
      outs.push_back(attn::fused_attention(qb, ag::Variable(b.k), ag::Variable(b.v), c, tb).out);
    } else {
      // more new keys than the buffer holds (a long prompt on a window layer): attend over the
      // kept keys and the new ones, then keep the last cap of them
      const Tensor K = kept > 0 ? ag::cat({ag::Variable(b.k.narrow(2, b.len - kept, kept)), ag::Variable(kb)}, 2).value()
                                : kb.contiguous();
      const Tensor V = kept > 0 ? ag::cat({ag::Variable(b.v.narrow(2, b.len - kept, kept)), ag::Variable(vb)}, 2).value()
                                : vb.contiguous();
      c.q_offset = kept;
      c.key_position = p0 - kept;
      Tensor F;
      if (keyed) {
        F = kept > 0 ? ag::cat({ag::Variable(b.f.narrow(2, b.len - kept, kept)), ag::Variable(fb)}, 2).value()
                     : fb.contiguous();
        key_terms(tb, F);
      }
      outs.push_back(attn::fused_attention(qb, ag::Variable(K), ag::Variable(V), c, tb).out);
      const int64_t total = kept + n, tail = std::min(b.cap, total);
      b.k.narrow(2, 0, tail).copy_(K.narrow(2, total - tail, tail));
      b.v.narrow(2, 0, tail).copy_(V.narrow(2, total - tail, tail));
      if (keyed) b.f.narrow(2, 0, tail).copy_(F.narrow(2, total - tail, tail));
      b.base = p0 + n - tail;
      b.len = tail;
    }
  }
  length_ += n;
  return whole ? outs[0] : ag::cat(outs, 1);
}

void LayerKV::reset() {
  for (Band& b : bands_) {  // rows past len are never visible: no need to clear them
    b.base = b.sinks;
    b.len = 0;
  }
  length_ = 0;
  angle_total_ = Tensor();
}

ag::Variable LayerKV::running_sum(const ag::Variable& x) {
  Tensor c = ops::cumsum(x.value(), 2);
  if (angle_total_.defined()) c = ops::add(c, angle_total_);
  angle_total_ = c.narrow(2, c.size(2) - 1, 1).contiguous();
  return ag::Variable(c);
}

std::pair<Tensor, Tensor> LayerKV::append_all(const Tensor& k, const Tensor& v) {
  const int64_t n = k.size(2);
  HZ_CHECK(bands_.size() == 1 && bands_[0].rows == capacity_, ValueError,
           "kv cache: this layer keeps a window of keys, not all of them");
  HZ_CHECK(length_ + n <= capacity_, ValueError, "kv cache: ", length_ + n, " tokens do not fit the capacity of ",
           capacity_);
  Band& b = bands_[0];
  store(b, k, v, Tensor(), length_);
  length_ += n;
  return {b.k.narrow(2, 0, b.len), b.v.narrow(2, 0, b.len)};
}

KVCache::KVCache(const Transformer& m, int64_t capacity, int64_t train_len)
    : m_(m), capacity_(capacity), train_len_(train_len > 0 ? train_len : m.cfg.train_len) {
  HZ_CHECK(capacity >= 1, ValueError, "kv cache: the capacity must hold at least one token, got ", capacity);
  const Device dev = m.embed->weight.value().device();
  const DType act = m.compute_dtype == DType::BF16 ? DType::BF16 : m.cfg.dtype;  // what the layers compute in
  AttnCall c;
  c.T = capacity_;
  c.train_len = train_len_;
  for (const auto& block : m.layers) {
    const AttentionLayer& A = *block->attn;
    const attn::AttnConfig cfg = A.attn_config(c);
    const bool lampe = A.uses_lampe(cfg);
    // LaMPE remaps every key's distance: keep them all
    // per-key terms (FoX's gates, GRAPE-A's key rates) travel with the keys, so no sinks are pinned apart
    kv_.emplace_back(cfg, m.cfg.kv_heads(), m.cfg.hdim(), capacity_, lampe,
                     A.spec.forget || (A.spec.additive_rates() && A.spec.additive != attn::AdditiveKind::Query), act, dev);
    info_.push_back({kv_.back().keys_kept(), lampe, kv_.back().bytes()});
  }
}

int64_t KVCache::bytes() const {
  int64_t b = 0;
  for (const auto& i : info_) b += i.bytes;
  return b;
}

Tensor KVCache::run(const std::vector<int32_t>& ids) {
  ag::NoGradGuard ng;
  const int64_t n = static_cast<int64_t>(ids.size());
  AttnCall call;
  call.T = capacity_;
  call.train_len = train_len_;
  const std::vector<double> idv(ids.begin(), ids.end());
  const ag::Variable h = m_.hidden(Tensor::from_vector(idv, {1, n}, DType::I64), Tensor::arange(length_, length_ + n),
                                   call, this);
  length_ += n;
  return m_.project(ag::narrow(h, 1, n - 1, 1)).value().reshape({m_.cfg.vocab_size});
}

Tensor KVCache::prefill(const std::vector<int32_t>& ids) {
  const int64_t P = static_cast<int64_t>(ids.size());
  HZ_CHECK(P >= 1 && P <= capacity_, ValueError, "kv cache: a prompt of ", P, " tokens does not fit a capacity of ",
           capacity_, " tokens");
  for (LayerKV& kv : kv_) kv.reset();  // a new sequence
  length_ = 0;
  return run(ids);
}

Tensor KVCache::step(int32_t id) {
  HZ_CHECK(length_ >= 1, ValueError, "kv cache: call prefill() with the prompt before step()");
  HZ_CHECK(length_ < capacity_, ValueError, "kv cache: the capacity of ", capacity_,
           " tokens is full; create the cache with a larger capacity");
  return run({id});
}

}  // namespace hz::nn
