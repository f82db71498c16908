#include "nn/module.h"

#include "core/hash.h"

namespace hz::nn {

uint64_t name_stream(const std::string& name) { return fnv1a64(name.data(), name.size(), kFnvOffsetInit); }

template <class F>
void Module::visit(const std::string& prefix, F&& f) {
  for (auto& p : params_) f(prefix + p.name, p);
  for (auto& [n, c] : children_) c->visit(prefix + n + ".", f);
}
template <class F>
void Module::visit(const std::string& prefix, F&& f) const {
  for (const auto& p : params_) f(prefix + p.name, p);
  for (const auto& [n, c] : children_) static_cast<const Module&>(*c).visit(prefix + n + ".", f);
}

ag::Variable& Module::register_parameter(const std::string& name, Tensor value, Init init) {
  for (const auto& p : params_)
    HZ_CHECK(p.name != name, ValueError, "parameter '", name, "' registered twice");
  params_.push_back({name, ag::Variable(std::move(value), true, name), init});
  return params_.back().var;
}

std::vector<std::pair<std::string, ag::Variable*>> Module::named_parameters() {
  std::vector<std::pair<std::string, ag::Variable*>> out;
  visit("", [&](const std::string& n, Param& p) { out.emplace_back(n, &p.var); });
  return out;
}
std::vector<std::pair<std::string, const ag::Variable*>> Module::named_parameters() const {
  std::vector<std::pair<std::string, const ag::Variable*>> out;
  visit("", [&](const std::string& n, const Param& p) { out.emplace_back(n, &p.var); });
  return out;
}
int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, v] : named_parameters()) n += v->numel();
  return n;
}
void Module::zero_grad() {
  for (auto& [name, v] : named_parameters()) v->zero_grad();
}

std::map<std::string, Tensor> Module::state_dict() const {
  std::map<std::string, Tensor> sd;
  for (const auto& [name, v] : named_parameters()) sd[name] = v->value();
  return sd;
}

LoadReport Module::load_state_dict(const std::map<std::string, Tensor>& sd, bool strict,
                                   const std::string& source) {
  const std::string from = source.empty() ? std::string() : source + ": ";
  LoadReport r;
  std::map<std::string, bool> used;
  std::vector<std::pair<ag::Variable*, const Tensor*>> copies;
  for (auto& [name, v] : named_parameters()) {
    auto it = sd.find(name);
    if (it == sd.end()) {
      r.missing.push_back(name);
      continue;
    }
    HZ_CHECK(it->second.shape() == v->shape(), ShapeError, from, "parameter '", name, "': checkpoint has shape ",
             shape_str(it->second.shape()), " but the model expects ", shape_str(v->shape()));
    HZ_CHECK(is_floating(it->second.dtype()), DTypeError, from, "parameter '", name, "': checkpoint holds ",
             dtype_name(it->second.dtype()), " values, the model ", dtype_name(v->dtype()));
    copies.emplace_back(v, &it->second);
    r.loaded.push_back(name);
    used[name] = true;
  }
  for (const auto& [name, t] : sd)
    if (!used.count(name)) r.unexpected.push_back(name);
  if (strict) {
    HZ_CHECK(r.missing.empty(), ValueError, from, "state dict lacks parameter '", r.missing.front(), "' (",
             r.missing.size(), " missing); load with strict=false to keep their current values");
    HZ_CHECK(r.unexpected.empty(), ValueError, from, "state dict has unexpected parameter '",
             r.unexpected.front(), "' (", r.unexpected.size(), " unexpected)");
  }
  for (auto& [v, t] : copies) v->value().copy_(*t);  // copy_ converts the dtype
  return r;
}

void Module::to(Device dev) {
  for (auto& p : params_)
    if (p.var.value().device() != dev) p.var.value() = p.var.value().to(dev);
  for (auto& p : params_)
    if (p.var.grad().defined() && p.var.grad().device() != dev) p.var.grad() = p.var.grad().to(dev);
  move_buffers(dev);
  for (auto& [n, c] : children_) c->to(dev);
}

Device Module::device() const {
  const auto ps = named_parameters();
  return ps.empty() ? Device::cpu() : ps.front().second->value().device();
}

void Module::init_parameters(uint64_t seed) {
  visit("", [&](const std::string& n, Param& p) {
    Tensor& t = p.var.value();
    if (p.init.kind == Init::Kind::Constant) {
      t.fill_(p.init.value);
    } else if (p.init.kind == Init::Kind::Values) {
      std::vector<double> v(t.numel());
      for (size_t i = 0; i < v.size(); ++i) v[i] = p.init.values[i % p.init.values.size()];
      t.copy_(Tensor::from_vector(v, t.shape(), DType::F64).to(t.device()));
    } else {
      Generator g(seed, name_stream(n));
      g.normal_(t, 0.0, p.init.value);
    }
  });
}

const Init& Module::init_rule(const std::string& full_name) const {
  const Init* found = nullptr;
  visit("", [&](const std::string& n, const Param& p) {
    if (n == full_name) found = &p.init;
  });
  HZ_CHECK(found, ValueError, "no parameter named '", full_name, "'");
  return *found;
}

}  // namespace hz::nn
