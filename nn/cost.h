// Horizon: what each module states about its own memory, next to the code that allocates it. The
// memory plan (train/memory_plan.h) adds these up; a module that keeps something new says so here,
// in its own cost(), and nothing above it changes.
//
// For one call of B sequences of T rows (this rank's rows under context parallelism), N = B T
// tokens, activations of `act` bytes (4 f32, 2 bf16, 8 f64), a module reports:
//   kept       the bytes its forward keeps for its backward without recomputation;
//   transient  the bytes its backward holds on top of that at its peak (the gradients it makes and
//              frees before returning);
//   inference  the bytes a forward without gradients (evaluation) holds at its peak on top of the
//              module's input, its output included.
// Norms' statistics, log-sum-exps and FoX's f32 tensors count 4 bytes each.
#pragma once
#include <cstdint>

namespace hz::nn {

struct CallShape {
  int64_t batch = 0;  // B
  int64_t rows = 0;   // T
  int64_t act = 4;    // bytes of an activation
  // an f32 call on a GPU without run.exact_f32_attention: attention at head_dim 64 or 128 runs the
  // split tensor-core kernels, which take their inputs as bf16 pairs (as many bytes as the f32
  // tensors) for the length of the call
  bool split_attention = false;
  int64_t tokens() const { return batch * rows; }
};

struct ActivationCost {
  int64_t kept = 0, transient = 0, inference = 0;
};

// One layer's attention as a route sees it (nn/route.h): the call, the layer's q/k/v heads and
// whether FoX's forget gates travel with its keys.
struct AttnShape {
  CallShape call;
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  bool fox = false;
  bool key_rates = false;  // GRAPE-A's dist_k travels with the keys (spec.additive key / query_key)
};

// A block (nn/transformer.h): what it keeps under each train.recompute setting and the two moments
// of its backward (inside the MLP's backward, inside the attention's).
struct BlockCost {
  int64_t full = 0;            // kept without recomputation
  int64_t kept_attention = 0;  // kept under recompute=attention: the block input, the residual, the
                               // second normed input and its statistics, the MLP's activations
  int64_t kept_layer = 0;      // kept under recompute=layer: the block input
  int64_t output = 0;          // the block's output (recomputed with the layer)
  int64_t mlp_kept = 0;        // the MLP's activations
  int64_t after_mlp = 0;       // freed when the MLP's backward is done: the residual, the second normed input
  int64_t mlp_transient = 0, attention_transient = 0;
  int64_t inference = 0;       // a no-grad forward's peak on top of the block's input
};

// The final norm and the loss head (nn/transformer.h): the norm's input and output kept, the
// loss's chunk of logits and their gradient, and the head's backward (the weight gradient in f32
// and one slice's product added into it, dh). inference: scoring without gradients
// (Transformer::token_nll): the last block's output and the normed hidden states, one chunk of
// logits (bf16 ones with the loss rows' f32 working copy), and the per-token losses (f64).
struct HeadCost {
  int64_t kept = 0, logits = 0, transient = 0, inference = 0;
};

}  // namespace hz::nn
