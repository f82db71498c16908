// Horizon: the CPU kernels' exp is core/math.h's (a branch-free polynomial for f32 that the
// compiler vectorizes, the library exp for f64), the same function the CUDA kernels use.
#pragma once
#include "core/math.h"

namespace hz::cpu {

inline float fast_exp(float x) { return math::exp_(x); }
inline double fast_exp(double x) { return math::exp_(x); }

}  // namespace hz::cpu
