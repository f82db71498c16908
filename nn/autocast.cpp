#include "nn/autocast.h"

#include "core/error.h"
#include "core/names.h"

namespace hz::nn {

namespace {
const char* const kPrecisionNames[] = {"fp32", "bf16"};
}  // namespace
const char* name(Precision p) { return enum_name(p, kPrecisionNames); }
Precision parse_precision(const std::string& s) { return parse_name<Precision>(s, kPrecisionNames, "precision"); }
DType compute_dtype_of(Precision p) { return p == Precision::BF16 ? DType::BF16 : DType::F32; }

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
