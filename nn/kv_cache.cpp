#include "nn/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/functions.h"
#include "core/cpu/loops.h"

namespace hz::nn {

KVCache::KVCache(const Transformer& m, int64_t context, int64_t train_T)
    : m_(m), context_(context), train_T_(train_T > 0 ? train_T : m.cfg.max_seq_len) {
  HZ_CHECK(context >= 1, ValueError, "kv cache: the context must hold at least one token, got ", context);
  const int64_t H = m.cfg.n_heads, Hkv = m.cfg.kv_heads(), G = H / Hkv, D = m.cfg.hdim();
  const AttnCall c = call();
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const AttentionLayer& A = *m.layers[l]->attn;
    Layer L;
    L.cfg = A.kernel_config(c);
    L.rotary = A.rotary();
    if (L.rotary) L.freqs = A.rope_freqs(c);
    bool causal = true;
    for (int64_t w : L.cfg.window) causal &= w == 0;
    L.lampe = L.rotary && A.lampe.has_value() && causal;  // the same rule as AttentionLayer::forward
    if (L.lampe) {
      HZ_CHECK(L.cfg.logit != attn::LogitKind::LogN, NotImplementedError, "layer ", l,
               ": LaMPE on a LogN layer is not supported by decoding (LogN would count each region's keys "
               "separately); evaluate it with horizon eval or turn eval.lampe off");
      L.lampe_cfg = *A.lampe;
      L.lampe_cfg.length = context;
      const int64_t half = D / 2;
      L.cos.resize((context + 1) * half);
      L.sin.resize((context + 1) * half);
      const double ms2 = L.freqs.mscale * L.freqs.mscale;
      for (int64_t r = 0; r <= context; ++r)
        for (int64_t i = 0; i < half; ++i) {
          L.cos[r * half + i] = std::cos(static_cast<double>(r) * L.freqs.inv_freq[i]) * ms2;
          L.sin[r * half + i] = std::sin(static_cast<double>(r) * L.freqs.inv_freq[i]) * ms2;
        }
    }
    if (L.cfg.logit == attn::LogitKind::LogN) L.logn_c = A.logn_c.value().to_vector();
    if (L.cfg.logit == attn::LogitKind::ScaleInvariant) attn::scale_invariant_tables(L.cfg.tau, context + 1, L.si_a, L.si_m);
    L.cap.assign(Hkv, 0);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t w = L.cfg.window[h];
      L.cap[h / G] = std::max(L.cap[h / G], w > 0 ? std::min(w, context) : context);
    }
    LayerCacheInfo info;
    info.capacity = L.cap;
    info.unrotated_keys = L.lampe;
    for (int64_t hk = 0; hk < Hkv; ++hk) {
      L.k.push_back(Tensor::zeros({L.cap[hk], D}, m.cfg.dtype));
      L.v.push_back(Tensor::zeros({L.cap[hk], D}, m.cfg.dtype));
      info.bytes += 2 * L.cap[hk] * D * static_cast<int64_t>(dtype_size(m.cfg.dtype));
    }
    layers_.push_back(std::move(L));
    info_.push_back(info);
  }
}

AttnCall KVCache::call() const {
  AttnCall c;
  c.T = context_;
  c.train_T = train_T_;
  return c;
}

int64_t KVCache::bytes() const {
  int64_t b = 0;
  for (const auto& i : info_) b += i.bytes;
  return b;
}

// k, v (1, Hkv, n, D) for positions first_pos .. first_pos + n - 1: keep what the rings can hold.
void KVCache::store(Layer& L, const Tensor& k_in, const Tensor& v_in, int64_t first_pos) {
  const Tensor k = k_in.contiguous(), v = v_in.contiguous();
  const int64_t Hkv = k.size(1), n = k.size(2), D = k.size(3);
  const int64_t esz = static_cast<int64_t>(dtype_size(k.dtype()));
  const char* kp = static_cast<const char*>(k.raw_data());
  const char* vp = static_cast<const char*>(v.raw_data());
  for (int64_t hk = 0; hk < Hkv; ++hk) {
    const int64_t cap = L.cap[hk];
    char* kd = static_cast<char*>(L.k[hk].raw_data());
    char* vd = static_cast<char*>(L.v[hk].raw_data());
    for (int64_t i = std::max<int64_t>(0, n - cap); i < n; ++i) {
      const int64_t slot = (first_pos + i) % cap;
      std::copy(kp + ((hk * n + i) * D) * esz, kp + ((hk * n + i + 1) * D) * esz, kd + slot * D * esz);
      std::copy(vp + ((hk * n + i) * D) * esz, vp + ((hk * n + i + 1) * D) * esz, vd + slot * D * esz);
    }
  }
}

namespace {

template <class T>
void attend_impl(const attn::AttnConfig& cfg, const std::vector<int64_t>& cap, const std::vector<Tensor>& ks,
                 const std::vector<Tensor>& vs, const std::vector<double>& logn_c, const std::vector<double>& si_a,
                 const std::vector<double>& si_m, bool lampe, const std::vector<int64_t>& rel,
                 const std::vector<double>& cs, const std::vector<double>& sn, const T* q, T* out, int64_t H,
                 int64_t Hkv, int64_t D, int64_t p) {
  const int64_t G = H / Hkv, half = D / 2;
  const double scale = cfg.scale > 0 ? cfg.scale : 1.0 / std::sqrt(static_cast<double>(D));
  const bool si = cfg.logit == attn::LogitKind::ScaleInvariant;
#pragma omp parallel for schedule(static) if (H * (p + 1) * D > (1 << 20))
  for (int64_t h = 0; h < H; ++h) {
    const int64_t hk = h / G, w = cfg.window[h], C = cap[hk];
    const int64_t lo = w > 0 ? std::max<int64_t>(0, p - w + 1) : 0, n = p - lo + 1;
    double r = 1.0;
    switch (cfg.logit) {
      case attn::LogitKind::LogN: r = logn_c[h] * std::log(static_cast<double>(n)); break;
      case attn::LogitKind::SwanRow: r = attn::swan_row_scale(cfg.swan_a, p); break;
      case attn::LogitKind::Temperature: r = cfg.beta; break;
      default: break;
    }
    const double slope = cfg.alibi_slope.empty() ? 0.0 : cfg.alibi_slope[h];
    const T* qh = q + h * D;
    const T* kh = ks[hk].data<T>();
    const T* vh = vs[hk].data<T>();
    std::vector<double> s(n);
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = lo; j <= p; ++j) {
      const T* kj = kh + (j % C) * D;
      double dot = 0.0;
      if (lampe) {
        const double* c = cs.data() + rel[j] * half;
        const double* sn_ = sn.data() + rel[j] * half;
        for (int64_t i = 0; i < half; ++i) {
          const double q1 = qh[i], q2 = qh[i + half], k1 = kj[i], k2 = kj[i + half];
          dot += (q1 * k1 + q2 * k2) * c[i] + (q1 * k2 - q2 * k1) * sn_[i];
        }
      } else {
        for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(qh[d]) * static_cast<double>(kj[d]);
      }
      const int64_t t = p - j;
      const double a = si ? si_a[t] : 1.0, b = (si ? si_m[t] : 0.0) - slope * static_cast<double>(t);
      const double l = r * a * (scale * dot) + b;
      s[j - lo] = l;
      mx = std::max(mx, l);
    }
    double sum = 0.0;
    for (auto& x : s) sum += (x = std::exp(x - mx));
    std::vector<double> acc(D, 0.0);
    for (int64_t j = lo; j <= p; ++j) {
      const T* vj = vh + (j % C) * D;
      const double pj = s[j - lo] / sum;
      for (int64_t d = 0; d < D; ++d) acc[d] += pj * static_cast<double>(vj[d]);
    }
    for (int64_t d = 0; d < D; ++d) out[h * D + d] = static_cast<T>(acc[d]);
  }
}

}  // namespace

Tensor KVCache::attend_row(const Layer& L, const Tensor& q_in, int64_t p) const {
  const Tensor q = q_in.contiguous();
  const int64_t H = q.size(1), D = q.size(3), Hkv = static_cast<int64_t>(L.k.size());
  Tensor out = Tensor::empty({1, H, 1, D}, q.dtype());
  std::vector<int64_t> rel;
  if (L.lampe) {
    rel.resize(p + 1);
    for (int64_t j = 0; j <= p; ++j) rel[j] = attn::lampe_relative_position(L.lampe_cfg, context_, p, j);
  }
  cpu::dispatch_float(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    attend_impl<T>(L.cfg, L.cap, L.k, L.v, L.logn_c, L.si_a, L.si_m, L.lampe, rel, L.cos, L.sin, q.data<T>(),
                   out.data<T>(), H, Hkv, D, p);
  });
  return out;
}

Tensor KVCache::logits_last(const ag::Variable& x) const {
  const int64_t T = x.size(1);
  ag::Variable h = m_.norm->forward(ag::narrow(x, 1, T - 1, 1));
  ag::Variable lg = m_.head ? m_.head->forward(h) : ag::matmul(h, m_.embed->weight, false, true);
  return lg.value().reshape({m_.cfg.vocab_size});
}

Tensor KVCache::prefill(const std::vector<int32_t>& ids) {
  const int64_t P = static_cast<int64_t>(ids.size());
  HZ_CHECK(P >= 1 && P <= context_, ValueError, "kv cache: a prompt of ", P, " tokens does not fit a context of ",
           context_, " tokens");
  ag::NoGradGuard ng;
  const int64_t H = m_.cfg.n_heads, D = m_.cfg.hdim();
  const Tensor positions = Tensor::arange(0, P);
  std::vector<double> idv(ids.begin(), ids.end());
  ag::Variable x = m_.embed->forward(Tensor::from_vector(idv, {1, P}, DType::I64));
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Block& b = *m_.layers[l];
    const AttentionLayer& A = *b.attn;
    Layer& L = layers_[l];
    auto [q, k, v] = A.project_qkv(b.norm1->forward(x));
    attn::AttnOutput o;
    if (L.lampe) {
      o = attn::lampe_attention(q, k, v, L.freqs, L.lampe_cfg, L.cfg);
    } else {
      if (L.rotary) {
        q = attn::apply_rope(q, positions, L.freqs);
        k = attn::apply_rope(k, positions, L.freqs);
      }
      o = attn::fused_attention(q, k, v, L.cfg, A.logn_c);
    }
    store(L, k.value(), v.value(), 0);
    ag::Variable y = A.wo->forward(ag::reshape(ag::transpose(o.out, 1, 2), {1, P, H * D}));
    ag::Variable hh = ag::add(x, y);
    x = ag::add(hh, b.mlp->forward(b.norm2->forward(hh)));
  }
  length_ = P;
  return logits_last(x);
}

Tensor KVCache::step(int32_t id) {
  HZ_CHECK(length_ >= 1, ValueError, "kv cache: call prefill() with the prompt before step()");
  HZ_CHECK(length_ < context_, ValueError, "kv cache: the context of ", context_,
           " tokens is full; create the cache with a larger context");
  ag::NoGradGuard ng;
  const int64_t p = length_, H = m_.cfg.n_heads, D = m_.cfg.hdim();
  const Tensor pos = Tensor::full({1}, static_cast<double>(p), DType::I64);
  ag::Variable x = m_.embed->forward(Tensor::full({1, 1}, static_cast<double>(id), DType::I64));
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Block& b = *m_.layers[l];
    const AttentionLayer& A = *b.attn;
    Layer& L = layers_[l];
    auto [q, k, v] = A.project_qkv(b.norm1->forward(x));
    Tensor qt = q.value(), kt = k.value();
    if (L.rotary && !L.lampe) {
      qt = attn::rope_rotate(qt, pos, L.freqs, false);
      kt = attn::rope_rotate(kt, pos, L.freqs, false);
    }
    store(L, kt, v.value(), p);
    const Tensor o = attend_row(L, qt, p);  // (1, H, 1, D): (1, 1, H*D) in memory order
    ag::Variable y = A.wo->forward(ag::Variable(o.reshape({1, 1, H * D})));
    ag::Variable hh = ag::add(x, y);
    x = ag::add(hh, b.mlp->forward(b.norm2->forward(hh)));
  }
  ++length_;
  return logits_last(x);
}

}  // namespace hz::nn
