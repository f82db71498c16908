#include "optim/clip.h"

#include <cmath>
#include <map>

#include "core/error.h"
#include "core/ops.h"

namespace hz::optim {

namespace {
// The defined gradients, grouped by device (one sum_squares call, one host transfer, per device).
std::map<std::pair<int, int>, std::vector<Tensor>> grads_by_device(
    const std::vector<std::pair<std::string, ag::Variable*>>& params) {
  std::map<std::pair<int, int>, std::vector<Tensor>> out;
  for (const auto& [name, var] : params) {
    HZ_CHECK(var != nullptr, ValueError, "global_grad_norm: parameter '", name, "' is null");
    if (!var->defined() || !var->grad().defined()) continue;
    const Tensor& g = var->grad();
    HZ_CHECK(is_floating(g.dtype()), DTypeError, "global_grad_norm: gradient of '", name, "' is ",
             dtype_name(g.dtype()), "; gradients must be floating point");
    out[{static_cast<int>(g.device().type), g.device().index}].push_back(g);
  }
  return out;
}
}  // namespace

double global_grad_norm(const std::vector<std::pair<std::string, ag::Variable*>>& params) {
  double total = 0.0;
  for (const auto& [dev, gs] : grads_by_device(params)) total += ops::sum_squares(gs);
  return std::sqrt(total);
}

double clip_factor(double norm, double max_norm) {
  return max_norm > 0.0 && std::isfinite(norm) && norm > max_norm ? max_norm / norm : 1.0;
}

double clip_grad_norm(const std::vector<std::pair<std::string, ag::Variable*>>& params,
                      double max_norm) {
  const double norm = global_grad_norm(params);
  const double s = clip_factor(norm, max_norm);
  if (s == 1.0) return norm;
  for (const auto& [name, var] : params) {
    if (!var->defined() || !var->grad().defined()) continue;
    ops::axpby_(var->grad(), Tensor(), s, 0.0);  // g *= s, on the gradient's device
  }
  return norm;
}

}  // namespace hz::optim
