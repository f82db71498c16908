// Horizon: AdamW, Muon and the composite optimizer (see optimizer.h for the update rules).
#include "optim/optimizer.h"

#include <cmath>
#include <set>

#include "core/error.h"
#include "core/ops.h"

namespace hz::optim {

namespace {

// The gradient of `param`, checked: same shape, floating point. Stays on its device.
const Tensor& checked_grad(const std::string& who, const std::string& pname, const Tensor& param,
                           const Tensor& g) {
  HZ_CHECK(g.shape() == param.shape(), ShapeError, who, ": gradient of '", pname, "' has shape ",
           shape_str(g.shape()), " but the parameter has shape ", shape_str(param.shape()));
  HZ_CHECK(is_floating(g.dtype()), DTypeError, who, ": gradient of '", pname, "' is ",
           dtype_name(g.dtype()), "; gradients must be floating point");
  HZ_CHECK(g.device() == param.device(), DeviceError, who, ": gradient of '", pname, "' is on ",
           g.device().str(), " but the parameter is on ", param.device().str());
  return g;
}
void check_lr_mult(const std::string& who, double lr_mult, double grad_scale) {
  HZ_CHECK(std::isfinite(lr_mult) && lr_mult >= 0.0, ValueError, who,
           ": lr_mult must be finite and >= 0, got ", lr_mult);
  HZ_CHECK(grad_scale > 0.0 && grad_scale <= 1.0, ValueError, who,
           ": grad_scale (the gradient clip's factor) must lie in (0, 1], got ", grad_scale);
}
void check_state_shape(const std::string& who, const std::string& pname, const Tensor& value,
                       const Tensor& buf) {
  HZ_CHECK(value.shape() == buf.shape(), ValueError, who, ": parameter '", pname,
           "' changed shape from ", shape_str(buf.shape()), " to ", shape_str(value.shape()),
           " since the optimizer was built; build a new optimizer after model surgery");
  HZ_CHECK(value.device() == buf.device(), ValueError, who, ": parameter '", pname, "' moved from ",
           buf.device().str(), " to ", value.device().str(),
           " since the optimizer was built; build the optimizer after moving the model");
}
// Runs f on the parameter's value updated in place: the value itself when contiguous, else a
// contiguous copy written back afterwards.
template <class F>
void update_in_place(Tensor& value, F&& f) {
  if (value.is_contiguous()) {
    f(value);
    return;
  }
  Tensor c = value.contiguous();
  f(c);
  value.copy_(c);
}

}  // namespace

// ---- Optimizer --------------------------------------------------------------------------------

Optimizer::~Optimizer() = default;

void Optimizer::init_state(const std::vector<std::string>& buffer_names) {
  const std::string who = name();
  std::set<std::string> names;
  std::set<const ag::Variable*> vars;
  state_.clear();
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const ParamGroup& g = groups_[gi];
    HZ_CHECK(std::isfinite(g.lr) && g.lr >= 0.0, ValueError, who, ": group '", g.name,
             "' has lr ", g.lr, "; lr must be finite and >= 0");
    HZ_CHECK(std::isfinite(g.weight_decay) && g.weight_decay >= 0.0, ValueError, who, ": group '",
             g.name, "' has weight_decay ", g.weight_decay, "; it must be finite and >= 0");
    for (const auto& [pname, var] : g.params) {
      HZ_CHECK(!pname.empty(), ValueError, who, ": group '", g.name,
               "' has a parameter with an empty name; state dict keys need names");
      HZ_CHECK(var != nullptr && var->defined(), ValueError, who, ": parameter '", pname,
               "' is null or undefined");
      HZ_CHECK(names.insert(pname).second, ValueError, who, ": parameter name '", pname,
               "' appears twice; names must be unique across groups");
      HZ_CHECK(vars.insert(var).second, ValueError, who, ": parameter '", pname,
               "' is the same Variable as an earlier one; list each parameter once");
      const DType dt = var->value().dtype();
      HZ_CHECK(dt == DType::F32 || dt == DType::F64, DTypeError, who, ": parameter '", pname,
               "' is ", dtype_name(dt),
               "; optimizers update f32/f64 parameters (keep bf16 master weights in f32)");
      ParamState s;
      s.name = pname;
      s.var = var;
      s.group = gi;
      for (const auto& b : buffer_names)
        s.buffers.emplace_back(b, Tensor::zeros(var->value().shape(), dt, var->value().device()));
      state_.push_back(std::move(s));
    }
  }
}

std::string Optimizer::key(const ParamState& s, const std::string& buffer) const {
  return name() + "/" + s.name + "/" + buffer;
}

void Optimizer::state_dict(std::map<std::string, Tensor>& out) const {
  for (const auto& s : state_)
    // straight to the host (a checkpoint's destination): a device copy first would need the
    // optimizer state's size again on the GPU at every save
    for (const auto& [b, t] : s.buffers) out[key(s, b)] = t.device().is_cpu() ? t.clone() : t.to(Device::cpu());
  out[step_key()] = Tensor::from_vector({static_cast<double>(step_)}, {}, DType::I64);
}

void Optimizer::check_state_dict(const std::map<std::string, Tensor>& in) const {
  const std::string who = name();
  std::set<std::string> expected;
  for (const auto& s : state_) {
    for (const auto& [b, t] : s.buffers) {
      const std::string k = key(s, b);
      expected.insert(k);
      auto it = in.find(k);
      HZ_CHECK(it != in.end(), ValueError, who, ": optimizer state key '", k,
               "' is missing; the state was saved for a different model or optimizer");
      HZ_CHECK(it->second.defined() && it->second.shape() == t.shape(), ValueError, who,
               ": optimizer state key '", k, "' has shape ",
               it->second.defined() ? shape_str(it->second.shape()) : std::string("(undefined)"),
               " but parameter '", s.name, "' needs ", shape_str(t.shape()),
               "; the state was saved for a different model");
      HZ_CHECK(is_floating(it->second.dtype()), ValueError, who, ": optimizer state key '", k,
               "' is ", dtype_name(it->second.dtype()), "; expected a floating-point tensor");
    }
  }
  const std::string sk = step_key();
  expected.insert(sk);
  auto it = in.find(sk);
  HZ_CHECK(it != in.end(), ValueError, who, ": optimizer state key '", sk, "' is missing");
  HZ_CHECK(it->second.defined() && it->second.dim() == 0, ValueError, who,
           ": optimizer state key '", sk, "' must be a scalar (shape ()), got ",
           it->second.defined() ? shape_str(it->second.shape()) : std::string("(undefined)"));
  const double st = it->second.item();
  HZ_CHECK(st >= 0.0 && st == std::floor(st), ValueError, who, ": optimizer state key '", sk,
           "' holds ", st, "; expected a non-negative integer");
  const std::string prefix = who + "/";
  for (auto jt = in.lower_bound(prefix); jt != in.end() && jt->first.compare(0, prefix.size(), prefix) == 0;
       ++jt)
    HZ_CHECK(expected.count(jt->first) > 0, ValueError, who, ": optimizer state key '", jt->first,
             "' names no parameter of this optimizer; the state was saved for a different model "
             "or parameter partition");
}

void Optimizer::load_state_dict(const std::map<std::string, Tensor>& in) {
  check_state_dict(in);
  for (auto& s : state_)
    for (auto& [b, t] : s.buffers) t.copy_(in.at(key(s, b)));
  step_ = static_cast<int64_t>(in.at(step_key()).item());
}

void Optimizer::zero_grad() {
  for (auto& g : groups_)
    for (auto& [n, v] : g.params) v->zero_grad();
}

// ---- AdamW ------------------------------------------------------------------------------------

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions opt)
    : Optimizer(std::move(groups)), opt_(opt) {
  HZ_CHECK(opt_.beta1 >= 0.0 && opt_.beta1 < 1.0 && opt_.beta2 >= 0.0 && opt_.beta2 < 1.0,
           ValueError, "adamw: betas must lie in [0, 1), got (", opt_.beta1, ", ", opt_.beta2, ")");
  HZ_CHECK(opt_.eps > 0.0 && std::isfinite(opt_.eps), ValueError, "adamw: eps must be > 0, got ",
           opt_.eps);
  init_state({"exp_avg", "exp_avg_sq"});
}

void AdamW::step(double lr_mult, double grad_scale) {
  check_lr_mult("adamw", lr_mult, grad_scale);
  const double t = static_cast<double>(step_ + 1);  // this step's count
  math::AdamWCoef c{opt_.beta1, opt_.beta2, 1.0 - std::pow(opt_.beta1, t), 1.0 - std::pow(opt_.beta2, t),
                    opt_.eps, 0.0, 1.0, grad_scale};
  // every contiguous parameter in one multi-tensor update; a strided one through a contiguous copy
  std::vector<ops::AdamWSlot> slots;
  for_each_update(lr_mult, [&](ParamState& s, double lr, double decay) {
    ag::Variable& var = *s.var;
    Tensor& m = s.buffers[0].second;
    Tensor& v = s.buffers[1].second;
    check_state_shape("adamw", s.name, var.value(), m);
    const Tensor& g = checked_grad("adamw", s.name, var.value(), var.grad());
    if (var.value().is_contiguous()) {
      slots.push_back({var.value(), g, m, v, lr, decay});
      return;
    }
    math::AdamWCoef cs = c;
    cs.lr = lr;
    cs.decay = decay;
    update_in_place(var.value(), [&](Tensor& p) { ops::adamw_update_(p, g, m, v, cs); });
  });
  if (!slots.empty()) ops::adamw_multi_update_(slots, c);
}

// ---- Muon -------------------------------------------------------------------------------------

Tensor newton_schulz(const Tensor& G, int steps) {
  HZ_CHECK(G.defined() && G.dim() == 2, ShapeError, "newton_schulz: needs a 2-D matrix, got ",
           G.defined() ? shape_str(G.shape()) : std::string("an undefined tensor"));
  HZ_CHECK(is_floating(G.dtype()), DTypeError, "newton_schulz: needs f32, f64 or bf16, got ", dtype_name(G.dtype()));
  HZ_CHECK(steps >= 0, ValueError, "newton_schulz: steps must be >= 0, got ", steps);
  constexpr double a = 3.4445, b = -4.7750, c = 2.0315;
  // X (rows, cols) = G / (||G||_F + 1e-7), a fresh copy on G's device
  Tensor X = G.clone();
  const double norm = std::sqrt(ops::sum_squares({X}));
  ops::axpby_(X, Tensor(), 1.0 / (norm + 1e-7), 0.0);
  // Tall (rows > cols): docs/methods.md iterates on Y = X^T. With A = Y Y^T = X^T X and
  // (B Y)^T = X B^T, the iteration runs on X itself through matmul's transpose flags.
  const bool tall = X.size(0) > X.size(1);
  for (int it = 0; it < steps; ++it) {
    Tensor A = tall ? ops::matmul(X, X, true, false) : ops::matmul(X, X, false, true);  // (s, s)
    Tensor B = ops::matmul(A, A);                                                        // (s, s)
    ops::axpby_(B, A, c, b);                                                             // B = c AA + b A
    Tensor BX = tall ? ops::matmul(X, B, false, true) : ops::matmul(B, X);             // (rows, cols)
    ops::axpby_(X, BX, a, 1.0);                                                          // X = a X + BX
  }
  return X;
}

Muon::Muon(std::vector<ParamGroup> groups, MuonOptions opt)
    : Optimizer(std::move(groups)), opt_(opt) {
  HZ_CHECK(opt_.momentum >= 0.0 && opt_.momentum < 1.0, ValueError,
           "muon: momentum must lie in [0, 1), got ", opt_.momentum);
  HZ_CHECK(opt_.ns_steps >= 0, ValueError, "muon: ns_steps must be >= 0, got ", opt_.ns_steps);
  HZ_CHECK(opt_.ns_dtype == DType::F32 || opt_.ns_dtype == DType::F64 || opt_.ns_dtype == DType::BF16, ValueError,
           "muon: ns_dtype must be f32, f64 or bf16");
  for (const auto& g : groups_)
    for (const auto& [pname, var] : g.params)
      HZ_CHECK(var == nullptr || !var->defined() || var->dim() == 2, ValueError,
               "muon: parameter '", pname, "' has shape ", shape_str(var->shape()),
               "; Muon updates 2-D hidden weight matrices only, this one belongs to AdamW "
               "(split parameters with optim::partition_for_muon)");
  init_state({"momentum_buffer"});
}

void Muon::step(double lr_mult, double grad_scale) {
  check_lr_mult("muon", lr_mult, grad_scale);
  for_each_update(lr_mult, [&](ParamState& s, double lr, double decay) {
    ag::Variable& var = *s.var;
    Tensor& buf = s.buffers[0].second;
    check_state_shape("muon", s.name, var.value(), buf);
    const Tensor& g = checked_grad("muon", s.name, var.value(), var.grad());
    Tensor U = Tensor::empty(buf.shape(), buf.dtype(), buf.device());
    ops::momentum_update_(g, buf, U, opt_.momentum, opt_.nesterov, grad_scale);
    // Newton-Schulz in ns_dtype (bf16 on GPUs, as the reference implementation), result in the
    // parameter's dtype
    const bool cast = opt_.ns_dtype != U.dtype() && !(opt_.ns_dtype == DType::F32 && U.dtype() == DType::F64);
    Tensor O = newton_schulz(cast ? U.to(opt_.ns_dtype) : U, opt_.ns_steps);
    if (O.dtype() != U.dtype()) O = O.to(U.dtype());
    const double rows = static_cast<double>(var.value().size(0)), cols = static_cast<double>(var.value().size(1));
    const double step = lr * std::sqrt(std::max(1.0, rows / cols));
    update_in_place(var.value(), [&](Tensor& p) { ops::axpby_(p, O, decay, -step); });  // p = decay p - step O
  });
}

// ---- Composite --------------------------------------------------------------------------------

CompositeOptimizer::CompositeOptimizer(std::vector<std::unique_ptr<Optimizer>> parts)
    : Optimizer({}), parts_(std::move(parts)) {
  HZ_CHECK(!parts_.empty(), ValueError, "composite optimizer: give it at least one optimizer");
  std::set<std::string> names{name()};
  std::map<const ag::Variable*, std::string> owner;
  for (const auto& p : parts_) {
    HZ_CHECK(p != nullptr, ValueError, "composite optimizer: a part is null");
    HZ_CHECK(names.insert(p->name()).second, ValueError, "composite optimizer: two parts are named '",
             p->name(), "'; their state dict keys would collide");
    for (const auto& g : p->groups())
      for (const auto& [pname, var] : g.params) {
        auto [it, fresh] = owner.emplace(var, p->name());
        HZ_CHECK(fresh, ValueError, "composite optimizer: parameter '", pname, "' is in both '",
                 it->second, "' and '", p->name(), "'; it would be updated twice");
      }
  }
}

void CompositeOptimizer::step(double lr_mult, double grad_scale) {
  check_lr_mult("composite", lr_mult, grad_scale);
  for (auto& p : parts_) p->step(lr_mult, grad_scale);
  ++step_;
}

void CompositeOptimizer::state_dict(std::map<std::string, Tensor>& out) const {
  for (const auto& p : parts_) p->state_dict(out);
  Optimizer::state_dict(out);  // "composite/step"
}

void CompositeOptimizer::check_state_dict(const std::map<std::string, Tensor>& in) const {
  for (const auto& p : parts_) p->check_state_dict(in);
  Optimizer::check_state_dict(in);
}

void CompositeOptimizer::load_state_dict(const std::map<std::string, Tensor>& in) {
  check_state_dict(in);  // every part, before anything changes
  for (auto& p : parts_) p->load_state_dict(in);
  Optimizer::load_state_dict(in);
}

void CompositeOptimizer::zero_grad() {
  for (auto& p : parts_) p->zero_grad();
}

// ---- From a description ---------------------------------------------------------------------------

std::vector<std::string> OptimizerSpec::buffers() const {
  if (kind == Kind::Muon) return {"momentum_buffer"};
  return {"exp_avg", "exp_avg_sq"};
}

std::unique_ptr<Optimizer> build(const std::vector<OptimizerSpec>& specs) {
  HZ_CHECK(!specs.empty(), ValueError, "optimizer: nothing to build");
  std::vector<std::unique_ptr<Optimizer>> parts;
  for (const auto& sp : specs) {
    if (sp.kind == OptimizerSpec::Kind::Muon) parts.push_back(std::make_unique<Muon>(sp.groups, sp.muon));
    else parts.push_back(std::make_unique<AdamW>(sp.groups, sp.adamw));
  }
  if (parts.size() == 1) return std::move(parts[0]);
  return std::make_unique<CompositeOptimizer>(std::move(parts));
}

}  // namespace hz::optim
