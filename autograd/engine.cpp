// Horizon: the backward engine. Iterative topological walk with dependency counts: a node runs
// once every consumer of its output has contributed its gradient. Gradients of one node are
// summed in a fixed order (the order consumers run), so results are deterministic.
#include <unordered_map>

#include "autograd/variable.h"
#include "core/ops.h"

namespace hz::ag {

namespace {
thread_local std::vector<std::string>* backward_trace = nullptr;
// Later gradients add into a leaf's grad in place, so its buffer must be its own: the first one is
// kept as it is when nothing else can see its storage (a whole, contiguous, fresh result with one
// owner: most op backwards return one), else copied. Saves a full copy of every parameter's (and
// an attention benchmark's q/k/v) gradient per backward.
void accumulate(Tensor& dst, Tensor&& g) {
  if (dst.defined()) {
    ops::add_(dst, g);
    return;
  }
  const bool sole = g.is_contiguous() && g.offset() == 0 && g.storage() && g.storage().use_count() == 1 &&
                    g.storage()->bytes() == static_cast<size_t>(g.numel()) * dtype_size(g.dtype());
  dst = sole ? std::move(g) : (g.is_contiguous() ? g.clone() : g.contiguous());
}
}  // namespace

void set_backward_trace(std::vector<std::string>* trace) { backward_trace = trace; }

void Grads::set_summed(size_t i, Tensor total) {
  HZ_CHECK(pending_[i] != nullptr, ValueError, "internal: set_summed for input ", i, ", which has no pending gradient");
  out_[i] = std::move(total);
  summed_[i] = true;
}

void Variable::backward(const Tensor& grad_in, bool retain_graph) const {
  HZ_CHECK(impl_ && impl_->requires_grad, ValueError,
           "backward() on a Variable that does not require grad (no input had requires_grad, or "
           "it was computed under NoGradGuard)");
  Tensor seed = grad_in;
  if (!seed.defined()) {
    HZ_CHECK(numel() == 1, ShapeError, "backward() without a gradient needs a single-element "
             "output; got shape ", shape_str(shape()), ". Pass the output gradient explicitly");
    seed = Tensor::ones(shape(), dtype(), value().device());
  }
  HZ_CHECK(seed.shape() == shape(), ShapeError, "backward(): gradient shape ",
           shape_str(seed.shape()), " != output shape ", shape_str(shape()));
  if (!impl_->grad_fn) {  // a leaf: its gradient is the seed
    accumulate(impl_->grad, std::move(seed));
    return;
  }
  NoGradGuard no_grad;  // backward functions compute on Tensors; never record

  // 1. dependency counts over the reachable graph (iterative DFS)
  std::unordered_map<Node*, int> deps;
  std::unordered_map<VariableImpl*, int> leaf_uses;  // edges into each leaf (for grad-ready hooks)
  std::vector<Node*> stack{impl_->grad_fn.get()};
  deps[impl_->grad_fn.get()] = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->edges) {
      if (e.leaf) ++leaf_uses[e.leaf.get()];
      if (!e.node) continue;
      auto it = deps.find(e.node.get());
      if (it == deps.end()) {
        deps[e.node.get()] = 1;
        stack.push_back(e.node.get());
      } else {
        ++it->second;
      }
    }
  }
  // 2. run nodes whose consumers are all done
  std::unordered_map<Node*, Tensor> pending;
  pending[impl_->grad_fn.get()] = seed;
  std::vector<std::shared_ptr<Node>> ready{impl_->grad_fn};
  while (!ready.empty()) {
    std::shared_ptr<Node> n = std::move(ready.back());
    ready.pop_back();
    Tensor gout = std::move(pending[n.get()]);
    pending.erase(n.get());
    HZ_CHECK(n->backward, ValueError, "backward through '", n->name,
             "' a second time: its saved tensors were freed; pass retain_graph=true to the first "
             "backward()");
    HZ_CHECK(gout.shape() == n->out_shape, ShapeError, "internal: gradient for '", n->name,
             "' has shape ", shape_str(gout.shape()), ", expected ", shape_str(n->out_shape));
    // the gradients already waiting for this node's inputs (none for a producer it feeds twice)
    std::vector<const Tensor*> waiting(n->edges.size(), nullptr);
    for (size_t i = 0; i < n->edges.size(); ++i) {
      Node* p = n->edges[i].node.get();
      if (!p) continue;
      bool twice = false;
      for (size_t j = 0; j < n->edges.size(); ++j) twice |= j != i && n->edges[j].node.get() == p;
      auto it = pending.find(p);
      if (!twice && it != pending.end()) waiting[i] = &it->second;
    }
    Grads g(n->edges, std::move(waiting));
    if (backward_trace) backward_trace->push_back(n->name);
    n->backward(gout, g);
    if (!retain_graph) n->backward = nullptr;  // free saved tensors now
    for (size_t i = 0; i < n->edges.size(); ++i) {
      const Edge& e = n->edges[i];
      if (!e.active()) continue;
      Tensor& gi = g.out()[i];
      HZ_CHECK(gi.defined(), ValueError, "internal: '", n->name, "' produced no gradient for input ",
               i);
      if (e.leaf) {
        HZ_CHECK(gi.shape() == e.leaf->value.shape(), ShapeError, "internal: '", n->name,
                 "' gradient for input ", i, " has shape ", shape_str(gi.shape()), ", expected ",
                 shape_str(e.leaf->value.shape()));
        // gradients accumulate in the parameter's own dtype (f32 master weights under bf16 compute)
        accumulate(e.leaf->grad, gi.dtype() == e.leaf->value.dtype() ? std::move(gi) : gi.to(e.leaf->value.dtype()));
        if (--leaf_uses[e.leaf.get()] == 0 && e.leaf->grad_ready_hook) e.leaf->grad_ready_hook();
      } else {
        auto it = pending.find(e.node.get());
        if (it == pending.end()) pending.emplace(e.node.get(), std::move(gi));
        else if (g.summed(i)) it->second = std::move(gi);  // the backward added the pending gradient itself
        else it->second = ops::add(it->second, gi);  // out of place: gi may alias other grads
        if (--deps[e.node.get()] == 0) ready.push_back(e.node);
      }
    }
  }
}

}  // namespace hz::ag
