// Horizon: the kinds of elementwise and reduction ops (shared by core/ops.h, the functor header
// core/math.h and every backend).
#pragma once
#include <cstdint>

namespace hz {

enum class UnaryOp : uint8_t {
  Neg, Exp, Log, Sqrt, Rsqrt, Abs, Square, Tanh, Sigmoid, Relu, Relu2, Silu, Gelu, LogSigmoid, Count
};
static_assert(static_cast<int>(UnaryOp::Count) == 14, "update unary_op_name, core/math.h and the kernels");

enum class BinaryOp : uint8_t { Add, Sub, Mul, Div, Maximum, Minimum, Count };
static_assert(static_cast<int>(BinaryOp::Count) == 6, "update binary_op_name, core/math.h and the kernels");

enum class ReduceOp : uint8_t { Sum, Mean, Max, Count };
static_assert(static_cast<int>(ReduceOp::Count) == 3, "update reduce_op_name");

}  // namespace hz
