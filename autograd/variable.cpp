#include "autograd/variable.h"

namespace hz::ag {

namespace {
thread_local bool g_grad_enabled = true;
}
bool grad_enabled() { return g_grad_enabled; }
NoGradGuard::NoGradGuard() : prev_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = prev_; }
EnableGradGuard::EnableGradGuard() : prev_(g_grad_enabled) { g_grad_enabled = true; }
EnableGradGuard::~EnableGradGuard() { g_grad_enabled = prev_; }

Node::~Node() {
  // Destroying a 100,000-node chain recursively would overflow the stack: steal the edges of
  // every node that is about to die and release them from a local worklist instead.
  std::vector<std::shared_ptr<Node>> stack;
  for (auto& e : edges)
    if (e.node) stack.push_back(std::move(e.node));
  edges.clear();
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    if (n.use_count() == 1) {
      for (auto& e : n->edges)
        if (e.node) stack.push_back(std::move(e.node));
      n->edges.clear();
    }
    // n dies here with no node edges left, so its destructor does not recurse
  }
}

Variable::Variable(Tensor value, bool requires_grad, std::string name)
    : impl_(std::make_shared<VariableImpl>()) {
  impl_->value = std::move(value);
  impl_->name = std::move(name);
  set_requires_grad(requires_grad);
}

void Variable::set_requires_grad(bool r) {
  HZ_CHECK(impl_, ValueError, "set_requires_grad on an undefined Variable");
  HZ_CHECK(!r || is_floating(impl_->value.dtype()), DTypeError,
           "only floating tensors can require grad, got ", dtype_name(impl_->value.dtype()));
  HZ_CHECK(r || !impl_->grad_fn, ValueError,
           "cannot clear requires_grad on a non-leaf Variable; use detach()");
  impl_->requires_grad = r;
}

void Variable::zero_grad() { impl_->grad = Tensor(); }

Variable Variable::detach() const { return Variable(impl_->value, false, impl_->name); }

Variable make_result(Tensor value, const std::vector<Variable>& inputs, const char* name,
                     const std::function<BackwardFn()>& make_backward) {
  Variable out(std::move(value));
  if (!grad_enabled()) return out;
  bool any = false;
  for (const auto& v : inputs) any |= v.requires_grad();
  if (!any) return out;
  auto node = std::make_shared<Node>();
  node->name = name;
  node->out_shape = out.shape();
  node->edges.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Variable& v = inputs[i];
    if (!v.requires_grad()) continue;
    if (v.grad_fn()) node->edges[i].node = v.grad_fn();
    else node->edges[i].leaf = v.impl();
  }
  node->backward = make_backward();
  out.impl()->requires_grad = true;
  out.impl()->grad_fn = std::move(node);
  return out;
}

}  // namespace hz::ag
