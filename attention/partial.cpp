// Horizon: attention in parts (see partial.h): the combine and the sink. The parts themselves are
// the fused op's calls (fused.cpp, partial_attention).
#include "attention/partial.h"

#include "core/ops.h"

namespace hz::attn {

void combine_partial(Tensor acc_out, Tensor acc_lse, const Tensor& out, const Tensor& lse) {
  const DType adt = acc_lse.dtype();
  const Device dev = acc_lse.device();
  // m is -1e30 rather than -inf for rows that saw no key yet, so no inf - inf: their weights are
  // 0 and 0, and the denominator max(w_a + w_b, 1) (>= 1 whenever either side is finite) keeps 0
  const Tensor m = ops::binary(BinaryOp::Maximum, ops::binary(BinaryOp::Maximum, acc_lse, lse),
                               Tensor::full({1}, -1e30, adt, dev));
  const Tensor wa = ops::unary(UnaryOp::Exp, ops::sub(acc_lse, m)), wb = ops::unary(UnaryOp::Exp, ops::sub(lse, m));
  const Tensor den = ops::add(wa, wb);
  const Tensor safe = ops::binary(BinaryOp::Maximum, den, Tensor::full({1}, 1.0, adt, dev));
  const Tensor num = ops::add(ops::mul(acc_out, wa.unsqueeze(3)), ops::mul(out, wb.unsqueeze(3)));
  acc_out.copy_(ops::div(num, safe.unsqueeze(3)));
  acc_lse.copy_(ops::add(m, ops::unary(UnaryOp::Log, den)));
}

// Around the CUDA reference kernels (fused.cpp) and after the ring's combine (the CPU and
// tensor-core kernels fold the sink into their epilogue and give its gradient from their
// backward's D_i pass).
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

}  // namespace hz::attn
