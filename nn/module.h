// Horizon: modules with named parameters and children ("layers.3.attn.wq.weight"), a state dict
// in and out, and per-parameter initialisation rules applied from a seed.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/variable.h"
#include "core/rng.h"

namespace hz::nn {

// How a parameter is initialised by Module::init_parameters.
struct Init {
  enum class Kind : uint8_t { Normal, Constant, Values } kind = Kind::Normal;
  double value = 0.02;  // stddev for Normal, the value for Constant
  std::vector<double> values;  // Values: element i (row-major) is values[i % values.size()]
  static Init normal(double std) { return {Kind::Normal, std, {}}; }
  static Init constant(double v) { return {Kind::Constant, v, {}}; }
  static Init tiled(std::vector<double> v) { return {Kind::Values, 0.0, std::move(v)}; }
};

struct LoadReport {
  std::vector<std::string> loaded, missing, unexpected;  // by parameter name
};

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Every parameter of this module and its children, in registration order, with dotted names.
  std::vector<std::pair<std::string, ag::Variable*>> named_parameters();
  std::vector<std::pair<std::string, const ag::Variable*>> named_parameters() const;
  int64_t num_parameters() const;
  void zero_grad();

  std::map<std::string, Tensor> state_dict() const;  // name -> value (shared, not copied)
  // Copies values by name, converting floating values to the parameter's dtype (an f32
  // checkpoint loads into an f64 model); a shape mismatch throws ShapeError and a non-floating
  // value DTypeError, naming the parameter; with strict, missing or unexpected names throw too.
  // Everything is checked before anything is copied: a refused load changes no parameter.
  // `source` (the file the values came from) leads every such message when given.
  LoadReport load_state_dict(const std::map<std::string, Tensor>& sd, bool strict = true,
                             const std::string& source = "");

  // Moves every parameter (and buffer, see move_buffers) to `dev`, in place: the Variables keep
  // their identity, so build optimizers after moving.
  void to(Device dev);
  Device device() const;  // of the first parameter (CPU for a module without parameters)

  // (Re)initialises every parameter from its rule. The values of a parameter depend only on
  // (seed, its full name), not on creation order or on the other parameters.
  void init_parameters(uint64_t seed);
  const Init& init_rule(const std::string& full_name) const;

 protected:
  // Non-parameter tensors a module owns (e.g. constants) follow the parameters in to().
  virtual void move_buffers(Device) {}
  ag::Variable& register_parameter(const std::string& name, Tensor value, Init init);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    children_.emplace_back(name, m);
    return m;
  }

 private:
  struct Param {
    std::string name;
    ag::Variable var;
    Init init;
  };
  std::vector<Param> params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  template <class F>
  void visit(const std::string& prefix, F&& f);
  template <class F>
  void visit(const std::string& prefix, F&& f) const;
};

// FNV-1a hash: the RNG stream of a named parameter.
uint64_t name_stream(const std::string& name);

}  // namespace hz::nn
