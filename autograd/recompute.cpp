#include "autograd/recompute.h"

namespace hz::ag {

Variable recompute(const RecomputeFn& fn, const std::vector<Variable>& inputs, const char* name) {
  bool any = false;
  for (const auto& x : inputs) any |= x.requires_grad();
  if (!grad_enabled() || !any) return fn(inputs);
  Tensor out;
  {
    NoGradGuard ng;
    out = fn(inputs).value();
  }
  std::vector<Tensor> saved;
  for (const auto& x : inputs) saved.push_back(x.value());
  return make_result(out, inputs, name, [&] {
    return [fn, saved](const Tensor& g, Grads& gr) {
      EnableGradGuard eg;  // the engine runs backward functions without recording
      std::vector<Variable> xs;
      for (size_t i = 0; i < saved.size(); ++i) xs.emplace_back(saved[i], gr.needs(i));
      const Variable y = fn(xs);
      if (y.requires_grad()) y.backward(g);
      for (size_t i = 0; i < xs.size(); ++i)
        if (gr.needs(i) && xs[i].grad().defined()) gr.set(i, xs[i].grad());
    };
  });
}

}  // namespace hz::ag
