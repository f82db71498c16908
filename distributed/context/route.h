// Horizon: context parallelism as a layer's route (nn/route.h): one sequence of T tokens split over
// the N ranks of a group (distributed/context/layout.h's zigzag). The ids of a call are this rank's
// share; every layer attends through attend(), which takes the exchange its heads need
// (distributed/context/exchange.h: a halo for window layers, else the ring or the all-gather).
// The result equals the rows of the single-rank fused op at these positions, forward and backward.
// The loss is the caller's: a rank's local mean scaled so that the average over the group is the
// mean over the whole sequence (train/trainer.cpp).
#pragma once
#include <memory>
#include <string>

#include "distributed/context/exchange.h"
#include "nn/route.h"

namespace hz::dist {

class ContextRoute final : public nn::AttentionRoute {
 public:
  // group: the context-parallel group's communicator (it must outlive every graph recorded through
  // the route); T: the whole sequence; global: how layers that read the whole sequence exchange
  // keys (Ring or AllGather).
  ContextRoute(Communicator& group, int64_t T, ContextExchange global = ContextExchange::Ring);
  // A route that plans and attends nothing (the memory plan and `horizon info`, before any rank
  // runs): N ranks, laid out as rank 0 of the group.
  static std::shared_ptr<ContextRoute> planning(int64_t T, int N, ContextExchange global = ContextExchange::Ring);
  std::string name() const override;
  int64_t sequence_length(int64_t rows) const override;  // checks rows == this rank's share
  Tensor share(const Tensor& whole, int64_t dim) const override { return local_rows(whole, dim, layout()); }
  bool whole_sequence() const override { return false; }
  // q (B, H, Tl, D), k/v (B, Hkv, Tl, D): this rank's rows, rotated at the global positions; cfg
  // built for the whole sequence (documents over (B, T)); q_offset and key limits left at their
  // defaults (set per chunk here); FoX's log forget gates (B, H, Tl) this rank's rows.
  ag::Variable attend(const ag::Variable& q, const ag::Variable& k, const ag::Variable& v, const attn::AttnConfig& cfg,
                      const attn::AttnTerms& terms) override;
  // x (.., .., Tl, ..) this rank's rows -> the whole sequence's prefix sums at them (sequence_prefix).
  ag::Variable running_sum(const ag::Variable& x) override;

  // The memory plan (nn/route.h): the longest share, and what a layer's call keeps beyond the
  // layer's own activations: the gathered keys and values (all-gather), the halos, or the ring's
  // packed own block with out and lse in the accumulation dtype (rank 0's layout).
  int64_t rows_held(int64_t T) const override;
  int64_t kept_bytes(const attn::AttnConfig& cfg, const nn::AttnShape& s) const override;
  // The traffic plan: the exchange a layer takes and the bytes the busiest rank of the group sends
  // per layer call (k and v, forward and backward, in the activations' dtype; the ring's dK/dV and
  // FoX's log f or c in the accumulation dtype; context_traffic's rows).
  ContextExchange exchange(const attn::AttnConfig& cfg, bool fox = false) const {
    return exchange_for(cfg, layout(), global_, fox);
  }
  int64_t traffic_bytes(const attn::AttnConfig& cfg, const nn::AttnShape& s) const;

  const ZigzagLayout& layout() const { return link_->layout; }
  ContextExchange global() const { return global_; }
  int64_t bytes_sent() const { return link_->bytes_sent; }  // by this rank, forward and backward

 private:
  ContextRoute(Communicator* group, const ZigzagLayout& layout, ContextExchange global);  // group null: planning
  std::shared_ptr<ContextLink> link_;
  ContextExchange global_;
};

}  // namespace hz::dist
