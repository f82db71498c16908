#include "nn/autocast.h"

#include "core/error.h"

namespace hz::nn {

namespace {
thread_local DType t_compute = DType::F32;
}

DType compute_dtype() { return t_compute; }
bool autocast_active() { return t_compute == DType::BF16; }

ComputeScope::ComputeScope(DType dt) : prev_(t_compute) {
  HZ_CHECK(dt == DType::F32 || dt == DType::F64 || dt == DType::BF16, ValueError,
           "compute dtype must be f32, f64 or bf16, got ", dtype_name(dt));
  t_compute = dt;
}
ComputeScope::~ComputeScope() { t_compute = prev_; }

}  // namespace hz::nn
