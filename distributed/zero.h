// Horizon: ZeRO stage 1 (recipe parallel.shard_optimizer): each data-parallel rank keeps and updates
// 1/N of the optimizer state; parameters and gradients stay whole on every rank.
//
// The plan (ZeroPlan, computed alike on every rank from the optimizer's description):
//   - AdamW updates element by element: the elements of all its parameters, concatenated in the
//     optimizer's order, are cut into N ranges of S = ceil(total / N) elements; rank r owns
//     [r S, (r+1) S) and gets each parameter's intersection with that range as a piece (a flat
//     range of the parameter).
//   - Muon orthogonalises whole matrices: its matrices are dealt out whole, largest first, each to
//     the rank holding the fewest Muon elements so far (ties: the lower rank).
//   Every element of every parameter has exactly one owner.
// A step: the gradients are averaged over the ranks as without sharding (dist::GradSync); each rank
// runs the replicated optimizer's own arithmetic on its pieces only (AdamW on views of the flat
// parameter and gradient, Muon on its whole matrices); then one all-gather of the pieces gives every
// rank every parameter. The parameters are therefore bitwise those of the replicated optimizer, on
// every world size.
// State dicts use the replicated optimizer's keys and shapes ("adamw/<param>/exp_avg", ...,
// "composite/step"), so a checkpoint depends neither on sharding nor on the world size:
//   - state_dict() is collective: each rank broadcasts its share in turn and every rank receives the
//     whole state (model surgery carries state this way);
//   - state_dict_on(root) is collective too, but only `root` keeps the shares (checkpoint saves: the
//     other ranks hold one share at a time on top of their own);
//   - load_state_dict() takes the whole state on every rank and keeps each rank's share.
// Parameters must share one dtype (f32/f64) and device and be contiguous; the exchange pads every
// share to the largest one.
// Not done: ZeRO-2's reduce-scatter of gradients (the all-reduce stays) and FSDP's sharded
// parameters.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "distributed/communicator.h"
#include "optim/optimizer.h"

namespace hz::dist {

// A flat element range [lo, hi) of one parameter: parameter `param` of spec `part` (groups
// flattened in order).
struct ZeroPiece {
  size_t part = 0, param = 0;
  int64_t lo = 0, hi = 0;
  int64_t numel() const { return hi - lo; }
};

class ZeroPlan {
 public:
  ZeroPlan(const std::vector<optim::OptimizerSpec>& specs, int world);
  int world() const { return static_cast<int>(by_rank_.size()); }
  const std::vector<ZeroPiece>& pieces(int rank) const { return by_rank_.at(rank); }
  int64_t share_numel(int rank) const;  // parameter elements rank owns
  int64_t max_share() const;            // the largest share (the exchange's per-rank size)
  int64_t total() const { return total_; }

 private:
  std::vector<std::vector<ZeroPiece>> by_rank_;
  int64_t total_ = 0;
};

class ZeroOptimizer : public optim::Optimizer {
 public:
  // The optimizer `specs` describe (optim::build), sharded over comm's ranks. Throws ValueError for
  // parameters of mixed dtypes or devices, or not contiguous.
  ZeroOptimizer(Communicator& comm, std::vector<optim::OptimizerSpec> specs);
  ~ZeroOptimizer() override;
  std::string name() const override { return name_; }  // the replicated optimizer's name
  // Collective: every rank calls it with the same lr_mult.
  void step(double lr_mult = 1.0, double grad_scale = 1.0) override;
  void state_dict(std::map<std::string, Tensor>& out) const override;  // collective, whole state on every rank
  void state_dict_on(int root, std::map<std::string, Tensor>& out) const;  // collective, whole state on root only
  void check_state_dict(const std::map<std::string, Tensor>& in) const override;
  void load_state_dict(const std::map<std::string, Tensor>& in) override;
  void zero_grad() override;

  const ZeroPlan& plan() const { return plan_; }
  int64_t state_numel() const;  // optimizer-state elements this rank holds
  int64_t state_bytes(int rank) const;  // bytes of state rank holds (-1: all ranks together)
  double comm_seconds() const { return comm_seconds_; }  // cumulative time in the parameter all-gather

 private:
  ag::Variable& param(const ZeroPiece& p) const { return *params_[p.part][p.param].second; }
  const std::string& param_name(const ZeroPiece& p) const { return params_[p.part][p.param].first; }
  std::string full_key(const ZeroPiece& p, const std::string& buffer) const;
  int64_t share_state_numel(int rank) const;
  void gather_state(int root, std::map<std::string, Tensor>& out) const;  // root < 0: every rank

  Communicator& comm_;
  std::vector<optim::OptimizerSpec> specs_;
  std::vector<optim::NamedParams> params_;  // per spec, its groups' parameters in order
  ZeroPlan plan_;
  std::string name_;
  std::vector<std::unique_ptr<ag::Variable>> proxies_;  // per local piece: a view of an AdamW piece, or null
  std::unique_ptr<optim::Optimizer> local_;             // the same optimizer over this rank's pieces
  mutable double comm_seconds_ = 0;
};

}  // namespace hz::dist
