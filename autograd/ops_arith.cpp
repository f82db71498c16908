// Horizon autograd: elementwise arithmetic. Broadcasting binary ops reduce each input's
// gradient back to its own shape (ops::sum_to_shape).
#include "autograd/functions.h"

namespace hz::ag {

Variable add(const Variable& a, const Variable& b) {
  Shape sa = a.shape(), sb = b.shape();
  return make_result(ops::add(a.value(), b.value()), {a, b}, "add", [=] {
    return [=](const Tensor& g, Grads& gr) {
      if (gr.needs(0)) gr.set(0, ops::sum_to_shape(g, sa));
      if (gr.needs(1)) gr.set(1, ops::sum_to_shape(g, sb));
    };
  });
}

Variable swiglu(const Variable& a, const Variable& b) {
  if (a.shape() != b.shape()) return mul(unary(UnaryOp::Silu, a), b);  // broadcasting: the two ops
  return make_result(ops::swiglu(a.value(), b.value()), {a, b}, "swiglu", [&] {
    Tensor av = a.value(), bv = b.value();
    return [=](const Tensor& g, Grads& gr) {
      ops::SwiGluGrads d = ops::swiglu_backward(av, bv, g, gr.needs(0), gr.needs(1));
      if (gr.needs(0)) gr.set(0, d.da);
      if (gr.needs(1)) gr.set(1, d.db);
    };
  });
}

Variable sub(const Variable& a, const Variable& b) {
  Shape sa = a.shape(), sb = b.shape();
  return make_result(ops::sub(a.value(), b.value()), {a, b}, "sub", [=] {
    return [=](const Tensor& g, Grads& gr) {
      if (gr.needs(0)) gr.set(0, ops::sum_to_shape(g, sa));
      if (gr.needs(1)) gr.set(1, ops::sum_to_shape(ops::mul_scalar(g, -1.0), sb));
    };
  });
}

Variable mul(const Variable& a, const Variable& b) {
  return make_result(ops::mul(a.value(), b.value()), {a, b}, "mul", [&] {
    // save only what the backward needs: a's value for b's gradient and vice versa
    Tensor av = b.requires_grad() ? a.value() : Tensor();
    Tensor bv = a.requires_grad() ? b.value() : Tensor();
    Shape sa = a.shape(), sb = b.shape();
    return [=](const Tensor& g, Grads& gr) {
      if (gr.needs(0)) gr.set(0, ops::sum_to_shape(ops::mul(g, bv), sa));
      if (gr.needs(1)) gr.set(1, ops::sum_to_shape(ops::mul(g, av), sb));
    };
  });
}

Variable div(const Variable& a, const Variable& b) {
  Tensor out = ops::div(a.value(), b.value());
  return make_result(out, {a, b}, "div", [&] {
    Tensor bv = b.value(), q = b.requires_grad() ? out : Tensor();
    Shape sa = a.shape(), sb = b.shape();
    return [=](const Tensor& g, Grads& gr) {
      Tensor gb = ops::div(g, bv);  // d/da = g / b ; d/db = -g * (a/b) / b
      if (gr.needs(0)) gr.set(0, ops::sum_to_shape(gb, sa));
      if (gr.needs(1)) gr.set(1, ops::sum_to_shape(ops::mul_scalar(ops::mul(gb, q), -1.0), sb));
    };
  });
}

Variable add_scalar(const Variable& x, double s) {
  return make_result(ops::add_scalar(x.value(), s), {x}, "add_scalar", [] {
    return [](const Tensor& g, Grads& gr) { gr.set(0, g); };
  });
}

Variable mul_scalar(const Variable& x, double s) {
  return make_result(ops::mul_scalar(x.value(), s), {x}, "mul_scalar", [=] {
    return [=](const Tensor& g, Grads& gr) { gr.set(0, ops::mul_scalar(g, s)); };
  });
}

Variable pow_scalar(const Variable& x, double p) {
  return make_result(ops::pow_scalar(x.value(), p), {x}, "pow_scalar", [&] {
    Tensor xv = x.value();
    return [=](const Tensor& g, Grads& gr) {  // p * x^(p-1) * g
      gr.set(0, ops::mul(g, ops::mul_scalar(ops::pow_scalar(xv, p - 1.0), p)));
    };
  });
}

Variable unary(UnaryOp op, const Variable& x) {
  return make_result(ops::unary(op, x.value()), {x}, unary_op_name(op), [&] {
    Tensor xv = x.value();
    return [=](const Tensor& g, Grads& gr) { gr.set(0, ops::unary_backward(op, xv, g)); };
  });
}

}  // namespace hz::ag
