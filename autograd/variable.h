// Horizon: reverse-mode autograd.
//
// A Variable holds a value Tensor, an accumulated grad, requires_grad and (for results of
// differentiable ops) the Node that produced it. A Node holds one backward function and one
// Edge per input: the producer Node of a non-leaf input, or the leaf's impl (where .grad
// accumulates), or nothing when that input needs no gradient. Nodes capture only the Tensors
// their backward needs, never Variables, so the graph has no cycles; backward() frees those
// captures as soon as each Node has run. The walk is iterative (no recursion), and so is the
// destruction of long chains.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace hz::ag {

struct Node;
struct VariableImpl;

struct Edge {
  std::shared_ptr<Node> node;          // producer of a non-leaf input
  std::shared_ptr<VariableImpl> leaf;  // leaf input that requires grad
  bool active() const { return node || leaf; }
};

// What a backward function receives: which inputs want a gradient, and where to put it.
//
// pending(i) is the gradient that input i's other consumers have already given it (the engine sums
// the gradients of a node's consumers in the order they run), or an undefined tensor: a leaf, an
// input no other consumer has reached yet, or a producer that feeds this node twice. A backward
// that can add it to its own gradient in the same pass (the residual stream's norms: ops::
// rms_norm_backward's gres) hands the total over with set_summed, and the engine keeps that instead
// of adding the two. Read-only: pending gradients may be shared with other nodes' inputs.
class Grads {
 public:
  explicit Grads(const std::vector<Edge>& edges, std::vector<const Tensor*> pending = {})
      : edges_(edges), out_(edges.size()), pending_(std::move(pending)), summed_(edges.size(), false) {
    pending_.resize(edges.size(), nullptr);
  }
  bool needs(size_t i) const { return edges_[i].active(); }
  void set(size_t i, Tensor g) { out_[i] = std::move(g); }
  const Tensor& pending(size_t i) const { return pending_[i] ? *pending_[i] : none_; }
  void set_summed(size_t i, Tensor total);  // total = pending(i) + this node's gradient
  bool summed(size_t i) const { return summed_[i]; }
  std::vector<Tensor>& out() { return out_; }

 private:
  const std::vector<Edge>& edges_;
  std::vector<Tensor> out_;
  std::vector<const Tensor*> pending_;
  std::vector<bool> summed_;
  Tensor none_;
};

using BackwardFn = std::function<void(const Tensor& gout, Grads& g)>;

struct Node {
  const char* name = "";
  std::vector<Edge> edges;
  BackwardFn backward;
  Shape out_shape;  // shape of the output gradient this node expects
  ~Node();          // releases long chains iteratively
};

struct VariableImpl {
  Tensor value;
  Tensor grad;
  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;
  std::string name;
  // Called during backward() the moment this leaf's gradient for that pass is complete (every
  // node that feeds it has run): data-parallel training starts its all-reduce there.
  std::function<void()> grad_ready_hook;
};

class Variable {
 public:
  Variable() = default;
  explicit Variable(Tensor value, bool requires_grad = false, std::string name = "");

  bool defined() const { return impl_ != nullptr; }
  const Tensor& value() const { return impl_->value; }
  Tensor& value() { return impl_->value; }
  const Tensor& grad() const { return impl_->grad; }
  Tensor& grad() { return impl_->grad; }
  bool requires_grad() const { return impl_ && impl_->requires_grad; }
  void set_requires_grad(bool r);
  const std::shared_ptr<Node>& grad_fn() const { return impl_->grad_fn; }
  const std::string& name() const { return impl_->name; }
  const std::shared_ptr<VariableImpl>& impl() const { return impl_; }

  const Shape& shape() const { return impl_->value.shape(); }
  int64_t size(int64_t d) const { return impl_->value.size(d); }
  int64_t dim() const { return impl_->value.dim(); }
  int64_t numel() const { return impl_->value.numel(); }
  DType dtype() const { return impl_->value.dtype(); }
  double item() const { return impl_->value.item(); }

  // Backpropagate from this Variable. Without `grad`, it must hold one element (seed 1).
  // retain_graph keeps the saved tensors so backward can run again.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  void zero_grad();  // drops .grad (it is re-created on the next accumulation)
  Variable detach() const;  // same value, no history, no grad

 private:
  std::shared_ptr<VariableImpl> impl_;
};

// Disables graph recording in its scope (thread-local); nests.
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};
// Re-enables recording in its scope (a recomputation inside a backward function).
class EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};
bool grad_enabled();

// While set (thread-local; null ends it), every backward on this thread appends the name of each
// node it runs, in the order it runs them. That order is the order in which gradient hooks fire
// and a backward's collectives are posted, which NCCL needs to be the same on every rank: the
// context-parallel tests compare it across ranks.
void set_backward_trace(std::vector<std::string>* trace);

// Used by op implementations: wraps `value` as the output of a differentiable op over `inputs`.
// When recording is on and any input requires grad, builds the Node; `make_backward` is only
// called in that case (so forward-only calls capture nothing).
Variable make_result(Tensor value, const std::vector<Variable>& inputs, const char* name,
                     const std::function<BackwardFn()>& make_backward);

}  // namespace hz::ag
