// Horizon: basic layers. Shapes: x (..., C_in) -> (..., C_out).
#pragma once
#include "autograd/functions.h"
#include "nn/autocast.h"
#include "nn/cost.h"
#include "nn/module.h"

namespace hz::nn {

class Linear : public Module {
 public:
  // weight (out, in) ~ normal(init_std); bias (out) = 0 when enabled (default: none).
  Linear(int64_t in, int64_t out, bool bias = false, double init_std = 0.02, DType dt = DType::F32);
  // Under a bf16 ComputeScope (nn/autocast.h) the product runs on bf16 copies of x and the weight.
  ag::Variable forward(const ag::Variable& x) const;
  ag::Variable weight, bias;
};

class Embedding : public Module {
 public:
  Embedding(int64_t vocab, int64_t dim, double init_std = 0.02, DType dt = DType::F32);
  ag::Variable forward(const Tensor& ids) const;  // bf16 rows under a bf16 ComputeScope
  ag::Variable weight;  // (V, C)
};

class RMSNorm : public Module {
 public:
  RMSNorm(int64_t dim, double eps = 1e-6, DType dt = DType::F32);
  ag::Variable forward(const ag::Variable& x) const { return ag::rms_norm(x, weight, eps); }
  ag::Variable weight;  // (C), initialised to 1
  double eps;
};

enum class MlpKind : uint8_t { SwiGLU, ReLU2, GELU, Count };
static_assert(static_cast<int>(MlpKind::Count) == 3, "update mlp names");
const char* mlp_name(MlpKind k);
MlpKind parse_mlp(const std::string& s);  // "swiglu", "relu2", "gelu"

// SwiGLU: w2(silu(w1 x) * w3 x); ReLU2: w2(relu(w1 x)^2); GELU: w2(gelu(w1 x)).
// w2 is a residual projection: its init std is resid_std.
// Not tiled over tokens (ALST's tiled MLP). The MLP is per token, so running it on tiles of rows
// would change no value; what it saves is memory, and only under train.recompute=layer at long T,
// where the block being recomputed holds its MLP activations (N F x 2-4) and the MLP's backward
// buffer (N F, SwiGLU 2 N F) at once. The memory plan (train/memory_plan.h) puts that at 2.25 of
// the 8.1 GiB predicted (7.9 GiB measured) for the 124M shape at T 65,536 in f32 (`horizon info
// recipes/bench/gpt2_small.yaml data.batch_size=1 data.seq_len=65536 train.recompute=layer`):
// tiling would bring the peak to about 6 GiB. Without recomputation the kept activations
// (38.7 GiB there) dominate and tiling saves nothing that matters. Until a run needs it, the
// simpler untiled MLP stays.
class MLP : public Module {
 public:
  MLP(MlpKind kind, int64_t dim, int64_t hidden, double init_std, double resid_std, DType dt);
  ag::Variable forward(const ag::Variable& x) const;
  // kept: the hidden activations, N F x 3 (SwiGLU: both projections and the gated product, one op) or
  // x 2 (ReLU^2, GELU); transient: the gradients of its input and output (2 N C) and of the
  // hidden layer (N F; SwiGLU 2 N F)
  ActivationCost cost(const CallShape& s) const;
  MlpKind kind;
  std::shared_ptr<Linear> w1, w2, w3;
};

}  // namespace hz::nn
