// Horizon autograd: embedding, cross-entropy, RMSNorm (fused kernels from core/ops.h).
#include "autograd/functions.h"

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

Variable rms_norm(const Variable& x, const Variable& w, double eps) {
  const Tensor wv = w.defined() ? w.value() : Tensor();
  ops::RmsNormResult r = ops::rms_norm(x.value(), wv, eps);
  std::vector<Variable> inputs{x};
  if (w.defined()) inputs.push_back(w);
  return make_result(r.y, inputs, "rms_norm", [&] {
    Tensor xv = x.value(), rstd = r.rstd;
    return [=](const Tensor& g, Grads& gr) {
      const bool gw = wv.defined() && gr.needs(1);
      ops::RmsNormGrads d = ops::rms_norm_backward(xv, wv, rstd, g, gr.needs(0), gw);
      if (gr.needs(0)) gr.set(0, d.gx);
      if (gw) gr.set(1, d.gw);
    };
  });
}

}  // namespace hz::ag
