// Horizon: AdamW, Muon and the composite optimizer (see optimizer.h for the update rules).
#include "optim/vec_math.h"
#include "optim/optimizer.h"

#include <cmath>
#include <set>

#include "core/error.h"
#include "core/ops.h"

namespace hz::optim {

namespace {

// The parameter value as a host, contiguous tensor: the value itself when it already is one,
// otherwise a copy that write_back() puts back.
Tensor host_value(const Tensor& v) {
  return v.device().is_cpu() && v.is_contiguous() ? v : v.to(Device::cpu()).contiguous();
}
void write_back(Tensor& v, const Tensor& host) {
  if (host.storage() != v.storage()) v.copy_(host);
}
// The gradient on the host, contiguous, in the parameter's dtype.
Tensor host_grad(const std::string& who, const std::string& pname, const Tensor& param,
                 const Tensor& g) {
  HZ_CHECK(g.shape() == param.shape(), ShapeError, who, ": gradient of '", pname, "' has shape ",
           shape_str(g.shape()), " but the parameter has shape ", shape_str(param.shape()));
  HZ_CHECK(is_floating(g.dtype()), DTypeError, who, ": gradient of '", pname, "' is ",
           dtype_name(g.dtype()), "; gradients must be floating point");
  Tensor h = g.to(Device::cpu());
  if (h.dtype() != param.dtype()) h = h.to(param.dtype());
  return h.contiguous();
}
void check_lr_mult(const std::string& who, double lr_mult) {
  HZ_CHECK(std::isfinite(lr_mult) && lr_mult >= 0.0, ValueError, who,
           ": lr_mult must be finite and >= 0, got ", lr_mult);
}
void check_state_shape(const std::string& who, const std::string& pname, const Tensor& value,
                       const Tensor& buf) {
  HZ_CHECK(value.shape() == buf.shape(), ValueError, who, ": parameter '", pname,
           "' changed shape from ", shape_str(buf.shape()), " to ", shape_str(value.shape()),
           " since the optimizer was built; build a new optimizer after model surgery");
}

// ---- per-element kernels (double arithmetic, state in T) ------------------------------------
template <class T>
void adamw_kernel(T* p, const T* g, T* m, T* v, int64_t n, double b1, double b2, double bc1,
                  double bc2, double eps, double lr, double decay) {
#pragma omp parallel for schedule(static) if (n > 8192)
  for (int64_t i = 0; i < n; ++i) {
    const double gi = static_cast<double>(g[i]);
    m[i] = static_cast<T>(b1 * static_cast<double>(m[i]) + (1.0 - b1) * gi);
    v[i] = static_cast<T>(b2 * static_cast<double>(v[i]) + (1.0 - b2) * gi * gi);
    const double mhat = static_cast<double>(m[i]) / bc1;
    const double vhat = static_cast<double>(v[i]) / bc2;
    const double pi = static_cast<double>(p[i]) * decay;  // decoupled decay first
    p[i] = static_cast<T>(pi - lr * mhat / (std::sqrt(vhat) + eps));
  }
}

// B = mu B + (1 - mu) G; U = nesterov ? (1 - mu) G + mu B : B
template <class T>
void muon_momentum_kernel(const T* g, T* b, T* u, int64_t n, double mu, bool nesterov) {
#pragma omp parallel for schedule(static) if (n > 8192)
  for (int64_t i = 0; i < n; ++i) {
    const double gi = static_cast<double>(g[i]);
    b[i] = static_cast<T>(mu * static_cast<double>(b[i]) + (1.0 - mu) * gi);
    u[i] = nesterov ? static_cast<T>((1.0 - mu) * gi + mu * static_cast<double>(b[i])) : b[i];
  }
}

// p = p * decay - step * o
template <class T>
void decay_and_apply(T* p, const T* o, int64_t n, double decay, double step) {
  for (int64_t i = 0; i < n; ++i)
    p[i] = static_cast<T>(static_cast<double>(p[i]) * decay - step * static_cast<double>(o[i]));
}

// x = alpha * x + y
template <class T>
void axpby(T* x, const T* y, int64_t n, double alpha, double beta) {
  for (int64_t i = 0; i < n; ++i)
    x[i] = static_cast<T>(alpha * static_cast<double>(x[i]) + beta * static_cast<double>(y[i]));
}

using detail::sum_squares;

using detail::scale;

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
        s.buffers.emplace_back(b, Tensor::zeros(var->value().shape(), dt));
      state_.push_back(std::move(s));
    }
  }
}

std::string Optimizer::key(const ParamState& s, const std::string& buffer) const {
  return name() + "/" + s.name + "/" + buffer;
}

void Optimizer::state_dict(std::map<std::string, Tensor>& out) const {
  for (const auto& s : state_)
    for (const auto& [b, t] : s.buffers) out[key(s, b)] = t.clone();
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
    for (auto& [b, t] : s.buffers) t.copy_(in.at(key(s, b)).to(Device::cpu()));
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

void AdamW::step(double lr_mult) {
  check_lr_mult("adamw", lr_mult);
  const double t = static_cast<double>(step_ + 1);  // this step's count
  const double bc1 = 1.0 - std::pow(opt_.beta1, t);
  const double bc2 = 1.0 - std::pow(opt_.beta2, t);
  for_each_update(lr_mult, [&](ParamState& s, double lr, double decay) {
    ag::Variable& var = *s.var;
    Tensor& m = s.buffers[0].second;
    Tensor& v = s.buffers[1].second;
    check_state_shape("adamw", s.name, var.value(), m);
    Tensor p = host_value(var.value());
    Tensor gr = host_grad("adamw", s.name, p, var.grad());
    const int64_t n = p.numel();
    if (p.dtype() == DType::F32)
      adamw_kernel(p.data<float>(), gr.data<float>(), m.data<float>(), v.data<float>(), n,
                   opt_.beta1, opt_.beta2, bc1, bc2, opt_.eps, lr, decay);
    else
      adamw_kernel(p.data<double>(), gr.data<double>(), m.data<double>(), v.data<double>(), n,
                   opt_.beta1, opt_.beta2, bc1, bc2, opt_.eps, lr, decay);
    write_back(var.value(), p);
  });
}

// ---- Muon -------------------------------------------------------------------------------------

Tensor newton_schulz(const Tensor& G, int steps) {
  HZ_CHECK(G.defined() && G.dim() == 2, ShapeError, "newton_schulz: needs a 2-D matrix, got ",
           G.defined() ? shape_str(G.shape()) : std::string("an undefined tensor"));
  HZ_CHECK(G.dtype() == DType::F32 || G.dtype() == DType::F64, DTypeError,
           "newton_schulz: needs f32 or f64, got ", dtype_name(G.dtype()));
  HZ_CHECK(steps >= 0, ValueError, "newton_schulz: steps must be >= 0, got ", steps);
  constexpr double a = 3.4445, b = -4.7750, c = 2.0315;
  const bool f32 = G.dtype() == DType::F32;
  // X (rows, cols) = G / (||G||_F + 1e-7), a fresh host copy
  Tensor X = G.to(Device::cpu()).clone();
  const int64_t n = X.numel();
  const double norm = std::sqrt(f32 ? sum_squares(X.data<float>(), n) : sum_squares(X.data<double>(), n));
  const double inv = 1.0 / (norm + 1e-7);
  if (f32) scale(X.data<float>(), n, inv);
  else scale(X.data<double>(), n, inv);
  // Tall (rows > cols): the SPEC iterates on Y = X^T. With A = Y Y^T = X^T X and
  // (B Y)^T = X B^T, the iteration runs on X itself through matmul's transpose flags.
  const bool tall = X.size(0) > X.size(1);
  for (int it = 0; it < steps; ++it) {
    Tensor A = tall ? ops::matmul(X, X, true, false) : ops::matmul(X, X, false, true);  // (s, s)
    Tensor B = ops::matmul(A, A);                                                        // (s, s)
    const int64_t ns = B.numel();
    if (f32) axpby(B.data<float>(), A.data<float>(), ns, c, b);  // B = c AA + b A
    else axpby(B.data<double>(), A.data<double>(), ns, c, b);
    Tensor BX = tall ? ops::matmul(X, B, false, true) : ops::matmul(B, X);  // (rows, cols)
    if (f32) axpby(X.data<float>(), BX.data<float>(), n, a, 1.0);  // X = a X + BX
    else axpby(X.data<double>(), BX.data<double>(), n, a, 1.0);
  }
  return G.device().is_cpu() ? X : X.to(G.device());
}

Muon::Muon(std::vector<ParamGroup> groups, MuonOptions opt)
    : Optimizer(std::move(groups)), opt_(opt) {
  HZ_CHECK(opt_.momentum >= 0.0 && opt_.momentum < 1.0, ValueError,
           "muon: momentum must lie in [0, 1), got ", opt_.momentum);
  HZ_CHECK(opt_.ns_steps >= 0, ValueError, "muon: ns_steps must be >= 0, got ", opt_.ns_steps);
  for (const auto& g : groups_)
    for (const auto& [pname, var] : g.params)
      HZ_CHECK(var == nullptr || !var->defined() || var->dim() == 2, ValueError,
               "muon: parameter '", pname, "' has shape ", shape_str(var->shape()),
               "; Muon updates 2-D hidden weight matrices only, this one belongs to AdamW "
               "(split parameters with optim::partition_for_muon)");
  init_state({"momentum_buffer"});
}

void Muon::step(double lr_mult) {
  check_lr_mult("muon", lr_mult);
  for_each_update(lr_mult, [&](ParamState& s, double lr, double decay) {
    ag::Variable& var = *s.var;
    Tensor& buf = s.buffers[0].second;
    check_state_shape("muon", s.name, var.value(), buf);
    Tensor p = host_value(var.value());
    Tensor gr = host_grad("muon", s.name, p, var.grad());
    const int64_t n = p.numel();
    Tensor U = Tensor::empty(p.shape(), p.dtype());
    if (p.dtype() == DType::F32)
      muon_momentum_kernel(gr.data<float>(), buf.data<float>(), U.data<float>(), n, opt_.momentum,
                           opt_.nesterov);
    else
      muon_momentum_kernel(gr.data<double>(), buf.data<double>(), U.data<double>(), n,
                           opt_.momentum, opt_.nesterov);
    Tensor O = newton_schulz(U, opt_.ns_steps);
    const double rows = static_cast<double>(p.size(0)), cols = static_cast<double>(p.size(1));
    const double step = lr * std::sqrt(std::max(1.0, rows / cols));
    if (p.dtype() == DType::F32) decay_and_apply(p.data<float>(), O.data<float>(), n, decay, step);
    else decay_and_apply(p.data<double>(), O.data<double>(), n, decay, step);
    write_back(var.value(), p);
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

void CompositeOptimizer::step(double lr_mult) {
  check_lr_mult("composite", lr_mult);
  for (auto& p : parts_) p->step(lr_mult);
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

}  // namespace hz::optim
