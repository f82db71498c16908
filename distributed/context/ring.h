// Horizon: context parallelism's ring, for the layers that read the whole sequence, without
// gathering it. The group's key/value blocks (each rank's local k and v packed as one
// (2, B, Hkv, Tl, D) tensor) go round the ring r -> r + 1, one step at a time, N - 1 transfers; at
// step s rank r holds rank (r - s)'s block and attends each of its two query chunks to each key
// chunk of it that is not after the query chunk, one partial attention per (query chunk, key chunk)
// pair (attention/partial.h), q_offset and key_position placing both at their global positions
// (LogN's n counted over the whole row: logn_whole_row). The parts combine by their log-sum-exps in
// the accumulation dtype, in step order (deterministic); the sink, one more term of every row's
// denominator, is folded in once at the end. The next block's transfer is posted before the step's
// calls and waited after them, so it overlaps the compute (NCCL: on the communication stream; MPI:
// progressed between the step's kernel calls).
// Backward: each part's backward with the rows' FINAL out and lse is exact for its keys, so every
// block goes round again with its dK/dV accumulator (the accumulation dtype) beside it: rank r adds
// its share to the block it holds and passes both on; after N steps each accumulator reaches its
// owner. dQ accumulates locally. Never more than two blocks (and their accumulators) live at once,
// and nothing of the gathered sequence is kept for the backward.
// FoX: c = cumsum(log f) over the whole sequence (sequence_prefix: each chunk's prefix sum plus the
// all-gathered totals of the chunks before it) travels with the keys; each part gets the keys' c
// and its queries' c (partial_attention's layout), and dLoss/dc returns with dK/dV. GRAPE-A's key
// rates dist_k travel likewise with their keys and their gradient with dK/dV; the query rates stay local.
#pragma once
#include <array>
#include <memory>
#include <vector>

#include "distributed/context/exchange.h"

namespace hz::dist {

// x with the local rows on dim 2 ((B, H, Tl) FoX's log f; (B, G, Tl, D/2) accumulated RoPE steps) ->
// the prefix sums over the whole sequence at the local positions: each chunk's own prefix sum plus
// the sum of every chunk before it (the chunks' totals all-gathered, added in chunk order).
// Backward: dLoss/dx_m = sum_{p >= m} dc_p, each chunk's reverse prefix sum plus the totals of every
// chunk after it.
ag::Variable sequence_prefix(const ag::Variable& x, const std::shared_ptr<ContextLink>& link);

// One layer call's ring, made by std::make_shared. attend() runs the forward and records a node
// that keeps the ring and whose backward is backward(); the members are what the backward reads.
class Ring : public std::enable_shared_from_this<Ring> {
 public:
  Ring(std::shared_ptr<ContextLink> link, const attn::AttnConfig& cfg);
  // q (B, H, Tl, D), k/v (B, Hkv, Tl, D) this rank's rows; terms as the fused op's, FoX's global c
  // (sequence_prefix) in place of its log f. Returns out (B, H, Tl, D) in q's dtype.
  ag::Variable attend(const ag::Variable& q, const ag::Variable& k, const ag::Variable& v, const attn::AttnTerms& terms,
                      const ag::Variable& fox_c);

 private:
  // What goes round: a rank's k and v, packed (2, B, Hkv, rows, D), with FoX the global c at those
  // rows (B, H, rows), with GRAPE-A's key rates their dist_k (B, H, rows); in the backward, the
  // gradients of each.
  struct Block {
    Tensor kv, c, dk;
  };
  // One part: chunk qc's rows [qoff, qoff + qlen) of the local rows against key chunk kc at rows
  // [koff, koff + klen) of its owner's block.
  struct Part {
    int64_t qc, qoff, qlen, kc, koff, klen;
  };
  // The transfers of one step (the block, and its c with FoX), overlapping the step's parts.
  struct Transfer {
    std::vector<std::unique_ptr<Request>> pending;
    void progress();
    void wait();
  };
  std::vector<Part> parts(int owner) const;  // the parts of the step holding `owner`'s block
  attn::AttnConfig part_config(const Part& p) const;
  int owner_at(int step) const { return (L().rank - step + L().n) % L().n; }
  Block new_block(int owner, DType kvdt, bool zero) const;
  Transfer start(const Block& send, Block& recv);
  Transfer pass_on(int step, const Block& held, Block& next);  // nothing at the last step
  Tensor part_kv(const Block& b, int which, const Part& p) const;
  Tensor part_fox(const Block& b, const Part& p, int64_t q_offset) const;  // partial_attention's layout
  Tensor part_dist_q(const Part& p) const;                 // GRAPE-A's rates of the part's queries
  Tensor part_dist_k(const Block& b, const Part& p) const;  // and of its keys
  int chunk_index(const Part& p) const { return p.qoff == 0 ? 0 : 1; }
  const ZigzagLayout& L() const { return link_->layout; }
  void backward(const Tensor& gout, ag::Grads& gr);

  std::shared_ptr<ContextLink> link_;
  attn::AttnConfig cfg_;
  int64_t B_ = 0, H_ = 0, Hk_ = 0, D_ = 0;
  DType dt_ = DType::F32, adt_ = DType::F32;
  Device dev_;
  bool fox_ = false;
  bool dist_k_ = false;      // GRAPE-A's key rates travel in the blocks
  Tensor dq_;                // GRAPE-A's query rates at the local rows (accumulation dtype), or undefined
  Tensor cval_;              // LogN's c, or undefined
  Tensor cq_;                // FoX's c at the local rows (accumulation dtype)
  Block own_;                // this rank's block
  std::array<Tensor, 2> q_;  // the two query chunks, contiguous
  Tensor out_, lse_;         // combined over every part, the sink folded (accumulation dtype)
  Tensor zval_;              // the sinks (accumulation dtype, on the device), or undefined
  DType zdt_ = DType::F32;
  Device zdev_;
  int ic_ = -1, iz_ = -1, ifx_ = -1;  // the graph inputs of LogN's c, the sinks, FoX's c
  int idq_ = -1, idk_ = -1;           // and of GRAPE-A's rates
  DType dq_dt_ = DType::F32, dk_dt_ = DType::F32;  // the rates' own dtypes (their gradients come back in them)
};

}  // namespace hz::dist
