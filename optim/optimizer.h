// Horizon: optimizers (docs/methods.md, "Optimizers"): AdamW, Muon, and a composite that steps several.
//
// Parameters come in named groups, each with its own lr and weight decay; step(lr_mult) uses
// lr = group.lr * lr_mult (the schedule's multiplier) and each parameter's .grad(). A parameter
// whose grad is undefined is skipped entirely that step (no decay, no state change); the step
// counter still advances (it counts calls to step(), and AdamW's bias correction uses it).
//
// Decoupled weight decay is applied BEFORE the update, in both optimizers:
//   p <- p * (1 - lr * wd);  p <- p - lr * update
// (the same order as PyTorch's AdamW; the two orders differ by lr^2 * wd * update).
//
// Parameters must be f32 or f64 (keep bf16 master weights in f32). Optimizer state lives on the
// parameter's device in the parameter's dtype; the per-element arithmetic is double (core/math.h,
// the same on every device). AdamW updates every parameter in one multi-tensor launch per device
// (ops::adamw_multi_update_, core/multi_tensor.h); Muon one momentum kernel per matrix before its
// Newton-Schulz products.
//
// State dict keys: "<name()>/<param name>/<buffer>" and "<name()>/step" (I64, shape ()).
// Buffers: AdamW "exp_avg", "exp_avg_sq"; Muon "momentum_buffer". State is allocated (zeros)
// at construction, so the key set never depends on which steps have run.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/variable.h"
#include "core/tensor.h"

namespace hz::optim {

using NamedParams = std::vector<std::pair<std::string, ag::Variable*>>;

struct ParamGroup {
  std::string name;
  NamedParams params;
  double lr = 1e-3;
  double weight_decay = 0.0;
};

class Optimizer {
 public:
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  virtual std::string name() const = 0;
  // One update of every parameter that has a grad; lr_mult >= 0 scales every group's lr.
  // grad_scale in (0, 1] is the gradient clip's factor (optim::clip_factor): the update reads each
  // gradient element as g * grad_scale rounded to the gradient's dtype, the value clip_grad_norm's
  // in-place scaling would have left there, without that extra pass over the gradients (which stay
  // as they are).
  virtual void step(double lr_mult = 1.0, double grad_scale = 1.0) = 0;
  // Adds this optimizer's state (copies, not views) to `out`.
  virtual void state_dict(std::map<std::string, Tensor>& out) const;
  // Throws ValueError naming the key when a key this optimizer needs is missing, has the wrong
  // shape, or when `in` holds a key under "<name()>/" that this optimizer does not know (state
  // of a different model). Keys under other prefixes are ignored. Nothing is loaded on error.
  virtual void check_state_dict(const std::map<std::string, Tensor>& in) const;
  // check_state_dict, then copies every buffer (converting dtype) and the step counter.
  virtual void load_state_dict(const std::map<std::string, Tensor>& in);
  virtual void zero_grad();  // drops the grad of every parameter

  int64_t step_count() const { return step_; }
  std::vector<ParamGroup>& groups() { return groups_; }
  const std::vector<ParamGroup>& groups() const { return groups_; }

 protected:
  explicit Optimizer(std::vector<ParamGroup> groups) : groups_(std::move(groups)) {}
  // One state tensor per (parameter, buffer), in the order of the groups' parameters.
  struct ParamState {
    std::string name;        // parameter name
    ag::Variable* var = nullptr;
    size_t group = 0;
    std::vector<std::pair<std::string, Tensor>> buffers;  // host, param dtype, param shape
  };
  // Checks names (non-empty, unique), pointers (non-null, defined, not repeated), dtypes (f32 or
  // f64), lr and decay (finite, >= 0), then creates the zero buffers. Called from the subclass
  // constructor body, where name() already answers for the subclass.
  void init_state(const std::vector<std::string>& buffer_names);
  std::string key(const ParamState& s, const std::string& buffer) const;
  std::string step_key() const { return name() + "/step"; }
  // Advances the step counter, then calls f(state, lr, decay) for every parameter that has a
  // gradient, with lr = group lr * lr_mult and decay = 1 - lr * group weight decay.
  template <class F>
  void for_each_update(double lr_mult, F&& f) {
    ++step_;
    for (auto& s : state_) {
      if (!s.var->grad().defined()) continue;
      const ParamGroup& g = groups_[s.group];
      const double lr = g.lr * lr_mult;
      f(s, lr, 1.0 - lr * g.weight_decay);
    }
  }

  std::vector<ParamGroup> groups_;
  std::vector<ParamState> state_;
  int64_t step_ = 0;
};

// ---- AdamW ----------------------------------------------------------------------------------
// m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  t = step_count() (1 on the first step)
// p *= 1 - lr wd;  p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
};

class AdamW : public Optimizer {
 public:
  explicit AdamW(std::vector<ParamGroup> groups, AdamWOptions opt = {});
  std::string name() const override { return "adamw"; }
  void step(double lr_mult = 1.0, double grad_scale = 1.0) override;
  const AdamWOptions& options() const { return opt_; }

 private:
  AdamWOptions opt_;
};

// ---- Muon -----------------------------------------------------------------------------------
// For hidden 2-D weight matrices (rows = output features). Per parameter W (rows, cols), grad G:
//   B = mu B + (1 - mu) G;  U = nesterov ? (1 - mu) G + mu B : B
//   O = newton_schulz(U, ns_steps) * sqrt(max(1, rows / cols))
//   W *= 1 - lr wd;  W -= lr * O
struct MuonOptions {
  double momentum = 0.95;
  bool nesterov = true;
  int ns_steps = 5;
  // dtype of the Newton-Schulz iteration: f32 (default, also for f64 parameters: f64 then) or bf16
  // (as the reference implementation runs it on GPUs); the result returns to the parameter's dtype.
  DType ns_dtype = DType::F32;
};

class Muon : public Optimizer {
 public:
  // A parameter that is not 2-D throws ValueError (it belongs to AdamW: see partition_for_muon).
  explicit Muon(std::vector<ParamGroup> groups, MuonOptions opt = {});
  std::string name() const override { return "muon"; }
  void step(double lr_mult = 1.0, double grad_scale = 1.0) override;
  const MuonOptions& options() const { return opt_; }

 private:
  MuonOptions opt_;
};

// Approximate orthogonalisation of a 2-D f32/f64 matrix G (rows, cols) by the quintic
// Newton-Schulz iteration (docs/methods.md): X = G / (||G||_F + 1e-7); if rows > cols work on X^T;
// `steps` times: A = X X^T, B = b A + c A A, X = a X + B X, (a, b, c) = (3.4445, -4.7750, 2.0315);
// transpose back. The tall case is computed without copies as A = X^T X, X = a X + X B^T (the
// same numbers). Singular values of the result are not exactly 1: for Gaussian inputs they lie in
// about [0.68, 1.14] after 5 steps (directions whose singular value is below ~1% of ||G||_F
// converge less: 0.5 was seen for a square 32x32).
// Returns a new tensor of G's shape, dtype and device (computed on G's device, in G's dtype).
Tensor newton_schulz(const Tensor& G, int steps = 5);

// ---- Composite ------------------------------------------------------------------------------
// Owns several optimizers (e.g. Muon for hidden matrices + AdamW for the rest) and steps them
// all with the same lr_mult. Its state dict is the union of its parts' (their names must differ)
// plus "composite/step"; loading checks every part before changing any.
class CompositeOptimizer : public Optimizer {
 public:
  explicit CompositeOptimizer(std::vector<std::unique_ptr<Optimizer>> parts);
  std::string name() const override { return "composite"; }
  void step(double lr_mult = 1.0, double grad_scale = 1.0) override;
  void state_dict(std::map<std::string, Tensor>& out) const override;
  void check_state_dict(const std::map<std::string, Tensor>& in) const override;
  void load_state_dict(const std::map<std::string, Tensor>& in) override;
  void zero_grad() override;
  // groups() of the composite itself is empty: change lrs through the parts.
  const std::vector<std::unique_ptr<Optimizer>>& parts() const { return parts_; }

 private:
  std::vector<std::unique_ptr<Optimizer>> parts_;
};

// ---- From a description -----------------------------------------------------------------------
// An optimizer described before it is built: the trainer's recipe gives one spec per part (AdamW;
// or Muon on the hidden matrices + AdamW on the rest), and the same specs build the replicated
// optimizer (build) or the ZeRO-1 sharded one (dist::ZeroOptimizer), with the same state keys.
struct OptimizerSpec {
  enum class Kind : uint8_t { AdamW, Muon } kind = Kind::AdamW;
  std::vector<ParamGroup> groups;
  AdamWOptions adamw;
  MuonOptions muon;
  std::string name() const { return kind == Kind::AdamW ? "adamw" : "muon"; }
  // the state buffers of one parameter, in the optimizer's order
  std::vector<std::string> buffers() const;
};
// One spec: that optimizer; several: a CompositeOptimizer of them, in order.
std::unique_ptr<Optimizer> build(const std::vector<OptimizerSpec>& specs);

}  // namespace hz::optim
