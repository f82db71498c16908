// Horizon: finite-difference gradient check in double precision.
//
// f maps Variables to a Variable of any shape. The check projects the output onto a fixed
// random direction r (L = sum(f(x) * r)), takes the analytic gradient of L by backward(), and
// compares every input element with the central difference (L(x + eps) - L(x - eps)) / (2 eps).
// Inputs must be f64. Passes when |analytic - numeric| <= atol + rtol * |numeric| everywhere.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "autograd/variable.h"

namespace hz::ag {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-7;
  double rtol = 1e-6;
  uint64_t seed = 1234;  // of the projection direction
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_err = 0;
  int64_t checked = 0;   // number of input elements compared
  std::string message;   // the worst mismatch, with input index and both values
};

using TestFn = std::function<Variable(const std::vector<Variable>&)>;

GradcheckResult gradcheck(const TestFn& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& opt = {});

}  // namespace hz::ag
