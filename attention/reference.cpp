#include "attention/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/functions.h"
#include "core/error.h"

namespace hz::attn {

ReferenceMask reference_visibility(const AttnConfig& cfg, int64_t B, int64_t H, int64_t Tq, int64_t Tk,
                                   const std::vector<int64_t>& rows) {
  for (int64_t i : rows)
    HZ_CHECK(i >= 0 && i < Tq, ValueError, "reference attention: query row ", i, " outside the call's ", Tq, " rows");
  const int64_t R = rows.empty() ? Tq : static_cast<int64_t>(rows.size());  // the rows computed
  HZ_CHECK(!cfg.logn_whole_row, ValueError, "reference attention: logn_whole_row (LogN's n over the whole row) is not modelled");
  const int64_t offset = cfg.q_offset < 0 ? Tk - Tq : cfg.q_offset;
  const int64_t key_end = cfg.key_end < 0 ? Tk : cfg.key_end;
  const int64_t kp = cfg.key_position;  // key j sits at absolute position kp + j, query i at kp + offset + i
  // packed documents: each absolute position's document id, first position and length, read
  // straight off the cumulative lengths (not through Documents::bounds, which the kernels use)
  const Documents* docs = cfg.documents.get();
  const int64_t T = docs ? docs->seq_len() : kp + std::max(Tk, offset + Tq);
  HZ_CHECK(!docs || (docs->batch() == B && kp + std::max(Tk, offset + Tq) <= T), ShapeError,
           "reference attention: documents of ", docs ? docs->batch() : 0, " x ", T, " for ", B, " sequences reaching position ",
           kp + std::max(Tk, offset + Tq));
  // token positions (drawn by the data): what the logit terms read in place of the indices
  std::vector<double> tokpos;
  int64_t tokpos_T = 0;
  if (cfg.positions.defined()) {
    HZ_CHECK(cfg.positions.size(0) == B, ShapeError, "reference attention: token positions for ",
             cfg.positions.size(0), " sequences, the call has ", B);
    tokpos = cfg.positions.to(Device::cpu()).to_vector();
    tokpos_T = cfg.positions.size(1);
  }
  auto position_of = [&](int64_t b, int64_t idx) {  // the position key index idx of sequence b carries
    return tokpos.empty() ? static_cast<double>(kp + idx) : tokpos[b * tokpos_T + kp + idx];
  };
  const int64_t Bd = docs ? B : 1;
  std::vector<int64_t> doc_id(Bd * T, 0), doc_first(Bd * T, 0), doc_len(Bd * T, T);
  if (docs) {
    const auto& cu = docs->cu_seqlens();
    for (size_t d = 0; d + 1 < cu.size(); ++d)
      for (int64_t g = cu[d]; g < cu[d + 1]; ++g) {
        doc_id[g] = static_cast<int64_t>(d);
        doc_first[g] = cu[d] % T;
        doc_len[g] = cu[d + 1] - cu[d];
      }
  }
  ReferenceMask out;
  out.B = B;
  out.H = H;
  out.Tq = R;
  out.Tk = Tk;
  out.visible.assign(B * H * R * Tk, 0);
  out.row_factor.assign(B * H * R, 0.0);
  out.coef.assign(B * H * R * Tk, 0.0);
  out.bias.assign(B * H * R * Tk, -std::numeric_limits<double>::infinity());
  out.distance.assign(B * H * R * Tk, 0.0);
  for (int64_t b = 0; b < B; ++b)
  for (int64_t h = 0; h < H; ++h) {
    const int64_t w = cfg.window.empty() ? 0 : cfg.window[h];
    const double slope = cfg.alibi_slope.empty() ? 0.0 : cfg.alibi_slope[h];
    const int64_t* id = doc_id.data() + (docs ? b * T : 0);
    const int64_t* first = doc_first.data() + (docs ? b * T : 0);
    for (int64_t r = 0; r < R; ++r) {
      const int64_t i = rows.empty() ? r : rows[r];
      const int64_t p = offset + i;
      // the position of key index x inside its document (of the sequence: absolute, without documents)
      auto in_doc = [&](int64_t x) { return docs ? kp + x - first[kp + x] : kp + x; };
      auto visible = [&](int64_t j) {
        const int64_t t = p - j;
        if (j < cfg.key_begin || j >= key_end) return false;
        if (docs && id[kp + j] != id[kp + p]) return false;
        // prefix-LM: both in the document's first `prefix` positions (of the sequence), either order
        if (in_doc(p) < cfg.prefix && in_doc(j) < cfg.prefix) return true;
        if (t < cfg.min_distance || t < 0) return false;
        // sink tokens: the first S positions of the document (of the sequence) whatever the window or chunk
        if (in_doc(j) < cfg.sink_tokens) return true;
        if (w > 0 && t >= w) return false;
        if (cfg.chunk > 0) {  // the same chunk of C positions: absolute, or inside the document with reset
          const bool reset = docs && docs->position_reset();
          const int64_t pq = reset ? in_doc(p) : kp + p;
          const int64_t pk = reset ? in_doc(j) : kp + j;
          if (pq / cfg.chunk != pk / cfg.chunk) return false;
        }
        return true;
      };
      int64_t n = 0;
      for (int64_t j = 0; j < Tk; ++j) n += visible(j);
      double rf = 1.0;
      // the row's position: absolute (key 0 sits at key_position), or inside its document
      const double row = docs && docs->position_reset() ? static_cast<double>(in_doc(p)) : position_of(b, p);
      if (cfg.logit == LogitKind::LogN) {
        const double cnt = cfg.logn_position ? row + 1 : static_cast<double>(n);
        rf = cnt > 0 ? std::log(cnt) : 0.0;
      }
      if (cfg.logit == LogitKind::SwanRow) rf = std::log(cfg.swan_a + row) / std::log(cfg.swan_a);
      if (cfg.logit == LogitKind::Temperature) {
        rf = cfg.beta;
        if (docs && cfg.temp_c != 0.0 && cfg.train_len > 0) {
          const double sc = static_cast<double>(doc_len[b * T + kp + p]) / static_cast<double>(cfg.train_len);
          rf = sc > 1.0 ? 1.0 + cfg.temp_c * std::log(sc) : 1.0;
        }
      }
      if (cfg.qtemp_alpha != 0.0) rf *= 1.0 + cfg.qtemp_alpha * std::log(std::floor((row + 1) / cfg.qtemp_beta) + 1.0);
      out.row_factor[(b * H + h) * R + r] = rf;
      for (int64_t j = 0; j < Tk; ++j) {
        const int64_t idx = ((b * H + h) * R + r) * Tk + j;
        if (!visible(j)) continue;
        const double t = std::abs(position_of(b, p) - position_of(b, j));  // |t|: a prefix's later keys
        double a = 1.0, m = 0.0;
        if (cfg.logit == LogitKind::ScaleInvariant) {
          a = std::sqrt(2.0 * std::log(t / cfg.tau + 1.0) + 1.0);
          m = -2.0 * std::log(t / cfg.tau + 1.0);
        }
        out.visible[idx] = 1;
        out.coef[idx] = rf * a;
        out.bias[idx] = m - slope * t;
        out.distance[idx] = t;
      }
    }
  }
  return out;
}

RowProbabilities reference_row_probabilities(const Tensor& q, const Tensor& k, const AttnConfig& cfg,
                                             const AttnTerms& terms, const std::vector<int64_t>& rows) {
  HZ_CHECK(q.dim() == 4 && k.dim() == 4 && q.size(0) == k.size(0) && q.size(3) == k.size(3) && k.size(1) > 0 &&
               q.size(1) % k.size(1) == 0,
           ShapeError, "reference probabilities: q ", shape_str(q.shape()), " and k ", shape_str(k.shape()),
           " are not (B, H, Tq, D) and (B, Hkv, Tk, D) with Hkv dividing H");
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), D = q.size(3), Tk = k.size(2), G = H / k.size(1);
  const int64_t R = static_cast<int64_t>(rows.size());
  const int64_t offset = cfg.q_offset < 0 ? Tk - Tq : cfg.q_offset;
  const double scale = cfg.scale > 0 ? cfg.scale : 1.0 / std::sqrt(static_cast<double>(D));
  // the coefficients differ per sequence only with documents or token positions (as reference_attention)
  const int64_t Bc = cfg.documents || cfg.positions.defined() ? B : 1;
  const ReferenceMask mask = reference_visibility(cfg, Bc, H, Tq, Tk, rows);
  auto host = [](const Tensor& t) { return t.to(Device::cpu()).to_vector(); };
  const std::vector<double> qv = host(q), kv = host(k);
  std::vector<double> logn(H, 1.0), sink;
  if (cfg.logit == LogitKind::LogN && terms.logn_c.defined()) logn = host(terms.logn_c.value());
  if (terms.sink.defined()) sink = host(terms.sink.value());
  std::vector<double> c;  // FoX: the running sum of log f over the keys, (B, H, Tk)
  if (terms.forget.defined()) {
    c = host(terms.forget.value());
    HZ_CHECK(static_cast<int64_t>(c.size()) == B * H * Tk, ShapeError, "reference probabilities: forget gates of ",
             shape_str(terms.forget.shape()), " for ", B, " x ", H, " x ", Tk);
    for (int64_t bh = 0; bh < B * H; ++bh)
      for (int64_t j = 1; j < Tk; ++j) c[bh * Tk + j] += c[bh * Tk + j - 1];
  }
  // GRAPE-A's rates: (B, H, Tq) and (B, H, Tk), empty when absent
  const std::vector<double> dq = terms.dist_q.defined() ? host(terms.dist_q.value()) : std::vector<double>();
  const std::vector<double> dk = terms.dist_k.defined() ? host(terms.dist_k.value()) : std::vector<double>();
  RowProbabilities out;
  out.B = B;
  out.H = H;
  out.R = R;
  out.Tk = Tk;
  out.rows = rows;
  out.p.assign(B * H * R * Tk, 0.0);
  out.sink.assign(B * H * R, 0.0);
  // each (sequence, head) apart: a long row's scores are rows x keys x D products per head
#pragma omp parallel for schedule(dynamic)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    std::vector<double> L(Tk);
    for (int64_t r = 0; r < R; ++r) {
      const int64_t m = ((Bc == 1 ? 0 : b) * H + h) * R + r;  // the mask's row
      const double* qi = qv.data() + ((b * H + h) * Tq + rows[r]) * D;
      const double* kb = kv.data() + (b * (H / G) + h / G) * Tk * D;
      double mx = sink.empty() ? -std::numeric_limits<double>::infinity() : sink[h];
      for (int64_t j = 0; j < Tk; ++j) {
        if (!mask.visible[m * Tk + j]) continue;
        double s = 0;
        for (int64_t d = 0; d < D; ++d) s += qi[d] * kb[j * D + d];
        L[j] = mask.coef[m * Tk + j] * scale * s * logn[h] + mask.bias[m * Tk + j];
        if (!c.empty()) L[j] += c[(b * H + h) * Tk + offset + rows[r]] - c[(b * H + h) * Tk + j];
        if (!dq.empty() || !dk.empty())  // - |t_ij| (dist_q_i + dist_k_j)
          L[j] -= mask.distance[m * Tk + j] * ((dq.empty() ? 0.0 : dq[(b * H + h) * Tq + rows[r]]) +
                                               (dk.empty() ? 0.0 : dk[(b * H + h) * Tk + j]));
        mx = std::max(mx, L[j]);
      }
      if (mx == -std::numeric_limits<double>::infinity()) continue;  // a row that sees nothing
      double z = sink.empty() ? 0.0 : std::exp(sink[h] - mx);
      for (int64_t j = 0; j < Tk; ++j)
        if (mask.visible[m * Tk + j]) z += std::exp(L[j] - mx);
      const double lse = mx + std::log(z);
      double* p = out.p.data() + ((b * H + h) * R + r) * Tk;
      for (int64_t j = 0; j < Tk; ++j)
        if (mask.visible[m * Tk + j]) p[j] = std::exp(L[j] - lse);
      if (!sink.empty()) out.sink[(b * H + h) * R + r] = std::exp(sink[h] - lse);
    }
  }
  return out;
}

ag::Variable reference_attention(const ag::Variable& q, const ag::Variable& k, const ag::Variable& v,
                                 const AttnConfig& cfg, const AttnTerms& terms) {
  const ag::Variable& logn_c = terms.logn_c;
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), D = q.size(3);
  const int64_t Hkv = k.size(1), Tk = k.size(2), G = H / Hkv;
  const DType dt = q.dtype();
  const int64_t offset = cfg.q_offset < 0 ? Tk - Tq : cfg.q_offset;
  const double scale = cfg.scale > 0 ? cfg.scale : 1.0 / std::sqrt(static_cast<double>(D));
  // repeat kv heads for GQA: (B, Hkv, Tk, D) -> (B, H, Tk, D)
  auto repeat = [&](const ag::Variable& x) {
    if (G == 1) return x;
    return ag::reshape(ag::expand(ag::unsqueeze(x, 2), {B, Hkv, G, Tk, D}), {B, H, Tk, D});
  };
  const ag::Variable kh = repeat(k), vh = repeat(v);
  ag::Variable s = ag::matmul(q, kh, false, true, scale);  // (B, H, Tq, Tk)

  // the coefficients differ per sequence only with documents or token positions
  const int64_t Bc = cfg.documents || cfg.positions.defined() ? B : 1;
  const ReferenceMask mask = reference_visibility(cfg, Bc, H, Tq, Tk);
  const std::vector<double>& coef = mask.coef;
  const std::vector<double>& bias = mask.bias;
  const ag::Variable C(Tensor::from_vector(coef, {Bc, H, Tq, Tk}, dt));
  const ag::Variable Bi(Tensor::from_vector(bias, {Bc, H, Tq, Tk}, dt));
  ag::Variable logits = ag::mul(s, C);
  if (cfg.logit == LogitKind::LogN) logits = ag::mul(logits, ag::reshape(logn_c, {1, H, 1, 1}));
  logits = ag::add(logits, Bi);
  if (terms.forget.defined()) {  // FoX: + c_(p_i) - c_j with c the running sum of log f over the keys
    const ag::Variable c = ag::cumsum(terms.forget, 2);                                    // (B, H, Tk)
    const ag::Variable cq = ag::reshape(ag::narrow(c, 2, offset, Tq), {B, H, Tq, 1});
    logits = ag::add(logits, ag::sub(cq, ag::reshape(c, {B, H, 1, Tk})));
  }
  if (terms.dist_q.defined() || terms.dist_k.defined()) {  // GRAPE-A: - |t_ij| (dist_q_i + dist_k_j)
    ag::Variable rate;
    if (terms.dist_q.defined()) rate = ag::reshape(ag::cast(terms.dist_q, dt), {B, H, Tq, 1});
    if (terms.dist_k.defined()) {
      const ag::Variable rk = ag::reshape(ag::cast(terms.dist_k, dt), {B, H, 1, Tk});
      rate = rate.defined() ? ag::add(rate, rk) : rk;
    }
    const ag::Variable dist(Tensor::from_vector(mask.distance, {Bc, H, Tq, Tk}, dt));
    logits = ag::sub(logits, ag::mul(rate, dist));
  }
  if (terms.sink.defined()) {  // the sink is one more column of logits whose value row is zero
    const ag::Variable z = ag::expand(ag::reshape(ag::cast(terms.sink, dt), {1, H, 1, 1}), {B, H, Tq, 1});
    const ag::Variable p = ag::softmax(ag::cat({logits, z}, 3), -1);
    return ag::matmul(ag::narrow(p, 3, 0, Tk), vh);
  }
  return ag::matmul(ag::softmax(logits, -1), vh);
}

}  // namespace hz::attn
