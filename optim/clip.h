// Horizon: gradient-norm clipping over a list of parameters (e.g. the whole model, after the
// gradients have been synchronised across ranks).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "autograd/variable.h"

namespace hz::optim {

// sqrt(sum of squares of every element of every defined grad), accumulated in double in a fixed
// order (parameters in list order, each in fixed chunks of its row-major elements; ops::sum_squares),
// so the result is deterministic and independent of the thread count. One host transfer per device.
// Parameters without a grad contribute nothing.
double global_grad_norm(const std::vector<std::pair<std::string, ag::Variable*>>& params);

// The factor clipping applies for a global norm: max_norm / norm when max_norm > 0 and a finite
// norm exceeds it, else 1. The trainer hands it to Optimizer::step, which reads the gradients scaled
// by it in the update's own pass (the same bits as clip_grad_norm's scaling, one pass fewer).
double clip_factor(double norm, double max_norm);

// When max_norm > 0 and the global norm exceeds it, multiplies every grad in place by
// max_norm / norm. max_norm <= 0 disables clipping (the norm is still computed). Returns the
// norm before clipping (log it). A non-finite norm (inf/NaN gradients) leaves the grads untouched
// and is returned as is: the caller decides whether to skip the step or stop the run.
double clip_grad_norm(const std::vector<std::pair<std::string, ag::Variable*>>& params,
                      double max_norm);

}  // namespace hz::optim
