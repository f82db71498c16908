// Horizon: the dtype modules compute in (mixed precision).
//
// Parameters stay in their own dtype (f32 master weights); inside a ComputeScope(bf16), Linear
// multiplies bf16 copies of its weight and input (f32 accumulation in the GEMM), Embedding returns
// bf16 rows, and the activations that follow are bf16. Norm statistics, softmax/log-sum-exp, the
// loss and every parameter gradient stay f32 (the ops compute them in f32 and ag::cast returns the
// gradient in the parameter's dtype). Transformer::forward opens the scope from its compute_dtype,
// so training, evaluation and generation all run at the model's precision.
// Thread-local; scopes nest.
#pragma once
#include <string>

#include "core/dtype.h"

namespace hz::nn {

// A run's precision (recipe run.precision): fp32, or bf16 (f32 master weights and optimizer state,
// bf16 activations and GEMMs with f32 accumulation).
enum class Precision : uint8_t { FP32, BF16, Count };
const char* name(Precision p);                      // fp32 | bf16
Precision parse_precision(const std::string& s);  // throws ValueError listing the names
DType compute_dtype_of(Precision p);              // F32 | BF16

// The current compute dtype; F32 (or F64) means "as stored" (no casts).
DType compute_dtype();
// True when modules cast to a lower precision (bf16).
bool autocast_active();

class ComputeScope {
 public:
  explicit ComputeScope(DType dt);
  ~ComputeScope();
  ComputeScope(const ComputeScope&) = delete;
  ComputeScope& operator=(const ComputeScope&) = delete;

 private:
  DType prev_;
};

}  // namespace hz::nn
