// Horizon autograd: matrix products.
//   C = alpha op(A) op(B)
//   dA = alpha gC op(B)^T        (transposed back when trans_a)
//   dB = alpha op(A)^T gC        (transposed back when trans_b)
// Batch dims that were broadcast are summed away. A 2-D B shared by a batch of A gets its
// gradient from one GEMM over the folded batch instead of a batched GEMM and a sum.
#include "autograd/functions.h"

namespace hz::ag {

Variable matmul(const Variable& a, const Variable& b, bool ta, bool tb, double alpha) {
  return make_result(ops::matmul(a.value(), b.value(), ta, tb, alpha), {a, b}, "matmul", [&] {
    Tensor av = b.requires_grad() ? a.value() : Tensor();
    Tensor bv = a.requires_grad() ? b.value() : Tensor();
    Shape sa = a.shape(), sb = b.shape();
    return [=](const Tensor& g, Grads& gr) {
      if (gr.needs(0)) {
        Tensor ga = ta ? ops::matmul(bv, g, tb, true, alpha) : ops::matmul(g, bv, false, !tb, alpha);
        gr.set(0, ops::sum_to_shape(ga, sa));
      }
      if (gr.needs(1)) {
        Tensor gb;
        if (sb.size() == 2 && sa.size() > 2 && !ta) {
          const Tensor a2 = av.reshape({-1, sa.back()});
          const Tensor g2 = g.reshape({-1, g.size(-1)});
          gb = tb ? ops::matmul(g2, a2, true, false, alpha) : ops::matmul(a2, g2, true, false, alpha);
        } else {
          gb = tb ? ops::matmul(g, av, true, ta, alpha) : ops::matmul(av, g, !ta, false, alpha);
        }
        gr.set(1, ops::sum_to_shape(gb, sb));
      }
    };
  });
}

Variable linear(const Variable& x, const Variable& w, const Variable& b) {
  HZ_CHECK(w.dim() == 2 && x.size(-1) == w.size(1), ShapeError, "linear: input ",
           shape_str(x.shape()), " does not match weight (out, in) = ", shape_str(w.shape()));
  Variable y = matmul(x, w, false, true);
  if (b.defined()) {
    HZ_CHECK(b.dim() == 1 && b.size(0) == w.size(0), ShapeError, "linear: bias ",
             shape_str(b.shape()), " must be (", w.size(0), ")");
    y = add(y, b);
  }
  return y;
}

}  // namespace hz::ag
