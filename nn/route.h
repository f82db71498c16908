// Horizon: how a layer's attention reaches its keys. AttentionLayer::forward projects, normalises
// and rotates q, k and v, then hands them to a route:
//   - the fused op over the call's own keys (the default, fused_route());
//   - a KV cache, which keeps the keys of earlier calls (decoding, nn/kv_cache.h);
//   - a group of ranks that each hold a share of the sequence (context parallelism,
//     distributed/context/route.h).
// q (B, H, T, D) and k, v (B, Hkv, T, D) arrive rotated at the rows' positions; the route returns
// the attention output (B, H, T, D), differentiable where the route is used for training.
#pragma once
#include <cstdint>
#include <string>

#include "attention/fused.h"
#include "autograd/functions.h"
#include "nn/cost.h"

namespace hz::nn {

class AttentionRoute {
 public:
  virtual ~AttentionRoute() = default;
  virtual std::string name() const = 0;
  // Routes whose call holds only a share of the sequence: its whole length, given the rows this
  // call holds (a route checks them), and this call's share of a tensor over the whole sequence
  // along dim (the positions). A route over the call's own rows returns both unchanged.
  virtual int64_t sequence_length(int64_t rows) const { return rows; }
  virtual Tensor share(const Tensor& whole, int64_t dim) const {
    (void)dim;
    return whole;
  }
  // Whether the call's rows are the whole sequence (LaMPE and a KV cache need every key here).
  virtual bool whole_sequence() const { return true; }
  virtual ag::Variable attend(const ag::Variable& q, const ag::Variable& k, const ag::Variable& v,
                              const attn::AttnConfig& cfg, const attn::AttnTerms& terms) = 0;
  // Inclusive prefix sums of x over the sequence (dim 2) as the whole sequence has them at this call's
  // rows: accumulated RoPE angles (rope_angles: accumulated). Over the call's own rows a plain
  // cumsum; a route holding a share adds what comes before it (the ranks before it, the tokens a KV
  // cache holds from earlier calls). Differentiable where the route is used for training.
  virtual ag::Variable running_sum(const ag::Variable& x) { return ag::cumsum(x, 2); }
  // The memory plan: the most rows of a T-token sequence one rank of this route holds, and the
  // bytes a layer's call keeps for its backward beyond the layer's own activations (exchanged keys,
  // a ring's saved state). A route over the call's own rows: T and 0.
  virtual int64_t rows_held(int64_t T) const { return T; }
  virtual int64_t kept_bytes(const attn::AttnConfig& cfg, const AttnShape& s) const {
    (void)cfg;
    (void)s;
    return 0;
  }
};

// attn::fused_attention over the call's own keys; stateless, shared.
AttentionRoute& fused_route();

}  // namespace hz::nn
