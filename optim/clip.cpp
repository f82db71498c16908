#include "optim/vec_math.h"
#include "optim/clip.h"

#include <cmath>

#include "core/error.h"

namespace hz::optim {

namespace {
// The grad as a host tensor that can be read as T = float/double (a copy when it is on another
// device, non-contiguous or of another dtype).
Tensor readable(const Tensor& g) {
  Tensor h = g.to(Device::cpu());
  if (h.dtype() != DType::F32 && h.dtype() != DType::F64) h = h.to(DType::F64);
  return h.contiguous();
}
using detail::sum_squares;
using detail::scale;
}  // namespace

double global_grad_norm(const std::vector<std::pair<std::string, ag::Variable*>>& params) {
  double total = 0.0;
  for (const auto& [name, var] : params) {
    HZ_CHECK(var != nullptr, ValueError, "global_grad_norm: parameter '", name, "' is null");
    if (!var->defined() || !var->grad().defined()) continue;
    const Tensor& g0 = var->grad();
    HZ_CHECK(is_floating(g0.dtype()), DTypeError, "global_grad_norm: gradient of '", name, "' is ",
             dtype_name(g0.dtype()), "; gradients must be floating point");
    Tensor g = readable(g0);
    total += g.dtype() == DType::F32 ? sum_squares(g.data<float>(), g.numel())
                                     : sum_squares(g.data<double>(), g.numel());
  }
  return std::sqrt(total);
}

double clip_grad_norm(const std::vector<std::pair<std::string, ag::Variable*>>& params,
                      double max_norm) {
  const double norm = global_grad_norm(params);
  if (!(max_norm > 0.0) || !std::isfinite(norm) || norm <= max_norm) return norm;
  const double s = max_norm / norm;
  for (const auto& [name, var] : params) {
    if (!var->defined() || !var->grad().defined()) continue;
    Tensor& g = var->grad();
    const bool direct = g.device().is_cpu() && g.is_contiguous() &&
                        (g.dtype() == DType::F32 || g.dtype() == DType::F64);
    Tensor h = direct ? g : readable(g);
    if (h.dtype() == DType::F32) scale(h.data<float>(), h.numel(), s);
    else scale(h.data<double>(), h.numel(), s);
    if (!direct) g.copy_(h.to(g.dtype()).to(g.device()));
  }
  return norm;
}

}  // namespace hz::optim
