#include "nn/attention_layer.h"

#include <cmath>

#include "core/names.h"
#include "nn/kv_cache.h"

namespace hz::nn {

namespace {
constexpr const char* kRecompute[] = {"none", "attention", "layer"};
}
const char* name(Recompute r) { return enum_name(r, kRecompute); }
Recompute parse_recompute(const std::string& s) { return parse_name<Recompute>(s, kRecompute, "train.recompute"); }

AttentionLayer::AttentionLayer(const AttentionDims& d, const attn::AttentionSpec& s, double init_std,
                               double resid_std, DType dt)
    : dims(d), spec(s) {
  const int64_t H = d.n_heads, Hkv = d.n_kv_heads, D = d.head_dim, Ha = attn_heads();
  wq = register_module("wq", std::make_shared<Linear>(d.d_model, Ha * D, d.qkv_bias, init_std, dt));
  wk = register_module("wk", std::make_shared<Linear>(d.d_model, Hkv * D, d.qkv_bias, init_std, dt));
  wv = register_module("wv", std::make_shared<Linear>(d.d_model, Hkv * D, d.qkv_bias, init_std, dt));
  wo = register_module("wo", std::make_shared<Linear>(H * D, d.d_model, false, resid_std, dt));
  if (spec.gate != attn::OutputGate::None)
    wg = register_module("wg", std::make_shared<Linear>(d.d_model, spec.gate == attn::OutputGate::Head ? H : H * D, false,
                                                        init_std, dt));
  if (spec.diff) wl = register_module("wl", std::make_shared<Linear>(d.d_model, H, false, init_std, dt));
  if (spec.qk_norm == attn::QKNorm::Full) {
    q_norm = register_module("q_norm", std::make_shared<RMSNorm>(Ha * D, 1e-6, dt));
    k_norm = register_module("k_norm", std::make_shared<RMSNorm>(Hkv * D, 1e-6, dt));
  } else if (spec.qk_norm == attn::QKNorm::PerHead) {
    q_norm = register_module("q_norm", std::make_shared<RMSNorm>(D, 1e-6, dt));
    k_norm = register_module("k_norm", std::make_shared<RMSNorm>(D, 1e-6, dt));
  }
  if (spec.logit.kind == attn::LogitKind::LogN) {
    Tensor c = Tensor::full({Ha}, spec.logit.logn_c, dt);
    if (spec.logit.logn_learnable) logn_c = register_parameter("logn_c", c, Init::constant(spec.logit.logn_c));
    else logn_c = ag::Variable(c);
  }
  if (spec.sink) sink = register_parameter("sink", Tensor::zeros({Ha}, dt), Init::constant(0.0));
  if (spec.forget) {
    forget_w = register_parameter("forget_w", Tensor::zeros({Ha, d.d_model}, dt), Init::normal(init_std));
    forget_b = register_parameter("forget_b", Tensor::zeros({Ha}, dt), Init::constant(spec.forget_bias));
  }
  if (spec.pos.kind == attn::PosKind::Rope && spec.pos.rope_angles == attn::RopeAngles::Accumulated) {
    // b = ln(e - 1): softplus(b) = 1, so at W = 0 every step is 1 and theta_i = w (i + 1), RoPE's angles
    const int64_t G = spec.pos.angles_per_head ? Hkv : 1;
    angle_w = register_parameter("angle_w", Tensor::zeros({G * (D / 2), d.d_model}, dt), Init::normal(init_std));
    angle_b = register_parameter("angle_b", Tensor::zeros({G * (D / 2)}, dt), Init::constant(std::log(std::exp(1.0) - 1.0)));
  }
  if (spec.pos.kind == attn::PosKind::Rope && spec.pos.learned_freqs != attn::LearnedFreqs::None) {
    const int64_t G = spec.pos.learned_freqs == attn::LearnedFreqs::Head ? Hkv : 1;
    std::vector<double> init = spec.pos.rope_freq_factors;
    if (init.empty()) init.assign(D / 2, 1.0);
    freq_factors = register_parameter("freq_factors", Tensor::zeros({G * (D / 2)}, dt), Init::tiled(init));
  }
  if (spec.additive_rates()) {  // GRAPE-A: directions ~ normal(1/sqrt(D)), omega_h = softplus(w_h) slope_h
    const double gate_std = 1.0 / std::sqrt(static_cast<double>(D));
    const attn::AdditiveKind a = spec.additive;
    if (a == attn::AdditiveKind::Key || a == attn::AdditiveKind::QueryKey)
      additive_u = register_parameter("additive_u", Tensor::zeros({Ha, D}, dt), Init::normal(gate_std));
    if (a == attn::AdditiveKind::Query || a == attn::AdditiveKind::QueryKey)
      additive_v = register_parameter("additive_v", Tensor::zeros({Ha, D}, dt), Init::normal(gate_std));
    const double w0 = std::log(std::exp(1.0) - 1.0);  // softplus(w0) = 1
    Tensor w = Tensor::full({Ha}, w0, dt);
    if (spec.additive_learned_slope) additive_w = register_parameter("additive_w", w, Init::constant(w0));
    else additive_w = ag::Variable(w);
  }
}

int64_t AttentionLayer::angle_groups() const {
  const bool per_head = (spec.pos.rope_angles == attn::RopeAngles::Accumulated && spec.pos.angles_per_head) ||
                        spec.pos.learned_freqs == attn::LearnedFreqs::Head;
  return per_head ? dims.n_kv_heads : 1;
}

ag::Variable AttentionLayer::angles(const ag::Variable& x, const Tensor& positions, const attn::RopeFreqs& f,
                                    AttentionRoute& route) const {
  const int64_t B = x.size(0), T = x.size(1), half = dims.head_dim / 2;
  const DType adt = attn::angle_dtype(x.value());
  const Device dev = x.value().device();
  // RoPE's frequencies for this call (after any scaling and pair selection: pairs that do not rotate stay 0)
  const ag::Variable w(Tensor::from_vector(f.inv_freq, {1, 1, 1, half}, adt, dev));
  ag::Variable theta;
  if (angle_w.defined()) {
    // steps s = softplus(x W^T + b) (B, T, G half) in the layer's compute dtype (f32 for bf16), then
    // delta = w s in the angles' dtype and theta = its running sum over the whole sequence. Packed
    // documents need no reset: the relative angle theta_i - theta_j of two tokens of one document sums
    // only that document's steps.
    const DType ld = x.dtype() == DType::BF16 ? DType::F32 : x.dtype();
    const ag::Variable xf = x.dtype() == ld ? x : ag::cast(x, ld);
    const ag::Variable W = angle_w.dtype() == ld ? angle_w : ag::cast(angle_w, ld);
    const ag::Variable b = angle_b.dtype() == ld ? angle_b : ag::cast(angle_b, ld);
    const ag::Variable steps = ag::neg(ag::log_sigmoid(ag::neg(ag::linear(xf, W, b))));  // softplus
    const int64_t G = angle_w.size(0) / half;
    ag::Variable s4 = ag::contiguous(ag::transpose(ag::reshape(steps, {B, T, G, half}), 1, 2));  // (B, G, T, half)
    if (s4.dtype() != adt) s4 = ag::cast(s4, adt);
    theta = route.running_sum(ag::mul(s4, w));
  } else {  // positions (T) or (B, T), integer or drawn (f64): theta = p w
    const Tensor p = positions.to(adt).to(dev).contiguous();
    const Tensor p4 = p.dim() == 2 ? p.view({p.size(0), 1, T, 1}) : p.view({1, 1, T, 1});
    theta = ag::mul(ag::Variable(p4), w);
  }
  if (freq_factors.defined()) {
    const int64_t G = freq_factors.size(0) / half;
    const ag::Variable phi = freq_factors.dtype() == adt ? freq_factors : ag::cast(freq_factors, adt);
    theta = ag::mul(theta, ag::reshape(phi, {1, G, 1, half}));
  }
  return theta;
}

double AttentionLayer::angle_flops_per_token() const {
  if (!spec.pos.learned_angles() || spec.pos.kind != attn::PosKind::Rope) return 0.0;
  const double D = static_cast<double>(dims.head_dim), G = static_cast<double>(angle_groups());
  // a rotation: 6 per pair, 3 per element, of q, k (and v and the output with rotate_v)
  double rows = attn_heads() + dims.n_kv_heads;
  if (spec.pos.rotate_v) rows += attn_heads() + dims.n_kv_heads;
  double fl = 3.0 * rows * D;
  // the angles: softplus, the frequency product and the running sum (about 4 per angle), the factors' product
  if (angle_w.defined()) fl += 4.0 * G * D / 2;
  if (freq_factors.defined()) fl += G * D / 2;
  return fl;
}

attn::AttnTerms AttentionLayer::terms(const ag::Variable& x, const ag::Variable& q, const ag::Variable& k) const {
  attn::AttnTerms t;
  t.logn_c = logn_c;
  t.sink = sink;
  if (forget_w.defined()) {  // log f = log sigmoid(x w + b), f32 for bf16 input, (B, T, H) -> (B, H, T)
    const DType fd = x.dtype() == DType::BF16 ? DType::F32 : x.dtype();
    const ag::Variable xf = x.dtype() == fd ? x : ag::cast(x, fd);
    const ag::Variable w = forget_w.dtype() == fd ? forget_w : ag::cast(forget_w, fd);
    const ag::Variable b = forget_b.dtype() == fd ? forget_b : ag::cast(forget_b, fd);
    t.forget = ag::contiguous(ag::transpose(ag::log_sigmoid(ag::linear(xf, w, b)), 1, 2));
  }
  if (spec.additive_rates()) {
    // GRAPE-A's rates in f32 for bf16 activations: omega_h softplus(u_h . k_j / sqrt(D)) for the keys (kv head
    // h / G), likewise from q_i and v_h for the queries; u / sqrt(|u|^2 + 1e-12) is u's unit direction (0
    // stays 0, as normalize's floor does in the GRAPE code)
    const DType fd = x.dtype() == DType::BF16 ? DType::F32 : x.dtype();
    auto as_fd = [&](const ag::Variable& a) { return a.dtype() == fd ? a : ag::cast(a, fd); };
    const int64_t B = q.size(0), Ha = q.size(1), T = q.size(2), D = q.size(3), Hkv = k.size(1), G = Ha / Hkv;
    const ag::Variable softplus_w = ag::neg(ag::log_sigmoid(ag::neg(as_fd(additive_w))));
    std::vector<double> slopes = attn::alibi_slopes(dims.n_heads);
    if (spec.diff) {  // DIFF V2: attention heads 2h and 2h+1 share output head h's slope (make_attn_config)
      std::vector<double> paired;
      for (double m : slopes) paired.insert(paired.end(), {m, m});
      slopes = paired;
    }
    const ag::Variable omega = ag::reshape(
        ag::mul(softplus_w, ag::Variable(Tensor::from_vector(slopes, {Ha}, fd).to(q.value().device()))), {1, Ha, 1});
    auto rate = [&](const ag::Variable& heads, const ag::Variable& dir) {  // heads (B, Ha, T, D), dir (Ha, D)
      const ag::Variable d = as_fd(dir);
      const ag::Variable unit = ag::mul(d, ag::rsqrt(ag::add_scalar(ag::sum(ag::square(d), 1, true), 1e-12)));
      const ag::Variable s = ag::sum(ag::mul(as_fd(heads), ag::reshape(unit, {1, Ha, 1, D})), 3);  // (B, Ha, T)
      const ag::Variable sp = ag::neg(ag::log_sigmoid(ag::neg(ag::mul_scalar(s, 1.0 / std::sqrt(static_cast<double>(D))))));
      return ag::contiguous(ag::mul(sp, omega));
    };
    if (additive_u.defined()) {
      const ag::Variable kh = G == 1 ? k : ag::reshape(ag::expand(ag::unsqueeze(k, 2), {B, Hkv, G, T, D}), {B, Ha, T, D});
      t.dist_k = rate(kh, additive_u);
    }
    if (additive_v.defined()) t.dist_q = rate(q, additive_v);
  }
  return t;
}

void AttentionLayer::move_buffers(Device dev) {
  if (logn_c.defined() && !logn_c.requires_grad() && logn_c.value().device() != dev)
    logn_c = ag::Variable(logn_c.value().to(dev));
  if (additive_w.defined() && !additive_w.requires_grad() && additive_w.value().device() != dev)
    additive_w = ag::Variable(additive_w.value().to(dev));
}

attn::AttnConfig AttentionLayer::attn_config(const AttnCall& call) const {
  attn::AttnConfig cfg = attn::make_attn_config(spec, dims.n_heads, call.T, call.train_len);
  cfg.block_q = call.block_q;
  cfg.block_k = call.block_k;
  cfg.documents = call.documents;
  if (call.positions.defined() && spec.logits_read_positions()) cfg.positions = call.positions;
  return cfg;
}

AttentionLayer::QKV AttentionLayer::project_qkv(const ag::Variable& x) const {
  const int64_t B = x.size(0), T = x.size(1), H = attn_heads(), Hkv = dims.n_kv_heads, D = dims.head_dim;
  ag::Variable q = wq->forward(x), k = wk->forward(x), v = wv->forward(x);  // (B, T, heads*D)
  if (spec.qk_norm == attn::QKNorm::Full) {
    q = q_norm->forward(q);
    k = k_norm->forward(k);
  }
  auto heads = [&](const ag::Variable& t, int64_t n) {  // (B, T, n*D) -> (B, n, T, D)
    return ag::transpose(ag::reshape(t, {B, T, n, D}), 1, 2);
  };
  q = heads(q, H);
  k = heads(k, Hkv);
  v = heads(v, Hkv);
  if (spec.qk_norm == attn::QKNorm::PerHead) {
    q = q_norm->forward(q);
    k = k_norm->forward(k);
  }
  return {q, k, v};
}

AttnShape AttentionLayer::shape(const CallShape& s) const {
  return {s, attn_heads(), dims.n_kv_heads, dims.head_dim, spec.forget,
          spec.additive_rates() && spec.additive != attn::AdditiveKind::Query};
}

ActivationCost AttentionLayer::cost(const CallShape& s, const AttnCall& call) const {
  const int64_t N = s.tokens(), a = s.act, C = dims.d_model, H = attn_heads(), Hkv = dims.n_kv_heads,
                D = dims.head_dim;
  int64_t kept = N * C * a + N * (2 * H + 2 * Hkv) * D * a + N * H * 4;
  // DIFF V2: the pairs' second halves scaled, lambda's logits and sigmoid, the difference
  if (spec.diff) kept += N * (H / 2) * D * a * 2 + 2 * N * (H / 2) * a;
  if (spec.qk_norm != attn::QKNorm::None) kept += N * (H + Hkv) * D * a + N * (H + Hkv) * 4;
  if (spec.gate != attn::OutputGate::None)
    kept += 2 * N * (spec.gate == attn::OutputGate::Head ? H : H * D) * a + N * H * D * a;
  if (spec.forget) kept += N * H * a + 3 * N * H * 4;
  if (spec.pos.kind == attn::PosKind::Rope && spec.pos.learned_angles()) {
    // the angles (B, G, T, D/2), f64 (the CPU's) or f32 (bf16 runs on a GPU), kept by the rotations;
    // accumulated: the steps' logits and softplus (compute dtype) and the steps and deltas in the
    // angles' dtype; rotate_v: the rotated output (the rotated v is the v counted above)
    const int64_t ab = a == 2 ? 4 : 8, la = a == 2 ? 4 : a, GA = N * angle_groups() * (D / 2);
    kept += GA * ab;
    if (angle_w.defined()) kept += 2 * GA * la + 2 * GA * ab;
    if (spec.pos.rotate_v) kept += N * H * D * a;
  }
  // GRAPE-A, per gated side: its heads before the rotation (kept by the gate's product, f32 at most), the
  // projections, their softplus and the rates (f32), and the op's f64 copy of the rates
  if (spec.additive_rates()) {
    const bool keys = spec.additive != attn::AdditiveKind::Query, queries = spec.additive != attn::AdditiveKind::Key;
    kept += (keys ? N * Hkv * D * 4 + 3 * N * H * 4 + N * H * 8 : 0) + (queries ? N * H * D * 4 + 3 * N * H * 4 + N * H * 8 : 0);
  }
  if (call.route) kept += call.route->kept_bytes(attn_config(call), shape(s));
  // no grad: q, k, v with one rotated copy being made, the output and its (B, T, H D) copy with
  // the rows' statistics, the output projection; gates add their sigmoid and product
  int64_t inference = N * (H + 2 * Hkv) * D * a + N * (H + Hkv) * D * a + 2 * N * H * D * a + N * H * 4 + N * C * a;
  if (spec.gate != attn::OutputGate::None) inference += 2 * N * (spec.gate == attn::OutputGate::Head ? H : H * D) * 4;
  int64_t transient = 2 * N * C * a + N * (H + 2 * Hkv) * D * a + N * H * 4;
  if (s.split_attention && (D == 64 || D == 128)) {  // the split kernels' bf16 pairs: q, k, v (forward), and dO (backward)
    inference += N * (H + 2 * Hkv) * D * 4;
    transient += N * (2 * H + 2 * Hkv) * D * 4;
  }
  return {kept, transient, inference};
}

bool AttentionLayer::rotary() const { return spec.rotary(); }

attn::RopeFreqs AttentionLayer::rope_freqs(const AttnCall& call) const {
  attn::PositionSpec ps = spec.pos;
  // GRAPE-M: the trained freq_factors (initialised to rope_freq_factors) take the fixed factors' place
  if (ps.learned_freqs != attn::LearnedFreqs::None) ps.rope_freq_factors.clear();
  if (ps.original_context == 0) ps.original_context = call.train_len > 0 ? call.train_len : call.T;
  return attn::rope_frequencies(ps, dims.head_dim, call.T);
}

bool AttentionLayer::uses_lampe(const attn::AttnConfig& cfg) const {
  if (!rotary() || !lampe || cfg.chunk > 0 || cfg.prefix > 0) return false;  // LaMPE remaps whole causal rows
  for (int64_t w : cfg.window)
    if (w != 0) return false;
  return true;
}

ag::Variable AttentionLayer::forward(const ag::Variable& x, const Tensor& positions, const AttnCall& call,
                                     LayerKV* cache) const {
  const int64_t B = x.size(0), T = x.size(1), H = dims.n_heads, D = dims.head_dim;
  auto [q, k, v] = project_qkv(x);  // q (B, attn_heads(), T, D)
  // bf16 activations go through attention as they are: the fused op takes bf16 (f32 arithmetic
  // on the CPU, tensor cores with fp32 accumulation on a GPU; lse and LogN's c stay f32)
  const DType act = q.dtype();
  const attn::AttnConfig cfg = attn_config(call);
  const bool rot = rotary();
  attn::RopeFreqs f;
  if (rot) f = rope_freqs(call);
  ag::Variable o;
  HZ_CHECK(!(cfg.documents && cache), NotImplementedError,
           "attention: packed documents with a KV cache (decoding) are not supported; decode each document alone");
  HZ_CHECK(!(call.route && !call.route->whole_sequence() && (cache || uses_lampe(cfg))), NotImplementedError,
           "attention: ", call.route ? call.route->name() : "", " splits a training or evaluation sequence; decoding "
           "with a KV cache and LaMPE run on one rank");
  if (uses_lampe(cfg)) {  // LaMPE rotates per region itself, for the input length l = call.T
    HZ_CHECK(!spec.sink && !spec.forget && !spec.additive_rates(), NotImplementedError,
             "attention: LaMPE remaps RoPE positions per region and does not take sinks, FoX forget gates or GRAPE-A's "
             "gated rates");
    HZ_CHECK(!cfg.documents, NotImplementedError,
             "attention: LaMPE remaps positions for one input length and cannot score packed documents; "
             "evaluate with data.documents=stream (one document per sequence)");
    HZ_CHECK(!spec.pos.learned_angles(), NotImplementedError,
             "attention: LaMPE remaps fixed RoPE positions and does not take learned angles (rope_angles, "
             "learned_freqs, rotate_v)");
    attn::LampeConfig lc = *lampe;
    if (lc.length == 0) lc.length = call.T;
    if (cache) {
      const auto [K, V] = cache->append_all(k.value(), v.value());
      o = attn::lampe_attention(q, ag::Variable(K), ag::Variable(V), f, lc, cfg).out;
    } else {
      o = attn::lampe_attention(q, k, v, f, lc, cfg).out;
    }
  } else {
    const attn::AttnTerms tm = terms(x, q, k);  // GRAPE-A's gates read q and k before the rotation
    AttentionRoute& route = cache ? *cache : call.route ? *call.route : fused_route();
    ag::Variable theta;  // learned angles (B or 1, G, T, D/2)
    if (rot && spec.pos.learned_angles()) {
      theta = angles(x, positions, f, route);
      q = attn::rotate_by_angles(q, theta, f.mscale);
      k = attn::rotate_by_angles(k, theta, f.mscale);
      if (spec.pos.rotate_v) v = attn::rotate_by_angles(v, theta, 1.0);  // v_j by theta_j
    } else if (rot) {
      q = attn::apply_rope(q, positions, f);
      k = attn::apply_rope(k, positions, f);
    }
    o = route.attend(q, k, v, cfg, tm);
    // rotate_v: o_i back by -theta_i, before DIFF's combine and the output gate
    if (theta.defined() && spec.pos.rotate_v) o = attn::rotate_by_angles(o, theta, 1.0, /*inverse=*/true);
  }
  if (spec.diff) {  // DIFF V2: o_h = A_2h V - sigmoid(lambda_h) A_2h+1 V, lambda = x W_l per token
    const ag::Variable pairs = ag::reshape(o, {B, H, 2, T, D});
    const ag::Variable even = ag::reshape(ag::narrow(pairs, 2, 0, 1), {B, H, T, D});
    const ag::Variable odd = ag::reshape(ag::narrow(pairs, 2, 1, 1), {B, H, T, D});
    const ag::Variable lam = ag::sigmoid(ag::transpose(wl->forward(x), 1, 2));  // (B, H, T)
    o = ag::sub(even, ag::mul(ag::cast(odd, lam.dtype()), ag::reshape(lam, {B, H, T, 1})));
    o = ag::cast(o, act);
  }
  ag::Variable y = ag::reshape(ag::transpose(o, 1, 2), {B, T, H * D});
  if (wg) {  // gated attention: y * sigmoid(x W_g), a gate per head (broadcast over D) or per element
    const ag::Variable g = ag::sigmoid(wg->forward(x));
    y = spec.gate == attn::OutputGate::Head
            ? ag::reshape(ag::mul(ag::reshape(ag::cast(y, g.dtype()), {B, T, H, D}), ag::reshape(g, {B, T, H, 1})), {B, T, H * D})
            : ag::mul(ag::cast(y, g.dtype()), g);
  }
  return wo->forward(ag::cast(y, act));
}

namespace {
class FusedRoute final : public AttentionRoute {
 public:
  std::string name() const override { return "the fused op"; }
  ag::Variable attend(const ag::Variable& q, const ag::Variable& k, const ag::Variable& v, const attn::AttnConfig& cfg,
                      const attn::AttnTerms& terms) override {
    return attn::fused_attention(q, k, v, cfg, terms).out;
  }
};
}  // namespace

AttentionRoute& fused_route() {
  static FusedRoute r;
  return r;
}

}  // namespace hz::nn
