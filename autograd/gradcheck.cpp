#include "autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "autograd/functions.h"
#include "core/rng.h"

namespace hz::ag {

GradcheckResult gradcheck(const TestFn& f, const std::vector<Tensor>& inputs_in,
                          const GradcheckOptions& opt) {
  std::vector<Tensor> inputs;
  for (const auto& t : inputs_in) {
    HZ_CHECK(t.dtype() == DType::F64, DTypeError,
             "gradcheck needs f64 inputs for a meaningful finite difference; got ",
             dtype_name(t.dtype()), ". Use .to(DType::F64)");
    inputs.push_back(t.clone());  // private contiguous copies we can perturb
  }
  // analytic
  std::vector<Variable> vars;
  for (const auto& t : inputs) vars.emplace_back(t, true);
  Variable out = f(vars);
  HZ_CHECK(out.dtype() == DType::F64, DTypeError, "gradcheck: f returned ", dtype_name(out.dtype()),
           ", expected f64");
  Generator gen(opt.seed);
  const Tensor r = gen.normal(out.shape(), 0.0, 1.0, DType::F64);
  out.backward(r);

  auto eval = [&]() {
    NoGradGuard ng;
    std::vector<Variable> vs;
    for (const auto& t : inputs) vs.emplace_back(t, false);
    const Tensor y = f(vs).value();
    return ops::sum_all(ops::mul(y, r)).item();
  };

  GradcheckResult res;
  double worst_ratio = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& x = inputs[k];
    double* p = x.data<double>();
    const Tensor& ga = vars[k].grad();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double orig = p[i];
      p[i] = orig + opt.eps;
      const double lp = eval();
      p[i] = orig - opt.eps;
      const double lm = eval();
      p[i] = orig;
      const double num = (lp - lm) / (2 * opt.eps);
      const double ana = ga.defined() ? ga.at_flat(i) : 0.0;
      const double err = std::abs(ana - num);
      const double tol = opt.atol + opt.rtol * std::abs(num);
      ++res.checked;
      res.max_abs_err = std::max(res.max_abs_err, err);
      if (err / tol > worst_ratio) {
        worst_ratio = err / tol;
        if (err > tol) {
          std::ostringstream os;
          os.precision(12);
          os << "input " << k << " " << shape_str(x.shape()) << " element " << i << ": analytic "
             << ana << " vs numeric " << num << " (|diff| " << err << " > tol " << tol << ")";
          res.message = os.str();
          res.ok = false;
        }
      }
    }
  }
  return res;
}

}  // namespace hz::ag
