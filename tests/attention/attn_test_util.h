// Shared by the CUDA attention tests and the host emulation of the tensor-core kernels: problems
// (mask x position x logit x shapes), inputs, the op on a device, a naive double-precision
// attention written from docs/methods.md (its own mask, independent of tiling.h) that optionally rounds
// where a bf16 tensor-core pipeline rounds, and the precision-floor comparison
//   max |x - ref| <= k * max |x_lowprec - ref| + atol_rel * max |ref|   (the precision floor).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attention/fused.h"
#include "attention/rope.h"
#include "autograd/functions.h"
#include "core/bf16.h"
#include "core/rng.h"

namespace hzt::attn_util {

using namespace hz;
using namespace hz::attn;

inline double round_bf16(double x) { return bf16_bits_to_f32(f64_to_bf16_bits(x)); }
// A value as the split tensor-core kernels hold it (f32 inputs on bf16 tensor cores,
// attention/cuda/mma_body.h): rounded to f32, then the bits of hi = bf16(x) and lo = bf16(x - hi),
// and their sum.
inline std::pair<uint16_t, uint16_t> split_bf16(double x) {
  const float f = static_cast<float>(x);
  const uint16_t hi = f32_to_bf16_bits(f);
  return {hi, f32_to_bf16_bits(f - bf16_bits_to_f32(hi))};
}
inline double round_split(double x) {
  const auto [hi, lo] = split_bf16(x);
  return static_cast<double>(bf16_bits_to_f32(hi)) + bf16_bits_to_f32(lo);
}
inline std::vector<double> round_all(std::vector<double> v, DType dt) {
  if (dt == DType::F64) return v;
  return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, dt).to_vector();
}

// ---- the problem -----------------------------------------------------------------------------
struct Problem {
  int64_t B = 1, H = 4, Hkv = 2, Tq = 100, Tk = 100, D = 64;
  MaskKind mask = MaskKind::Causal;
  PosKind pos = PosKind::None;
  LogitKind logit = LogitKind::Identity;
  int64_t key_end = -1, min_distance = 0, q_offset = -1;
  bool fox = false;  // FoX's forget gates: log f (B, H, Tk) from the inputs, logits gain c_i - c_j
  bool sink = false;  // attention sinks: a logit z_h per head in every row's denominator
  // GRAPE's additive rates (fused.h AttnTerms): 1 dist_k, 2 dist_q, 3 both, (B, H, T) from the inputs;
  // logits gain -|t| (dist_q_i + dist_k_j)
  int dist = 0;
  // the second interval and token positions (tiling.h): chunked attention, sink tokens, a prefix;
  // drawn: token positions (increasing reals with gaps in [0.5, 4), a draw per sequence; not with
  // rotary encodings here, which these tests apply on the host at index positions)
  int64_t chunk = 0, sink_tokens = 0, prefix = 0;
  bool drawn = false;
  std::vector<double> token_positions() const {
    Generator g(91);
    std::vector<double> v = g.uniform({B, Tk}, 0.5, 4.0, DType::F64).to_vector();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 1; j < Tk; ++j) v[b * Tk + j] += v[b * Tk + j - 1];
    return v;
  }
  // packed documents: the lengths of each sequence's documents (b-th entry for sequence b, each
  // summing to Tk; empty: none), positions restarting at each document when `reset`
  std::vector<std::vector<int64_t>> docs;
  bool reset = true;
  std::shared_ptr<const Documents> documents() const {
    if (docs.empty()) return nullptr;
    std::vector<int64_t> cu{0};
    for (const auto& seq : docs)
      for (int64_t l : seq) cu.push_back(cu.back() + l);
    return std::make_shared<Documents>(B, Tk, cu, reset);
  }
  // the doc id and the position of key position j of sequence b (counted as the naive twin does)
  int64_t doc_id(int64_t b, int64_t j) const {
    if (docs.empty()) return 0;
    int64_t start = 0, id = 0;
    for (int64_t l : docs[b]) {
      if (j < start + l) return id;
      start += l;
      ++id;
    }
    return id;
  }
  // [start, end) of the document holding key position j of sequence b ([0, Tk) without documents)
  std::pair<int64_t, int64_t> doc_bounds(int64_t b, int64_t j) const {
    if (docs.empty()) return {0, Tk};
    int64_t start = 0;
    for (int64_t l : docs[b]) {
      if (j < start + l) return {start, start + l};
      start += l;
    }
    return {start, Tk};
  }
  int64_t doc_start(int64_t b, int64_t j) const { return doc_bounds(b, j).first; }
  int64_t doc_end(int64_t b, int64_t j) const { return doc_bounds(b, j).second; }
  int64_t position(int64_t b, int64_t j) const { return docs.empty() || !reset ? j : j - doc_start(b, j); }
  std::string tag() const {
    std::string s = std::string(name(mask)) + "_" + name(pos) + "_" + name(logit) + "_B" + std::to_string(B) + "H" +
                    std::to_string(H) + "kv" + std::to_string(Hkv) + "_Tq" + std::to_string(Tq) + "Tk" +
                    std::to_string(Tk) + "_D" + std::to_string(D);
    if (key_end >= 0) s += "_kend" + std::to_string(key_end);
    if (min_distance > 0) s += "_md" + std::to_string(min_distance);
    if (!docs.empty()) s += "_docs" + std::to_string(docs[0].size()) + (reset ? "reset" : "");
    if (fox) s += "_fox";
    if (sink) s += "_sink";
    if (chunk > 0) s += "_chunk" + std::to_string(chunk);
    if (sink_tokens > 0) s += "_sinktok" + std::to_string(sink_tokens);
    if (prefix > 0) s += "_prefix" + std::to_string(prefix);
    if (drawn) s += "_drawn";
    if (dist > 0) s += "_grape" + std::to_string(dist);
    return s;
  }
};

inline AttentionSpec spec_of(const Problem& p) {
  AttentionSpec s;
  s.pos.kind = p.pos;
  s.pos.rope_base = 500.0;
  s.pos.prope_base_eff = 50.0;
  s.mask.kind = p.mask;
  s.mask.window = 24;
  s.logit.kind = p.logit;
  s.logit.tau = 3.0;
  s.logit.swan_a = 5.0;
  s.logit.beta = 1.3;
  s.mask.chunk = p.chunk;
  s.mask.sink_tokens = p.sink_tokens;
  s.mask.prefix = p.prefix;
  return s;
}
inline AttnConfig config_of(const Problem& p) {
  AttnConfig cfg = make_attn_config(spec_of(p), p.H, p.Tk);
  cfg.key_end = p.key_end;
  cfg.min_distance = p.min_distance;
  cfg.q_offset = p.q_offset;
  cfg.block_q = 16;  // reference kernels and CPU: small tiles, many boundary blocks
  cfg.block_k = 8;
  cfg.documents = p.documents();
  if (p.drawn) cfg.positions = Tensor::from_vector(p.token_positions(), {p.B, p.Tk}, DType::F64);
  return cfg;
}

// Input values (f64, already rounded to dt): q, k, v, gout, c; FoX's log f (B, H, Tk, in (-0.2, 0));
// the sinks' z (H).
struct Inputs {
  std::vector<double> q, k, v, g, c, f, z, rq, rk;  // rq / rk: GRAPE's rates dist_q (B, H, Tq), dist_k (B, H, Tk)
};
inline Inputs make_inputs(const Problem& p, DType dt, uint64_t seed) {
  Generator gen(seed);
  Inputs in;
  in.q = round_all(gen.normal({p.B * p.H * p.Tq * p.D}, 0, 1, DType::F64).to_vector(), dt);
  in.k = round_all(gen.normal({p.B * p.Hkv * p.Tk * p.D}, 0, 1, DType::F64).to_vector(), dt);
  in.v = round_all(gen.normal({p.B * p.Hkv * p.Tk * p.D}, 0, 1, DType::F64).to_vector(), dt);
  in.g = round_all(gen.normal({p.B * p.H * p.Tq * p.D}, 0, 1, DType::F64).to_vector(), dt);
  in.c = gen.uniform({p.H}, 0.5, 1.5, DType::F64).to_vector();  // LogN's c stays f32/f64 (a parameter)
  // FoX's log forget gates stay f32/f64 like the gate's parameters (drawn last: the others do not move)
  if (p.fox) in.f = gen.uniform({p.B * p.H * p.Tk}, -0.2, 0.0, DType::F64).to_vector();
  if (p.sink) in.z = gen.normal({p.H}, 1.0, 1.0, DType::F64).to_vector();
  // GRAPE's rates likewise (a few negative: the term may favour far keys)
  if (p.dist & 2) in.rq = gen.uniform({p.B * p.H * p.Tq}, -0.02, 0.1, DType::F64).to_vector();
  if (p.dist & 1) in.rk = gen.uniform({p.B * p.H * p.Tk}, -0.02, 0.1, DType::F64).to_vector();
  return in;
}

struct Result {
  std::vector<double> out, lse, dq, dk, dv, dc, df, dz;  // df: dLoss/d(log f) with FoX; dz: the sinks'
  std::vector<double> ddq, ddk;                          // GRAPE's rates' gradients (dist_q, dist_k)

};

// FoX's gradient with respect to log f from dLoss/dc (c = cumsum(log f) per (b, h) row of Tk):
// df_m = sum_{k >= m} dc_k.
inline std::vector<double> reverse_cumsum_rows(const std::vector<double>& dc, int64_t Tk) {
  std::vector<double> df(dc.size());
  for (size_t r = 0; r < dc.size() / static_cast<size_t>(Tk); ++r) {
    double acc = 0;
    for (int64_t m = Tk - 1; m >= 0; --m) df[r * Tk + m] = acc += dc[r * Tk + m];
  }
  return df;
}

// The op on a device and dtype: rotary encoding (when the problem has one) and fused attention,
// forward and backward with upstream gradient g; gradients w.r.t. the un-rotated q, k.
inline Result run_op(const Problem& p, const Inputs& in, DType dt, Device dev, AttnImpl impl = AttnImpl::Auto,
              bool rotate = true, AttnBackend backend = AttnBackend::Auto) {
  const AttnConfig base = config_of(p);
  AttnConfig cfg = base;
  cfg.impl = impl;
  cfg.backend = backend;
  if (cfg.positions.defined()) cfg.positions = cfg.positions.to(dev);
  const DType cdt = dt == DType::F64 ? DType::F64 : DType::F32;
  ag::Variable q(Tensor::from_vector(in.q, {p.B, p.H, p.Tq, p.D}, dt).to(dev), true);
  ag::Variable k(Tensor::from_vector(in.k, {p.B, p.Hkv, p.Tk, p.D}, dt).to(dev), true);
  ag::Variable v(Tensor::from_vector(in.v, {p.B, p.Hkv, p.Tk, p.D}, dt).to(dev), true);
  ag::Variable c(Tensor::from_vector(in.c, {p.H}, cdt).to(dev), true);
  ag::Variable f = p.fox ? ag::Variable(Tensor::from_vector(in.f, {p.B, p.H, p.Tk}, cdt).to(dev), true) : ag::Variable();
  ag::Variable z = p.sink ? ag::Variable(Tensor::from_vector(in.z, {p.H}, cdt).to(dev), true) : ag::Variable();
  ag::Variable rq = p.dist & 2 ? ag::Variable(Tensor::from_vector(in.rq, {p.B, p.H, p.Tq}, cdt).to(dev), true)
                               : ag::Variable();
  ag::Variable rk = p.dist & 1 ? ag::Variable(Tensor::from_vector(in.rk, {p.B, p.H, p.Tk}, cdt).to(dev), true)
                               : ag::Variable();
  ag::Variable qr = q, kr = k;
  if (rotate && (p.pos == PosKind::Rope || p.pos == PosKind::PRope)) {
    const RopeFreqs f = rope_frequencies(spec_of(p).pos, p.D, p.Tk);
    const int64_t off = cfg.q_offset < 0 ? p.Tk - p.Tq : cfg.q_offset;
    if (cfg.documents) {  // per-sequence positions (Tq == Tk with documents here)
      qr = apply_rope(q, cfg.documents->positions(dev), f);
      kr = apply_rope(k, cfg.documents->positions(dev), f);
    } else {
      qr = apply_rope(q, Tensor::arange(off, off + p.Tq), f);
      kr = apply_rope(k, Tensor::arange(0, p.Tk), f);
    }
  }
  const AttnOutput o = fused_attention(qr, kr, v, cfg, {p.logit == LogitKind::LogN ? c : ag::Variable(), z, f, rq, rk});
  o.out.backward(Tensor::from_vector(in.g, {p.B, p.H, p.Tq, p.D}, dt).to(dev));
  Result r;
  r.out = o.out.value().to_vector();
  r.lse = o.lse.to_vector();
  r.dq = q.grad().to_vector();
  r.dk = k.grad().to_vector();
  r.dv = v.grad().to_vector();
  if (p.logit == LogitKind::LogN) r.dc = c.grad().to_vector();
  if (p.fox) r.df = f.grad().to_vector();
  if (p.sink) r.dz = z.grad().to_vector();
  if (p.dist & 2) r.ddq = rq.grad().to_vector();
  if (p.dist & 1) r.ddk = rk.grad().to_vector();
  return r;
}

// The rotated q and k in f64 (inputs of the bf16 cases, which rotate on the host).
inline Inputs rotated(const Problem& p, Inputs in) {
  if (p.pos != PosKind::Rope && p.pos != PosKind::PRope) return in;
  const RopeFreqs f = rope_frequencies(spec_of(p).pos, p.D, p.Tk);
  if (!p.docs.empty()) {
    const Tensor pos = p.documents()->positions(Device::cpu());
    in.q = rope_rotate(Tensor::from_vector(in.q, {p.B, p.H, p.Tq, p.D}, DType::F64), pos, f, false).to_vector();
    in.k = rope_rotate(Tensor::from_vector(in.k, {p.B, p.Hkv, p.Tk, p.D}, DType::F64), pos, f, false).to_vector();
    return in;
  }
  const int64_t off = p.q_offset < 0 ? p.Tk - p.Tq : p.q_offset;
  in.q = rope_rotate(Tensor::from_vector(in.q, {p.B, p.H, p.Tq, p.D}, DType::F64), Tensor::arange(off, off + p.Tq), f,
                     false)
             .to_vector();
  in.k = rope_rotate(Tensor::from_vector(in.k, {p.B, p.Hkv, p.Tk, p.D}, DType::F64), Tensor::arange(0, p.Tk), f, false)
             .to_vector();
  return in;
}

// The inputs of the bf16 cases: q and k rotated on the host in f64 and rounded to bf16, i.e. the
// kernels' exact inputs (no rotation on the device).
inline Inputs bf16_inputs(const Problem& p, uint64_t seed) {
  Inputs in = rotated(p, make_inputs(p, DType::BF16, seed));
  in.q = round_all(in.q, DType::BF16);
  in.k = round_all(in.k, DType::BF16);
  return in;
}
// The inputs of the split kernels' cases likewise in f32.
inline Inputs f32_inputs(const Problem& p, uint64_t seed) {
  Inputs in = rotated(p, make_inputs(p, DType::F32, seed));
  in.q = round_all(in.q, DType::F32);
  in.k = round_all(in.k, DType::F32);
  return in;
}
// q, k, v and dO as the split kernels multiply them (round_split), the naive twin's inputs for
// their floor.
inline Inputs split_rounded(Inputs in) {
  for (auto* v : {&in.q, &in.k, &in.v, &in.g})
    for (double& x : *v) x = round_split(x);
  return in;
}

// ---- naive attention from docs/methods.md, optionally rounding like a tensor-core pipeline ------------
// Where a pipeline rounds: None, exact; Bf16, the bf16 kernels (the operands P and dS formed in
// registers, and every output, to bf16); Split, the split kernels (those operands as hi + lo pairs,
// outputs in f32).
enum class Rounding { None, Bf16, Split };
inline Result naive(const Problem& p, const Inputs& in, Rounding rounding) {
  const AttnConfig cfg = config_of(p);
  const int64_t G = p.H / p.Hkv, off = p.q_offset < 0 ? p.Tk - p.Tq : p.q_offset;
  const int64_t kend = p.key_end < 0 ? p.Tk : std::min(p.key_end, p.Tk);
  const double scale = 1.0 / std::sqrt(static_cast<double>(p.D));
  auto rnd = [&](double x) {
    return rounding == Rounding::Bf16 ? round_bf16(x) : rounding == Rounding::Split ? round_split(x) : x;
  };
  auto rnd_out = [&](double x) {
    return rounding == Rounding::Bf16 ? round_bf16(x) : rounding == Rounding::Split ? static_cast<float>(x) : x;
  };
  Result r;
  r.out.assign(p.B * p.H * p.Tq * p.D, 0.0);
  r.lse.assign(p.B * p.H * p.Tq, 0.0);
  r.dq.assign(r.out.size(), 0.0);
  r.dk.assign(p.B * p.Hkv * p.Tk * p.D, 0.0);
  r.dv.assign(r.dk.size(), 0.0);
  r.dc.assign(p.H, 0.0);
  r.dz.assign(p.H, 0.0);
  // FoX: c = cumsum(log f) per (b, h); the logits gain c[pos] - c[j]; dcf = dLoss/dc
  std::vector<double> cf(p.fox ? p.B * p.H * p.Tk : 0), dcf(cf.size(), 0.0);
  for (size_t r0 = 0; r0 < cf.size(); r0 += static_cast<size_t>(p.Tk)) {
    double acc = 0;
    for (int64_t m = 0; m < p.Tk; ++m) cf[r0 + m] = acc += in.f[r0 + m];
  }
  // GRAPE: the rates (0 where absent) and their gradients
  std::vector<double> ddq(p.B * p.H * p.Tq, 0.0), ddk(p.B * p.H * p.Tk, 0.0), T(p.Tk);
  auto rate = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
    return (in.rq.empty() ? 0.0 : in.rq[(b * p.H + h) * p.Tq + i]) + (in.rk.empty() ? 0.0 : in.rk[(b * p.H + h) * p.Tk + j]);
  };
  std::vector<double> L(p.Tk), P(p.Tk), a(p.Tk), S(p.Tk);
  std::vector<char> vis(p.Tk);
  const std::vector<double> tp = p.drawn ? p.token_positions() : std::vector<double>{};
  // the distance the logit terms read (both ways: a prefix's later keys), and a row's position
  auto distance = [&](int64_t b, int64_t pos, int64_t j) {
    return std::fabs(p.drawn ? tp[b * p.Tk + pos] - tp[b * p.Tk + j] : static_cast<double>(pos - j));
  };
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h) {
      const int64_t hk = h / G, w = cfg.window[h];
      const double slope = cfg.alibi_slope.empty() ? 0.0 : cfg.alibi_slope[h];
      for (int64_t i = 0; i < p.Tq; ++i) {
        const int64_t pos = off + i, row = (b * p.H + h) * p.Tq + i;
        const double* qi = &in.q[row * p.D];
        const double* gi = &in.g[row * p.D];
        int64_t n = 0;
        // chunks count from the document's start with position reset, else from 0; a prefix row sees
        // its document's prefix (its first `prefix` positions) and nothing else; other rows see the
        // causal window (inside the chunk) and the document's first sink_tokens positions
        const int64_t ds = p.doc_start(b, pos), origin = !p.docs.empty() && p.reset ? ds : 0;
        const int64_t pend = std::min(ds + p.prefix, p.doc_end(b, pos));
        const bool prefix_row = p.prefix > 0 && pos < pend;
        for (int64_t j = 0; j < p.Tk; ++j) {
          const int64_t t = pos - j;
          const bool keys = j >= std::max<int64_t>(0, cfg.key_begin) && j < kend && p.doc_id(b, j) == p.doc_id(b, pos);
          const bool window = t >= p.min_distance && (w == 0 || t < w) &&
                              (p.chunk == 0 || j >= origin + (pos - origin) / p.chunk * p.chunk);
          const bool sinktok = t >= p.min_distance && j - ds < p.sink_tokens;
          vis[j] = keys && (prefix_row ? j < pend : window || sinktok);
          n += vis[j];
        }
        double rf = 1.0, lnn = n > 0 ? std::log(static_cast<double>(n)) : 0.0;
        if (p.logit == LogitKind::LogN) rf = in.c[h] * lnn;
        if (p.logit == LogitKind::SwanRow) {
          const double P_i = p.drawn ? tp[b * p.Tk + pos] : static_cast<double>(p.position(b, pos));
          rf = std::log(cfg.swan_a + P_i) / std::log(cfg.swan_a);
        }
        if (p.logit == LogitKind::Temperature) rf = cfg.beta;
        double mx = -INFINITY;
        for (int64_t j = 0; j < p.Tk; ++j) {
          if (!vis[j]) continue;
          const double* kj = &in.k[((b * p.Hkv + hk) * p.Tk + j) * p.D];
          double s = 0;
          for (int64_t d = 0; d < p.D; ++d) s += qi[d] * kj[d];
          S[j] = s * scale;
          const double t = distance(b, pos, j);
          a[j] = 1.0;
          double m = 0.0;
          if (p.logit == LogitKind::ScaleInvariant) {
            a[j] = std::sqrt(2.0 * std::log(t / cfg.tau + 1.0) + 1.0);
            m = -2.0 * std::log(t / cfg.tau + 1.0);
          }
          L[j] = rf * a[j] * S[j] + m - (slope + rate(b, h, i, j)) * t;
          T[j] = t;
          if (p.fox) L[j] += cf[(b * p.H + h) * p.Tk + pos] - cf[(b * p.H + h) * p.Tk + j];
          mx = std::max(mx, L[j]);
        }
        const double zh = p.sink ? in.z[h] : -INFINITY;  // the sink's logit: one more denominator term
        if (n == 0) {
          r.lse[row] = zh;
          continue;  // out and dq rows stay 0 (and D_i = 0: no sink gradient)
        }
        if (p.sink) mx = std::max(mx, zh);
        double l = p.sink ? std::exp(zh - mx) : 0.0;
        for (int64_t j = 0; j < p.Tk; ++j) l += vis[j] ? std::exp(L[j] - mx) : 0.0;
        r.lse[row] = mx + std::log(l);
        std::vector<double> o(p.D, 0.0);
        for (int64_t j = 0; j < p.Tk; ++j) {
          P[j] = vis[j] ? std::exp(L[j] - r.lse[row]) : 0.0;
          if (!vis[j]) continue;
          const double pj = rnd(std::exp(L[j] - mx)) / l;  // the pipeline rounds the unnormalised weights
          const double* vj = &in.v[((b * p.Hkv + hk) * p.Tk + j) * p.D];
          for (int64_t d = 0; d < p.D; ++d) o[d] += pj * vj[d];
        }
        double Di = 0;
        for (int64_t d = 0; d < p.D; ++d) {
          r.out[row * p.D + d] = rnd_out(o[d]);
          Di += gi[d] * r.out[row * p.D + d];
        }
        if (p.sink) r.dz[h] -= std::exp(zh - r.lse[row]) * Di;
        for (int64_t j = 0; j < p.Tk; ++j) {
          if (!vis[j]) continue;
          const int64_t krow = (b * p.Hkv + hk) * p.Tk + j;
          const double* kj = &in.k[krow * p.D];
          const double* vj = &in.v[krow * p.D];
          double dp = 0;
          for (int64_t d = 0; d < p.D; ++d) dp += gi[d] * vj[d];
          const double ds = P[j] * (dp - Di);
          r.dc[h] += ds * lnn * a[j] * S[j];
          if (p.fox) {
            dcf[(b * p.H + h) * p.Tk + pos] += ds;
            dcf[(b * p.H + h) * p.Tk + j] -= ds;
          }
          ddq[row] -= ds * T[j];
          ddk[(b * p.H + h) * p.Tk + j] -= ds * T[j];
          const double gq = rnd(ds * rf * a[j] * scale), pj = rnd(P[j]);
          for (int64_t d = 0; d < p.D; ++d) {
            r.dq[row * p.D + d] += gq * kj[d];
            r.dk[krow * p.D + d] += gq * qi[d];
            r.dv[krow * p.D + d] += pj * gi[d];
          }
        }
      }
    }
  if (rounding != Rounding::None)
    for (auto* v : {&r.dq, &r.dk, &r.dv})
      for (double& x : *v) x = rnd_out(x);
  if (p.logit != LogitKind::LogN) r.dc.clear();
  if (p.fox) r.df = reverse_cumsum_rows(dcf, p.Tk);
  if (!p.sink) r.dz.clear();
  if (p.dist & 2) r.ddq = ddq;
  if (p.dist & 1) r.ddk = ddk;
  return r;
}

inline Result naive(const Problem& p, const Inputs& in, bool bf16_pipeline) {
  return naive(p, in, bf16_pipeline ? Rounding::Bf16 : Rounding::None);
}

// ---- comparison -----------------------------------------------------------------------------------
// The split kernels' bound beside their floor (the split twin's error): f32 inputs held as hi + lo
// bf16 pairs and products that drop lo lo are exact to about 2^-16 of a product, against bf16's 2^-8
// (the bf16 kernels' bound is 1e-3). The sums over every pair of a head (LogN's dc, FoX's dlog f,
// the sinks' dz, GRAPE's rates) cancel: their error follows each row's D_i = dO . O, which the
// kernels take from their own f32 out, and reached 1e-4 of max |dc| in the emulator (3.5e-3 of 32.9
// for a FoX + sink + LogN window at D 64, where the twin's own realisation stayed at 2.4e-4).
constexpr double kSplitAtol = 2e-5, kSplitAtolSums = 2e-4;
inline double max_err(const std::vector<double>& x, const std::vector<double>& ref) {
  double e = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isinf(ref[i]) || std::isinf(x[i])) {
      if (x[i] != ref[i]) return INFINITY;
      continue;
    }
    const double d = std::fabs(x[i] - ref[i]);
    if (!(d <= e)) e = d;  // NaN makes e NaN and fails below
  }
  return e;
}
inline double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v)
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  return m;
}
// max |x - ref| <= k * max |low - ref| + atol_rel * max |ref|
inline void expect_within_floor(const char* what, const std::vector<double>& x, const std::vector<double>& low,
                         const std::vector<double>& ref, double k, double atol_rel) {
  ASSERT_EQ(x.size(), ref.size()) << what;
  ASSERT_EQ(low.size(), ref.size()) << what;
  const double err = max_err(x, ref), floor = max_err(low, ref), lim = k * floor + atol_rel * max_abs(ref);
  EXPECT_LE(err, lim) << what << ": max error " << err << ", precision floor " << floor << " (limit " << lim << ")";
}

// atol_sums (default atol_rel): the bound's second term for the per-head or per-rate sums over every
// pair (dc, dlog f, dz, ddist_q, ddist_k), whose terms cancel, so that their error relative to
// max |ref| grows with the rows summed.
inline void expect_results(const Result& x, const Result& low, const Result& ref, double k, double atol_rel,
                           double atol_sums = -1) {
  const double as = atol_sums < 0 ? atol_rel : atol_sums;
  expect_within_floor("out", x.out, low.out, ref.out, k, atol_rel);
  expect_within_floor("lse", x.lse, low.lse, ref.lse, k, atol_rel);
  expect_within_floor("dq", x.dq, low.dq, ref.dq, k, atol_rel);
  expect_within_floor("dk", x.dk, low.dk, ref.dk, k, atol_rel);
  expect_within_floor("dv", x.dv, low.dv, ref.dv, k, atol_rel);
  if (!ref.dc.empty()) expect_within_floor("dc", x.dc, low.dc, ref.dc, k, as);
  if (!ref.df.empty()) expect_within_floor("dlog f", x.df, low.df, ref.df, k, as);
  if (!ref.dz.empty()) expect_within_floor("dz", x.dz, low.dz, ref.dz, k, as);
  if (!ref.ddq.empty()) expect_within_floor("ddist_q", x.ddq, low.ddq, ref.ddq, k, as);
  if (!ref.ddk.empty()) expect_within_floor("ddist_k", x.ddk, low.ddk, ref.ddk, k, as);
}

// Equal up to rounding of a double computation: every output and gradient within rel * max |ref|.
inline void expect_same(const Result& x, const Result& ref, double rel = 1e-10) {
  const std::pair<const char*, std::pair<const std::vector<double>*, const std::vector<double>*>> parts[] = {
      {"out", {&x.out, &ref.out}}, {"lse", {&x.lse, &ref.lse}}, {"dq", {&x.dq, &ref.dq}},
      {"dk", {&x.dk, &ref.dk}},    {"dv", {&x.dv, &ref.dv}},    {"dc", {&x.dc, &ref.dc}},
      {"dlog f", {&x.df, &ref.df}}, {"dz", {&x.dz, &ref.dz}},    {"ddist_q", {&x.ddq, &ref.ddq}},
      {"ddist_k", {&x.ddk, &ref.ddk}}};
  for (const auto& [what, v] : parts) {
    ASSERT_EQ(v.first->size(), v.second->size()) << what;
    EXPECT_LE(max_err(*v.first, *v.second), rel * std::max(1.0, max_abs(*v.second))) << what;
  }
}

inline std::vector<Problem> combos(int64_t D, int64_t T) {
  std::vector<Problem> v;
  for (MaskKind m : {MaskKind::Causal, MaskKind::Window, MaskKind::Scope})
    for (PosKind p : {PosKind::None, PosKind::Rope, PosKind::PRope, PosKind::Alibi})
      for (LogitKind l : {LogitKind::Identity, LogitKind::ScaleInvariant, LogitKind::LogN, LogitKind::SwanRow,
                          LogitKind::Temperature}) {
        Problem pr;
        pr.mask = m;
        pr.pos = p;
        pr.logit = l;
        pr.D = D;
        pr.Tq = pr.Tk = T;
        v.push_back(pr);
      }
  return v;
}
// Shapes beyond the combos: GQA 4:1, batch 2, Tq != Tk (queries last; and an explicit offset),
// rows with no visible key (keys cut at key_end, a minimum distance), D 128 and small D.
inline std::vector<Problem> shapes(int64_t D) {
  std::vector<Problem> v;
  Problem p;
  p.D = D;
  p.B = 2, p.H = 8, p.Hkv = 2, p.Tq = p.Tk = 77, p.mask = MaskKind::Scope, p.logit = LogitKind::LogN;
  v.push_back(p);
  p = Problem{};
  p.D = D;
  p.Tq = 33, p.Tk = 130, p.mask = MaskKind::Window, p.pos = PosKind::Alibi, p.logit = LogitKind::ScaleInvariant;
  v.push_back(p);
  p = Problem{};
  p.D = D;
  p.Tq = 1, p.Tk = 200, p.mask = MaskKind::Scope, p.logit = LogitKind::SwanRow;  // decoding one token
  v.push_back(p);
  p = Problem{};
  p.D = D;
  p.Tq = 90, p.Tk = 70, p.q_offset = 10, p.mask = MaskKind::Causal, p.logit = LogitKind::Temperature;
  v.push_back(p);
  p = Problem{};
  p.D = D;
  p.Tq = p.Tk = 150, p.key_end = 40, p.min_distance = 50, p.mask = MaskKind::Causal;  // rows 0..49 see nothing
  v.push_back(p);
  p = Problem{};
  p.D = D;
  p.H = p.Hkv = 2, p.Tq = p.Tk = 257, p.mask = MaskKind::Window, p.logit = LogitKind::LogN;
  v.push_back(p);
  // packed documents: shorter than a tile, longer than the window (24), a different cut per
  // sequence, GQA; with and without position reset
  p = Problem{};
  p.D = D;
  p.B = 2, p.H = 4, p.Hkv = 2, p.Tq = p.Tk = 150, p.mask = MaskKind::Window, p.pos = PosKind::Rope,
  p.logit = LogitKind::SwanRow, p.docs = {{3, 70, 5, 72}, {150}};
  v.push_back(p);
  p.mask = MaskKind::Scope, p.pos = PosKind::Alibi, p.logit = LogitKind::LogN, p.docs = {{40, 40, 70}, {1, 1, 148}};
  v.push_back(p);
  p.mask = MaskKind::Causal, p.pos = PosKind::PRope, p.logit = LogitKind::ScaleInvariant, p.reset = false;
  v.push_back(p);
  return v;
}

struct CaseName {
  std::string operator()(const ::testing::TestParamInfo<Problem>& info) const { return info.param.tag(); }
};

}  // namespace hzt::attn_util
