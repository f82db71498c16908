// Horizon autograd: views. Forward shares storage; backward maps the gradient back to the
// input's shape (reshape back, inverse permutation, zero-padding for narrow/slice, sum for
// expand).
#include <algorithm>

#include "autograd/functions.h"

namespace hz::ag {

Variable reshape(const Variable& x, const Shape& shape) {
  Shape in = x.shape();
  return make_result(x.value().reshape(shape), {x}, "reshape", [=] {
    return [=](const Tensor& g, Grads& gr) { gr.set(0, g.reshape(in)); };
  });
}

Variable transpose(const Variable& x, int64_t d0, int64_t d1) {
  return make_result(x.value().transpose(d0, d1), {x}, "transpose", [=] {
    return [=](const Tensor& g, Grads& gr) { gr.set(0, g.transpose(d0, d1)); };
  });
}

Variable permute(const Variable& x, const std::vector<int64_t>& dims) {
  Tensor out = x.value().permute(dims);
  return make_result(out, {x}, "permute", [&] {
    std::vector<int64_t> inv(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) inv[x.value().normalize_dim(dims[i])] = static_cast<int64_t>(i);
    return [=](const Tensor& g, Grads& gr) { gr.set(0, g.permute(inv)); };
  });
}

// Gradient of a strided sub-view: zeros of the input's shape with g written into the view.
static BackwardFn scatter_into_view(const Shape& in_shape, std::function<Tensor(const Tensor&)> view_of) {
  return [=](const Tensor& g, Grads& gr) {
    Tensor z = Tensor::zeros(in_shape, g.dtype(), g.device());
    Tensor v = view_of(z);
    v.copy_(g);
    gr.set(0, z);
  };
}

Variable narrow(const Variable& x, int64_t dim, int64_t start, int64_t length) {
  return make_result(x.value().narrow(dim, start, length), {x}, "narrow", [&] {
    return scatter_into_view(x.shape(), [=](const Tensor& t) { return t.narrow(dim, start, length); });
  });
}

Variable slice(const Variable& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  return make_result(x.value().slice(dim, start, end, step), {x}, "slice", [&] {
    return scatter_into_view(x.shape(), [=](const Tensor& t) { return t.slice(dim, start, end, step); });
  });
}

Variable expand(const Variable& x, const Shape& shape) {
  Shape in = x.shape();
  return make_result(x.value().expand(shape), {x}, "expand", [=] {
    return [=](const Tensor& g, Grads& gr) { gr.set(0, ops::sum_to_shape(g, in)); };
  });
}

Variable unsqueeze(const Variable& x, int64_t dim) {
  Tensor out = x.value().unsqueeze(dim);
  const int64_t d = dim < 0 ? dim + out.dim() : dim;
  return make_result(out, {x}, "unsqueeze", [=] {
    return [=](const Tensor& g, Grads& gr) { gr.set(0, g.squeeze(d)); };
  });
}

Variable squeeze(const Variable& x, int64_t dim) {
  const int64_t d = x.value().normalize_dim(dim);
  return make_result(x.value().squeeze(d), {x}, "squeeze", [=] {
    return [=](const Tensor& g, Grads& gr) { gr.set(0, g.unsqueeze(d)); };
  });
}

Variable contiguous(const Variable& x) {
  return make_result(x.value().contiguous(), {x}, "contiguous", [] {
    return [](const Tensor& g, Grads& gr) { gr.set(0, g); };
  });
}

Variable cast(const Variable& x, DType dt) {
  if (!x.defined() || x.dtype() == dt) return x;
  const DType from = x.dtype();
  return make_result(x.value().to(dt), {x}, "cast", [=] {
    return [=](const Tensor& g, Grads& gr) { gr.set(0, g.to(from)); };
  });
}

Variable cat(const std::vector<Variable>& xs, int64_t dim) {
  HZ_CHECK(!xs.empty(), ValueError, "cat of an empty list");
  const Tensor& first = xs[0].value();
  const int64_t d = first.normalize_dim(dim);
  Shape out_shape = first.shape();
  out_shape[d] = 0;
  std::vector<int64_t> sizes;
  for (const auto& x : xs) {
    HZ_CHECK(x.dim() == first.dim(), ShapeError, "cat: all inputs need ", first.dim(), " dims");
    for (int64_t i = 0; i < first.dim(); ++i)
      HZ_CHECK(i == d || x.size(i) == first.size(i), ShapeError, "cat: shape ",
               shape_str(x.shape()), " does not match ", shape_str(first.shape()),
               " outside dim ", d);
    sizes.push_back(x.size(d));
    out_shape[d] += x.size(d);
  }
  Tensor out = Tensor::empty(out_shape, first.dtype(), first.device());
  int64_t off = 0;
  for (const auto& x : xs) {
    out.narrow(d, off, x.size(d)).copy_(x.value());
    off += x.size(d);
  }
  return make_result(out, xs, "cat", [=] {
    return [=](const Tensor& g, Grads& gr) {
      int64_t o = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        if (gr.needs(i)) gr.set(i, g.narrow(d, o, sizes[i]));
        o += sizes[i];
      }
    };
  });
}

}  // namespace hz::ag
