// Horizon autograd: reductions and the softmax family.
#include "autograd/functions.h"

namespace hz::ag {

// Expand a reduced gradient (keepdim or not) back over `dim` of `in`.
static Tensor unreduce(const Tensor& g, const Shape& in, int64_t dim, bool keepdim) {
  Tensor gk = keepdim ? g : g.unsqueeze(dim);
  return gk.expand(in);
}

Variable cumsum(const Variable& x, int64_t dim) {
  const int64_t d = x.value().normalize_dim(dim);
  return make_result(ops::cumsum(x.value(), d), {x}, "cumsum", [=] {
    return [=](const Tensor& g, Grads& gr) { gr.set(0, ops::cumsum(g, d, /*reverse=*/true)); };
  });
}

Variable sum(const Variable& x, int64_t dim, bool keepdim) {
  const int64_t d = x.value().normalize_dim(dim);
  Shape in = x.shape();
  return make_result(ops::sum(x.value(), d, keepdim), {x}, "sum", [=] {
    return [=](const Tensor& g, Grads& gr) { gr.set(0, unreduce(g, in, d, keepdim)); };
  });
}

Variable mean(const Variable& x, int64_t dim, bool keepdim) {
  const int64_t d = x.value().normalize_dim(dim);
  Shape in = x.shape();
  const double n = static_cast<double>(in[d]);
  return make_result(ops::mean(x.value(), d, keepdim), {x}, "mean", [=] {
    return [=](const Tensor& g, Grads& gr) {
      gr.set(0, unreduce(ops::mul_scalar(g, 1.0 / n), in, d, keepdim));
    };
  });
}

Variable max(const Variable& x, int64_t dim, bool keepdim) {
  const int64_t d = x.value().normalize_dim(dim);
  MaxResult r = ops::max(x.value(), d, keepdim);
  Shape in = x.shape();
  return make_result(r.values, {x}, "max", [&] {
    Tensor idx = r.indices;
    return [=](const Tensor& g, Grads& gr) { gr.set(0, ops::scatter_dim(g, idx, d, in)); };
  });
}

Variable sum_all(const Variable& x) {
  Shape in = x.shape();
  return make_result(ops::sum_all(x.value()), {x}, "sum_all", [=] {
    return [=](const Tensor& g, Grads& gr) { gr.set(0, g.expand(in)); };
  });
}

Variable mean_all(const Variable& x) {
  Shape in = x.shape();
  const double n = static_cast<double>(shape_numel(in));
  return make_result(ops::mean_all(x.value()), {x}, "mean_all", [=] {
    return [=](const Tensor& g, Grads& gr) { gr.set(0, ops::mul_scalar(g, 1.0 / n).expand(in)); };
  });
}

Variable softmax(const Variable& x, int64_t dim) {
  Tensor y = ops::softmax(x.value(), dim);
  return make_result(y, {x}, "softmax", [=] {
    return [=](const Tensor& g, Grads& gr) { gr.set(0, ops::softmax_backward(y, g, dim)); };
  });
}

Variable log_softmax(const Variable& x, int64_t dim) {
  Tensor y = ops::log_softmax(x.value(), dim);
  return make_result(y, {x}, "log_softmax", [=] {
    return [=](const Tensor& g, Grads& gr) { gr.set(0, ops::log_softmax_backward(y, g, dim)); };
  });
}

}  // namespace hz::ag
