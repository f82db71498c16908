// Horizon autograd: embedding, cross-entropy, RMSNorm (fused kernels from core/ops.h).
#include "autograd/functions.h"

#include <algorithm>

namespace hz::ag {

Variable embedding(const Variable& weight, const Tensor& ids) {
  const int64_t V = weight.size(0);
  return make_result(ops::embedding(weight.value(), ids), {weight}, "embedding", [=] {
    return [=](const Tensor& g, Grads& gr) { gr.set(0, ops::embedding_backward(g, ids, V)); };
  });
}

Variable cross_entropy(const Variable& logits, const Tensor& targets, const Tensor& weights,
                       int64_t ignore_index) {
  CrossEntropyResult r = ops::cross_entropy(logits.value(), targets, weights, ignore_index);
  return make_result(r.loss, {logits}, "cross_entropy", [&] {
    Tensor lv = logits.value(), lse = r.lse;
    const double wsum = r.weight_sum;
    return [=](const Tensor& g, Grads& gr) {
      gr.set(0, ops::cross_entropy_backward(lv, targets, weights, lse, wsum, ignore_index, g.item()));
    };
  });
}

Variable lm_head_loss(const Variable& h, const Variable& w, const Tensor& targets_in, const Tensor& weights_in,
                      int64_t chunk, int64_t ignore_index) {
  HZ_CHECK(h.dim() == 2 && w.dim() == 2 && h.size(1) == w.size(1), ShapeError, "lm_head_loss: h (N, C) and W (V, C), got ",
           shape_str(h.shape()), " and ", shape_str(w.shape()));
  const int64_t N = h.size(0);
  HZ_CHECK(targets_in.numel() == N && (!weights_in.defined() || weights_in.numel() == N), ShapeError,
           "lm_head_loss: ", N, " rows but ", targets_in.numel(), " targets");
  const Tensor hv = h.value().contiguous(), wv = w.value();
  const Tensor targets = targets_in.reshape({N}).to(hv.device());
  const Tensor weights = weights_in.defined() ? weights_in.reshape({N}).to(hv.device()) : Tensor();
  const int64_t step = loss_chunk_step(chunk, N);
  cpu::RowBlockedProducts blocked;  // chunks repeat the unchunked bits (core/device.h)
  // forward: the rows' f64 NLL, summed in row order with their weights (as ops::cross_entropy)
  const std::vector<double> tv = targets.to_vector();
  const std::vector<double> wgt = weights.defined() ? weights.to(DType::F64).to_vector() : std::vector<double>();
  double num = 0, den = 0;
  for (int64_t c0 = 0; c0 < N; c0 += step) {
    const int64_t c1 = std::min(N, c0 + step);
    const Tensor logits = ops::matmul(hv.slice(0, c0, c1), wv, false, true);
    const std::vector<double> nll = ops::cross_entropy_rows(logits, targets.slice(0, c0, c1), ignore_index).to_vector();
    for (int64_t r = c0; r < c1; ++r) {
      if (static_cast<int64_t>(tv[r]) == ignore_index) continue;
      const double wr = wgt.empty() ? 1.0 : wgt[r];
      num += wr * nll[r - c0];
      den += wr;
    }
  }
  const Tensor loss = Tensor::full({}, den > 0 ? num / den : 0.0, acc_dtype(hv.dtype()), hv.device());
  return make_result(loss, {h, w}, "lm_head_loss", [&] {
    return [hv, wv, targets, weights, den, step, ignore_index](const Tensor& g, Grads& gr) {
      const int64_t n = hv.size(0);
      const double gs = g.item();
      cpu::RowBlockedProducts blocked;
      Tensor dh = gr.needs(0) ? Tensor::empty(hv.shape(), hv.dtype(), hv.device()) : Tensor();
      Tensor dw = gr.needs(1) ? Tensor::zeros(wv.shape(), acc_dtype(wv.dtype()), wv.device()) : Tensor();
      for (int64_t c0 = 0; c0 < n; c0 += step) {
        const int64_t c1 = std::min(n, c0 + step);
        const Tensor hc = hv.slice(0, c0, c1), tc = targets.slice(0, c0, c1);
        const Tensor wc = weights.defined() ? weights.slice(0, c0, c1) : Tensor();
        const Tensor logits = ops::matmul(hc, wv, false, true);
        const Tensor lse = ops::cross_entropy(logits, tc, wc, ignore_index).lse;
        const Tensor dl = ops::cross_entropy_backward(logits, tc, wc, lse, den, ignore_index, gs);
        if (dh.defined()) dh.slice(0, c0, c1).copy_(ops::matmul(dl, wv));
        // dW: on the CPU over fixed slices (the same sums for every chunk), elsewhere one GEMM per
        // chunk (a GPU's GEMM rows depend on the row count anyway, and each slice's V x C partial
        // and its f32 sum are memory traffic: 256-row slices would cost more than the GEMMs)
        const int64_t slice = hv.device().is_cpu() ? kLossSlice : c1 - c0;
        if (dw.defined())
          for (int64_t s0 = c0; s0 < c1; s0 += slice) {
            const int64_t s1 = std::min(c1, s0 + slice);
            const Tensor part = ops::matmul(dl.slice(0, s0 - c0, s1 - c0), hv.slice(0, s0, s1), true, false);
            ops::add_(dw, part.dtype() == dw.dtype() ? part : part.to(dw.dtype()));
          }
      }
      if (dh.defined()) gr.set(0, dh);
      if (dw.defined()) gr.set(1, dw.dtype() == wv.dtype() ? dw : dw.to(wv.dtype()));
    };
  });
}

namespace {
// The "rms_norm" node over x (its value already computed: y and rstd).
Variable rms_norm_node(const Variable& x, const Variable& w, const ops::RmsNormResult& r) {
  const Tensor wv = w.defined() ? w.value() : Tensor();
  std::vector<Variable> inputs{x};
  if (w.defined()) inputs.push_back(w);
  return make_result(r.y, inputs, "rms_norm", [&] {
    Tensor xv = x.value(), rstd = r.rstd;
    return [=](const Tensor& g, Grads& gr) {
      const bool gw = wv.defined() && gr.needs(1);
      // the gradient x already has from its other consumers, added in the norm's pass
      const Tensor& waiting = gr.needs(0) ? gr.pending(0) : Tensor();
      const bool fold = waiting.defined() && waiting.shape() == xv.shape() && waiting.dtype() == xv.dtype() &&
                        waiting.device() == xv.device();
      ops::RmsNormGrads d = ops::rms_norm_backward(xv, wv, rstd, g, gr.needs(0), gw, fold ? waiting : Tensor());
      if (gr.needs(0)) {
        if (fold) gr.set_summed(0, d.gx);
        else gr.set(0, d.gx);
      }
      if (gw) gr.set(1, d.gw);
    };
  });
}
}  // namespace

Variable rms_norm(const Variable& x, const Variable& w, double eps) {
  return rms_norm_node(x, w, ops::rms_norm(x.value(), w.defined() ? w.value() : Tensor(), eps));
}

ResidualNorm add_rms_norm(const Variable& x, const Variable& r, const Variable& w, double eps) {
  if (x.shape() != r.shape() || x.dtype() != r.dtype() || x.value().device() != r.value().device()) {
    Variable sum = add(x, r);
    return {sum, rms_norm(sum, w, eps)};
  }
  const ops::RmsNormResult n = ops::rms_norm(x.value(), w.defined() ? w.value() : Tensor(), eps, r.value());
  // the add's node, as ag::add builds it (same shapes: the gradient passes to both inputs)
  Variable sum = make_result(n.sum, {x, r}, "add", [] {
    return [](const Tensor& g, Grads& gr) {
      if (gr.needs(0)) gr.set(0, g);
      if (gr.needs(1)) gr.set(1, g);
    };
  });
  return {sum, rms_norm_node(sum, w, n)};
}

}  // namespace hz::ag
