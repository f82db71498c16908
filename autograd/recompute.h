// Horizon: activation recomputation (gradient checkpointing).
//
// recompute(fn, inputs) returns fn(inputs) but records one node instead of fn's graph: the forward
// runs without recording, so none of fn's intermediate tensors outlive it; only the inputs' values
// are kept. Its backward runs fn again, recording, on detached copies of the inputs (same values),
// backpropagates the incoming gradient through that fresh graph (the parameters fn reads
// accumulate their gradients there, their grad-ready hooks fire as in a plain pass), and hands the
// inputs' gradients on. fn must be deterministic and compute the same values twice (Horizon's ops
// are: no dropout, fixed reduction orders), and it must set any thread-local state it depends on
// (the compute dtype) itself, since the backward runs outside the forward's scopes. Then every
// gradient is bitwise the one the plain graph gives: the same ops run on the same values, and an
// input's contributions are summed inside the node exactly as the plain engine would (two
// contributions commute exactly; recompute a function whose inputs have at most two uses inside
// it when bitwise equality matters).
#pragma once
#include <functional>
#include <vector>

#include "autograd/variable.h"

namespace hz::ag {

using RecomputeFn = std::function<Variable(const std::vector<Variable>&)>;

// Without recording (grad disabled) or when no input requires grad, this is fn(inputs).
Variable recompute(const RecomputeFn& fn, const std::vector<Variable>& inputs, const char* name = "recompute");

}  // namespace hz::ag
