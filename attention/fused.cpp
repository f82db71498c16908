// Horizon: the fused attention op — argument checks, planning (AttnKernelParams), dispatch by
// device and the autograd node. The kernels: fused_cpu.cpp (CPU) and attention/cuda/ (CUDA); the
// arithmetic they share: tiling.h.
#include "attention/fused.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "attention/fused_kernels.h"
#include "autograd/functions.h"
#include "core/device.h"
#include "core/ops.h"

namespace hz::attn {

AttnConfig make_attn_config(const AttentionSpec& spec, int64_t n_heads, int64_t T, int64_t train_T) {
  AttnConfig cfg;
  cfg.window = spec.windows(n_heads, T);
  if (spec.pos.kind == PosKind::Alibi) cfg.alibi_slope = alibi_slopes(n_heads);
  cfg.logit = spec.logit.kind;
  cfg.tau = spec.logit.tau;
  cfg.swan_a = spec.logit.swan_a;
  const double s = train_T > 0 ? static_cast<double>(T) / static_cast<double>(train_T) : 1.0;
  cfg.beta = spec.logit.temp_c != 0.0 ? temperature_beta(spec.logit.temp_c, s) : spec.logit.beta;
  cfg.temp_c = spec.logit.temp_c;
  cfg.train_T = train_T;
  cfg.logn_position = spec.logit.logn_position;
  cfg.qtemp_alpha = spec.logit.qtemp_alpha;
  cfg.qtemp_beta = spec.logit.qtemp_beta;
  return cfg;
}

AttnKernelParams make_kernel_params(const AttnConfig& cfg, int64_t B, int64_t H, int64_t Hkv, int64_t Tq,
                                    int64_t Tk, int64_t D) {
  HZ_CHECK(H > 0 && Hkv > 0 && H % Hkv == 0, ShapeError, "attention: n_heads (", H,
           ") must be a positive multiple of n_kv_heads (", Hkv, ")");
  HZ_CHECK(H <= kMaxAttnHeads, ShapeError, "attention: ", H, " query heads; the fused op takes at most ",
           kMaxAttnHeads, " (attention/tiling.h kMaxAttnHeads)");
  HZ_CHECK(cfg.min_distance >= 0, ValueError,
           "attention: min_distance must be >= 0 (keys after the query are never visible)");
  HZ_CHECK(cfg.q_offset >= 0 || Tq <= Tk, ShapeError, "attention: Tq (", Tq, ") > Tk (", Tk,
           ") needs an explicit q_offset (the absolute position of query 0)");
  HZ_CHECK(cfg.window.empty() || static_cast<int64_t>(cfg.window.size()) == H, ShapeError, "attention: ",
           cfg.window.size(), " windows for ", H, " query heads");
  HZ_CHECK(cfg.alibi_slope.empty() || static_cast<int64_t>(cfg.alibi_slope.size()) == H, ShapeError,
           "attention: ", cfg.alibi_slope.size(), " ALiBi slopes for ", H, " query heads");
  AttnKernelParams p;
  p.B = B;
  p.H = H;
  p.Hkv = Hkv;
  p.G = H / Hkv;
  p.Tq = Tq;
  p.Tk = Tk;
  p.D = D;
  p.q_offset = cfg.q_offset < 0 ? Tk - Tq : cfg.q_offset;
  p.key_begin = std::max<int64_t>(0, cfg.key_begin);
  p.key_end = cfg.key_end < 0 ? Tk : std::min(cfg.key_end, Tk);
  p.min_distance = cfg.min_distance;
  p.block_q = std::max<int64_t>(1, cfg.block_q);
  p.block_k = std::max<int64_t>(1, cfg.block_k);
  p.logit = cfg.logit;
  p.alibi = !cfg.alibi_slope.empty();
  p.scale = cfg.scale > 0 ? cfg.scale : 1.0 / std::sqrt(static_cast<double>(D));
  p.tau = cfg.tau;
  p.swan_a = cfg.swan_a;
  p.beta = cfg.beta;
  for (int64_t h = 0; h < H; ++h) {
    p.window[h] = cfg.window.empty() ? 0 : cfg.window[h];
    HZ_CHECK(p.window[h] >= 0, ValueError, "attention: window of head ", h, " is ", p.window[h],
             "; use 0 for unbounded");
    p.slope[h] = p.alibi ? cfg.alibi_slope[h] : 0.0;
  }
  if (cfg.logit == LogitKind::ScaleInvariant)
    HZ_CHECK(cfg.tau > 0, ValueError, "attention: scale_invariant tau must be positive");
  if (cfg.logit == LogitKind::SwanRow)
    HZ_CHECK(cfg.swan_a > 1, ValueError, "attention: swan_row a must be > 1");
  HZ_CHECK(cfg.key_position >= 0, ValueError, "attention: key_position ", cfg.key_position, " is negative");
  p.key_position = cfg.key_position;
  HZ_CHECK(cfg.qtemp_alpha >= 0 && cfg.qtemp_beta > 0, ValueError, "attention: qtemp_alpha must be >= 0 and qtemp_beta > 0");
  p.logn_position = cfg.logn_position;
  p.qtemp_alpha = cfg.qtemp_alpha;
  p.qtemp_beta = cfg.qtemp_beta;
  p.temp_c = cfg.temp_c;
  p.temp_train_T = cfg.train_T;
  if (cfg.documents) {
    const Documents& d = *cfg.documents;
    HZ_CHECK(d.batch() == B && cfg.key_position + Tk <= d.seq_len(), ShapeError, "attention: documents of ",
             d.batch(), " x ", d.seq_len(), " tokens for a batch of ", B, " x ", Tk, " keys at key_position ",
             cfg.key_position);
    HZ_CHECK(p.q_offset + Tq <= Tk, ShapeError, "attention: with documents the queries must lie among the keys (q_offset ",
             p.q_offset, " + Tq ", Tq, " > Tk ", Tk, ")");
    HZ_CHECK(p.min_distance == 0, ValueError, "attention: documents need min_distance 0");
    const Tensor& bounds = d.bounds(Device::cpu());  // host pointers; fused_attention swaps in the device's
    p.doc_start = bounds.data<int32_t>();
    p.doc_end = p.doc_start + B * d.seq_len();
    p.doc_T = d.seq_len();
    p.pos_reset = d.position_reset();
  }
  return p;
}

namespace {

AttnImpl env_impl() {
  const char* e = std::getenv("HZ_ATTN_IMPL");
  const std::string s = e ? e : "";
  if (s.empty() || s == "auto") return AttnImpl::Auto;
  if (s == "reference") return AttnImpl::Reference;
  if (s == "tensor_core") return AttnImpl::TensorCore;
  throw ValueError("HZ_ATTN_IMPL='" + s + "': expected auto, reference or tensor_core");
}

// Whether a call on CUDA device `dev` runs the tensor-core kernels (not with FoX's forget gates,
// which only the reference kernels take so far).
bool use_tensor_core(const AttnConfig& cfg, DType dt, int64_t D, Device dev, bool fox = false) {
  const AttnImpl impl = cfg.impl == AttnImpl::Auto ? env_impl() : cfg.impl;
  HZ_CHECK(!fox || impl != AttnImpl::TensorCore, NotImplementedError,
           "attention: FoX's forget gates run on the reference CUDA kernels only so far; use AttnImpl::Auto or "
           "HZ_ATTN_IMPL=reference");
  if (fox) return false;
  const bool ok = detail::tensor_core_supported(dt, D, dev.index);
  HZ_CHECK(ok || impl != AttnImpl::TensorCore, NotImplementedError,
           "attention: the tensor-core kernels take bf16 q/k/v with head_dim 64 or 128 on an sm_80+ GPU, got ",
           dtype_name(dt), " with head_dim ", D,
           "; use the reference kernels (AttnImpl::Reference or HZ_ATTN_IMPL=reference)");
  return impl != AttnImpl::Reference && ok;
}

Tensor as_f32(const Tensor& t) { return t.dtype() == DType::BF16 ? t.to(DType::F32) : t; }

}  // namespace

AttnTiles attn_tiles(const AttnConfig& cfg, Device dev, DType dt, int64_t D) {
  if (dev.is_cuda() && use_tensor_core(cfg, dt, D, dev)) return detail::tensor_core_tiles(D);
  const int64_t bq = std::max<int64_t>(1, cfg.block_q), bk = std::max<int64_t>(1, cfg.block_k);
  return {bq, bk, bq, bk, false};
}

AttnStats attn_stats() {
  AttnStats s = detail::cpu_stats();
  if (cuda::compiled()) {
    const AttnStats c = detail::cuda_stats();
    s.fwd_blocks += c.fwd_blocks;
    s.fwd_boundary_blocks += c.fwd_boundary_blocks;
    s.bwd_blocks += c.bwd_blocks;
  }
  return s;
}
void reset_attn_stats() {
  detail::cpu_reset_stats();
  if (cuda::compiled()) detail::cuda_reset_stats();
}

namespace {

// Sinks on CUDA, composed around the kernels (the CPU kernel folds the sink into its epilogue):
// lse' = log(exp(lse) + exp(z_h)), out' = out exp(lse - lse'); the backward kernels then read
// (out', lse') and are exact, and dLoss/dz_h = -sum_i exp(z_h - lse'_i) dO_i . O'_i.
void fold_sink(const Tensor& z, Tensor& out, Tensor& lse) {
  const int64_t H = lse.size(1);
  const Tensor zb = z.view({1, H, 1});
  const Tensor m = ops::binary(BinaryOp::Maximum, lse, zb);
  const Tensor total = ops::add(m, ops::unary(UnaryOp::Log, ops::add(ops::unary(UnaryOp::Exp, ops::sub(lse, m)),
                                                                      ops::unary(UnaryOp::Exp, ops::sub(zb, m)))));
  const Tensor factor = ops::unary(UnaryOp::Exp, ops::sub(lse, total)).unsqueeze(3);
  out = ops::mul(out.to(lse.dtype()), factor).to(out.dtype());
  lse = total;
}
Tensor sink_grad(const Tensor& z, const Tensor& lse, const Tensor& out, const Tensor& gout) {
  const DType adt = lse.dtype();
  const Tensor Dv = ops::sum(ops::mul(gout.to(adt), out.to(adt)), 3, false);  // (B, H, Tq)
  const Tensor p = ops::unary(UnaryOp::Exp, ops::sub(z.view({1, z.numel(), 1}), lse));
  return ops::mul_scalar(ops::sum(ops::sum(ops::mul(p, Dv), 2, false), 0, false), -1.0);  // (H)
}

}  // namespace

AttnOutput fused_attention(const ag::Variable& q, const ag::Variable& k, const ag::Variable& v,
                           const AttnConfig& cfg, const AttnTerms& terms) {
  const Tensor& qv = q.value();
  const Tensor& kv = k.value();
  const Tensor& vv = v.value();
  HZ_CHECK(qv.dim() == 4 && kv.dim() == 4 && vv.dim() == 4, ShapeError,
           "attention: q, k, v must be (B, H, T, D); got ", shape_str(qv.shape()), ", ",
           shape_str(kv.shape()), ", ", shape_str(vv.shape()));
  HZ_CHECK(kv.shape() == vv.shape(), ShapeError, "attention: k ", shape_str(kv.shape()),
           " and v ", shape_str(vv.shape()), " must match");
  HZ_CHECK(qv.size(0) == kv.size(0) && qv.size(3) == kv.size(3), ShapeError,
           "attention: q ", shape_str(qv.shape()), " and k ", shape_str(kv.shape()),
           " differ in batch or head_dim");
  HZ_CHECK(qv.size(1) % kv.size(1) == 0, ShapeError, "attention: n_heads (", qv.size(1),
           ") must be divisible by n_kv_heads (", kv.size(1), ")");
  HZ_CHECK(qv.dtype() == kv.dtype() && kv.dtype() == vv.dtype(), DTypeError,
           "attention: q, k, v dtypes differ (", dtype_name(qv.dtype()), ", ", dtype_name(kv.dtype()), ", ",
           dtype_name(vv.dtype()), "); cast them to one dtype");
  HZ_CHECK(is_floating(qv.dtype()), DTypeError, "attention: q, k, v must be f32, f64 or bf16, got ",
           dtype_name(qv.dtype()));
  HZ_CHECK(qv.device() == kv.device() && kv.device() == vv.device(), DeviceError,
           "attention: q, k, v live on different devices; move them to one with .to(device)");
  const Device dev = qv.device();
  const DType dt = qv.dtype(), adt = acc_dtype(dt);
  const DType kdt = dev.is_cpu() && dt == DType::BF16 ? DType::F32 : dt;  // the CPU kernel's dtype
  const Tensor qc = qv.contiguous(), kc = kv.contiguous(), vc = vv.contiguous();
  AttnKernelParams P = make_kernel_params(cfg, qc.size(0), qc.size(1), kc.size(1), qc.size(2), kc.size(2),
                                          qc.size(3));
  Tensor doc_bounds;  // kept alive with the backward: P points into it
  if (cfg.documents) {
    doc_bounds = cfg.documents->bounds(dev);
    P.doc_start = doc_bounds.data<int32_t>();
    P.doc_end = P.doc_start + P.B * P.doc_T;
  }
  const bool logn = cfg.logit == LogitKind::LogN;
  const ag::Variable& logn_c = terms.logn_c;
  if (logn)
    HZ_CHECK(logn_c.defined() && logn_c.numel() == P.H && is_floating(logn_c.dtype()), ShapeError,
             "attention: logit 'logn' needs one floating c per query head (", P.H, " values)");
  P.sink = terms.sink.defined();
  if (P.sink)
    HZ_CHECK(terms.sink.numel() == P.H && is_floating(terms.sink.dtype()), ShapeError,
             "attention: sinks need one floating logit per query head (", P.H, " values), got ",
             shape_str(terms.sink.shape()));
  P.fox = terms.forget.defined();
  if (P.fox) {
    HZ_CHECK(terms.forget.value().shape() == Shape({P.B, P.H, P.Tk}) && is_floating(terms.forget.dtype()), ShapeError,
             "attention: FoX's log forget gates must be (B, H, Tk) = (", P.B, ", ", P.H, ", ", P.Tk, "), got ",
             shape_str(terms.forget.shape()));
    HZ_CHECK(P.q_offset + P.Tq <= P.Tk, ShapeError, "attention: FoX needs the queries among the keys (q_offset ",
             P.q_offset, " + Tq ", P.Tq, " > Tk ", P.Tk, ")");
  }
  const bool empty = qc.numel() == 0 || kc.numel() == 0;
  const bool use_tc = dev.is_cuda() && use_tensor_core(cfg, dt, P.D, dev, P.fox);
  // LogN's c: a host vector for the CPU kernel, a device tensor in the accumulation dtype on CUDA;
  // the sink likewise; FoX's c = cumsum(log f) in the kernel's dtype, differentiable (its node is
  // an input of this op, so dLoss/dc flows back through the prefix sum to log f)
  detail::CpuTerms ct;
  Tensor c_dev, z_dev;
  if (logn && dev.is_cpu()) ct.logn_c = logn_c.value().to_vector();
  if (logn && dev.is_cuda()) c_dev = logn_c.value().to(dev).to(adt).contiguous();
  if (P.sink && dev.is_cpu()) ct.sink = terms.sink.value().to_vector();
  if (P.sink && dev.is_cuda()) z_dev = terms.sink.value().to(dev).to(adt).contiguous();
  ag::Variable fox_c;
  if (P.fox) {  // the CPU kernel computes in kdt, the CUDA kernels accumulate in adt
    const DType fdt = dev.is_cpu() ? kdt : adt;
    fox_c = ag::cumsum(terms.forget.dtype() == fdt ? terms.forget : ag::cast(terms.forget, fdt), 2);
    ct.fox_c = fox_c.value().contiguous();
  }

  Tensor out = Tensor::empty(qc.shape(), dt, dev);
  Tensor lse = Tensor::empty({P.B, P.H, P.Tq}, adt, dev);
  Tensor out_saved = out;  // the output backward reads (the f32 one for bf16 on CPU)
  if (empty) {
    out.fill_(0.0);
    lse.fill_(-std::numeric_limits<double>::infinity());
    if (P.sink)  // no key anywhere: every row's denominator is the sink alone
      lse = ops::add(Tensor::zeros({P.B, P.H, P.Tq}, adt, dev), terms.sink.value().to(dev).to(adt).view({1, P.H, 1}));
  } else if (dev.is_cpu()) {
    if (dt == DType::BF16) {  // compute in f32: convert in, round out once (lse stays f32)
      out_saved = Tensor::empty(qc.shape(), DType::F32);
      detail::cpu_forward(P, as_f32(qc), as_f32(kc), as_f32(vc), ct, out_saved, lse);
      out = out_saved.to(DType::BF16);
    } else {
      detail::cpu_forward(P, qc, kc, vc, ct, out, lse);
    }
  } else {
    detail::cuda_forward(P, use_tc, qc, kc, vc, c_dev, ct.fox_c, out, lse);
    if (P.sink) {
      fold_sink(z_dev, out, lse);
      out_saved = out;
    }
  }

  std::vector<ag::Variable> inputs{q, k, v};
  const bool with_c = logn && logn_c.defined();
  const int ic = with_c ? static_cast<int>(inputs.size()) : -1;
  if (with_c) inputs.push_back(logn_c);
  const int iz = P.sink ? static_cast<int>(inputs.size()) : -1;
  if (P.sink) inputs.push_back(terms.sink);
  const int ifx = P.fox ? static_cast<int>(inputs.size()) : -1;
  if (P.fox) inputs.push_back(fox_c);
  const DType c_dtype = with_c ? logn_c.dtype() : adt, z_dtype = P.sink ? terms.sink.dtype() : adt;
  const Device c_device = with_c ? logn_c.value().device() : dev, z_device = P.sink ? terms.sink.value().device() : dev;
  AttnOutput res;
  res.lse = lse;
  res.out = ag::make_result(out, inputs, "fused_attention", [&] {
    return [P, doc_bounds, use_tc, empty, qc, kc, vc, out = out_saved, lse, ct, c_dev, z_dev, ic, iz, ifx, c_dtype,
            c_device, z_dtype, z_device](const Tensor& g, ag::Grads& gr) {
      const Device dev = qc.device();
      const DType dt = qc.dtype();
      const Tensor gc = (g.dtype() == dt ? g : g.to(dt)).contiguous();
      Tensor dq = Tensor::empty(qc.shape(), dt, dev);
      Tensor dk = Tensor::empty(kc.shape(), dt, dev), dv = Tensor::empty(kc.shape(), dt, dev);
      const bool need_c = ic >= 0 && gr.needs(ic), need_z = iz >= 0 && gr.needs(iz), need_f = ifx >= 0 && gr.needs(ifx);
      Tensor dc, dz, df;
      if (empty) {
        dq.fill_(0.0);
        dk.fill_(0.0);
        dv.fill_(0.0);
        if (need_c) dc = Tensor::zeros({P.H}, c_dtype, c_device);
        if (need_z) dz = Tensor::zeros({P.H}, z_dtype, z_device);
        if (need_f) df = Tensor::zeros({P.B, P.H, P.Tk}, ct.fox_c.dtype(), dev);
      } else if (dev.is_cpu()) {
        std::vector<double> dcv, dzv;
        const bool f32 = dt == DType::BF16;  // computed in f32
        if (need_f) df = Tensor::empty({P.B, P.H, P.Tk}, f32 ? DType::F32 : dt);
        detail::CpuTermGrads tg;
        tg.logn_c = need_c ? &dcv : nullptr;
        tg.sink = need_z ? &dzv : nullptr;
        tg.fox_c = need_f ? &df : nullptr;
        if (f32) {
          Tensor dqf = Tensor::empty(qc.shape(), DType::F32), dkf = Tensor::empty(kc.shape(), DType::F32),
                 dvf = Tensor::empty(kc.shape(), DType::F32);
          detail::cpu_backward(P, as_f32(qc), as_f32(kc), as_f32(vc), out, lse, as_f32(gc), ct, dqf, dkf, dvf, tg);
          dq = dqf.to(dt);
          dk = dkf.to(dt);
          dv = dvf.to(dt);
        } else {
          detail::cpu_backward(P, qc, kc, vc, out, lse, gc, ct, dq, dk, dv, tg);
        }
        if (need_c) dc = Tensor::from_vector(dcv, {P.H}, c_dtype).to(c_device);
        if (need_z) dz = Tensor::from_vector(dzv, {P.H}, z_dtype).to(z_device);
      } else {
        Tensor dc_rows, dfq, dfk;
        detail::cuda_backward(P, use_tc, qc, kc, vc, out, lse, gc, c_dev, ct.fox_c, dq, dk, dv,
                              need_c ? &dc_rows : nullptr, need_f ? &dfq : nullptr, need_f ? &dfk : nullptr);
        if (need_f) {  // dLoss/dc_m = sum_j dL_mj (m a query's position) - sum_i dL_im
          Tensor rows = Tensor::zeros(dfk.shape(), dfk.dtype(), dev);
          rows.narrow(2, P.q_offset, P.Tq).copy_(dfq);
          df = ops::add(dfk, rows);
        }
        // per-row partials summed over rows, then over the batch, in a fixed order
        if (need_c) dc = ops::sum(ops::sum(dc_rows, 2, false), 0, false).to(c_dtype).to(c_device);
        if (need_z) dz = sink_grad(z_dev, lse, out, gc).to(z_dtype).to(z_device);
      }
      if (gr.needs(0)) gr.set(0, dq);
      if (gr.needs(1)) gr.set(1, dk);
      if (gr.needs(2)) gr.set(2, dv);
      if (need_c) gr.set(ic, dc);
      if (need_z) gr.set(iz, dz);
      if (need_f) gr.set(ifx, df);
    };
  });
  return res;
}

}  // namespace hz::attn
