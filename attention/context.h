// Horizon: context parallelism, one sequence of T tokens split over the N ranks of a group.
//
// Layout (zigzag, balanced for causal work): the sequence is cut into 2N chunks,
//     chunk c = positions [floor(c T / 2N), floor((c + 1) T / 2N))      (T need not divide),
// and rank r of the group holds chunks r and 2N-1-r: its local tokens are chunk r followed by
// chunk 2N-1-r. Under causal attention chunk c costs about c + 1/2 chunk-squares, so every rank
// does about N chunk-squares. Every position-dependent quantity uses the global position (RoPE
// angles, windows, SCOPE scopes, scale-invariant t, LogN's n, SWAN's row, ALiBi distances,
// document bounds): the fused op's q_offset places each chunk's queries where they sit.
//
// Attention (context_attention), per layer, from what its heads can see:
//   halo        every head has a window (w_h > 0) and W - 1 = max_h w_h - 1 keys fit in the
//               shortest chunk: chunk c needs only the W - 1 keys before its start, the tail of
//               chunk c - 1. Rank r sends the tail of its chunk r up to rank r + 1 and the tail of
//               its chunk 2N-1-r down to rank r - 1 (rank N-1 keeps its chunk N-1 tail for its own
//               chunk N): 2 (W - 1) rows of k and of v per rank, whatever T is. Keys in the halo
//               buffer [tail | chunk] sit at buffer positions, which shift every position by the
//               same amount: windows, distances and visible counts are unchanged, and the terms
//               that read absolute positions (packed documents' bounds, SWAN's row index) get the
//               buffer's first global position as the op's key_position.
//   ring        otherwise (an unbounded head, a window longer than a chunk), by default
//               (parallel.context_exchange: ring): the ranks' key/value blocks go round the group
//               r -> r + 1 in N - 1 steps, each transfer posted before the step's attention and
//               waited after it, so it overlaps the compute (NCCL: on the communication stream;
//               MPI: progressed between the step's kernel calls). Each step attends this rank's two
//               query chunks to the chunks of the block held that start at or before them, one
//               fused-op call per pair placed by q_offset and key_position (LogN's n over the whole
//               row: logn_whole_row), and merges the calls by their log-sum-exps in step order; a
//               sink is folded in once at the end. Backward: the blocks go round again, each with
//               its dK/dV accumulator (the accumulation dtype) beside it, and the accumulators end
//               at their owners; the calls' backward reads the rows' final out and lse, which makes
//               each exact. No rank ever holds more than two blocks, and nothing of them is kept
//               for the backward. It sends more than the all-gather (k and v twice, dK/dV in f32
//               under bf16) and keeps less. FoX: c = cumsum(log f) over the whole sequence (each
//               chunk's prefix sum plus the all-gathered totals of the chunks before it) travels
//               with the keys; each call gets the keys' c and its queries' c (piece_forward's
//               layout), and dLoss/dc returns with dK/dV.
//   all-gather  (parallel.context_exchange: all_gather): every rank gathers the group's k and v
//               (N x its rows, Llama 3's scheme) and FoX's log f, keeps them for the backward, and
//               each of its chunks reads keys [0, end of the chunk) at its global offset.
// Backward returns dK/dV of remote keys to their owners: the halo's reverse shift added to the
// owner's tail rows, the ring's accumulators, or, for the all-gather, every rank sends each owner
// the gradient of the owner's rows and the owner sums them in rank order. All are deterministic,
// and no (T, T) tensor exists on any path. The loss is the caller's: a rank's local mean scaled so
// that the average over the group is the mean over the whole sequence (train/trainer.cpp).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attention/fused.h"
#include "autograd/variable.h"

namespace hz::attn {

struct ZigzagLayout {
  int64_t T = 0;  // the whole sequence
  int n = 1;      // ranks in the group
  int rank = 0;   // this rank in the group

  ZigzagLayout() = default;
  ZigzagLayout(int64_t T, int n, int rank);  // checks 1 <= n, 0 <= rank < n, 2n <= T
  int64_t chunk_begin(int64_t c) const { return c * T / (2 * n); }
  int64_t chunk_end(int64_t c) const { return (c + 1) * T / (2 * n); }
  int64_t chunk_len(int64_t c) const { return chunk_end(c) - chunk_begin(c); }
  int64_t min_chunk() const;  // the shortest chunk
  // the chunks rank q holds, in local order
  std::array<int64_t, 2> chunks_of(int q) const { return {q, 2 * n - 1 - q}; }
  std::array<int64_t, 2> chunks() const { return chunks_of(rank); }
  int64_t local_len_of(int q) const;
  int64_t local_len() const { return local_len_of(rank); }
  int64_t max_local_len() const;
  // the global position of each local token, in local order (local_len() values)
  std::vector<int64_t> positions_of(int q) const;
  std::vector<int64_t> positions() const { return positions_of(rank); }
  int owner(int64_t chunk) const { return chunk < n ? static_cast<int>(chunk) : static_cast<int>(2 * n - 1 - chunk); }
};

// The exchange primitives context_attention needs from a group of ranks (train/ adapts a
// dist::Communicator; tests may fake one). Bytes sent are counted for tests and `horizon info`.
class ContextGroup {
 public:
  virtual ~ContextGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // out (size() x in.numel()) = every rank's in, by rank; contiguous
  virtual void all_gather_into(const Tensor& in, Tensor& out) = 0;
  // sends to dest and receives from src at once (-1: no one); contiguous
  virtual void send_recv(const Tensor& send, int dest, Tensor& recv, int src) = 0;
  // send_recv started now, complete at the handle's wait() (the ring overlaps it with compute);
  // both tensors stay alive and untouched until then. The default completes at once.
  class Pending {
   public:
    virtual ~Pending() = default;
    virtual void wait() {}
    virtual void progress() {}  // lets the transfer advance (MPI's progress engine) between kernels
  };
  virtual std::unique_ptr<Pending> start_send_recv(const Tensor& send, int dest, Tensor& recv, int src) {
    send_recv(send, dest, recv, src);
    return std::make_unique<Pending>();
  }
  int64_t bytes_sent = 0;  // by context_attention through this group, forward and backward
};

enum class ContextExchange : uint8_t { Halo, AllGather, Ring };
const char* name(ContextExchange e);
// parse("ring") etc.; throws ValueError naming the choices
ContextExchange parse_context_exchange(const std::string& s);

struct ContextParallel {
  std::shared_ptr<ContextGroup> group;
  ZigzagLayout layout;
  // how layers that read the whole sequence (an unbounded head, a window longer than a chunk)
  // exchange keys: Ring or AllGather (parallel.context_exchange)
  ContextExchange global = ContextExchange::Ring;
};

// The rows of t along `dim` (of size L.T, global order) that this rank holds, in local order.
Tensor local_rows(const Tensor& t, int64_t dim, const ZigzagLayout& L);

// The path a layer with this kernel config takes at this layout (see the header comment): the
// halo where it applies, else `global`.
ContextExchange context_exchange(const AttnConfig& cfg, const ZigzagLayout& layout,
                                 ContextExchange global = ContextExchange::Ring);
// Rows of k and v (each) this rank sends per layer call: forward and backward in the storage
// dtype, and the ring's dK/dV rows in the accumulation dtype:
//   halo        2 (W - 1) at most, forward and backward;
//   all-gather  (N - 1) x the longest local length, forward and backward;
//   ring        T - (the next rank's local length) forward and again backward (k and v go round
//               once more), and T rows of dK/dV (every block's gradient travels home).
// With FoX each row carries its log f (halo, all-gather) or its global c (ring; B H values in the
// accumulation dtype), and the ring all-gathers each rank's two chunk totals of log f forward and
// of dLoss/dc backward: fox_totals (B, H) tensors in the accumulation dtype, 4 (N - 1).
struct ContextTraffic {
  int64_t fwd_rows = 0, bwd_rows = 0, bwd_acc_rows = 0, fox_totals = 0;
};
ContextTraffic context_traffic(const AttnConfig& cfg, const ZigzagLayout& layout,
                               ContextExchange global = ContextExchange::Ring, bool fox = false);

// q (B, H, Tl, D), k/v (B, Hkv, Tl, D): this rank's local rows (Tl = layout.local_len(), in local
// order), RoPE already applied at the global positions; cfg built for the whole sequence
// (make_attn_config at T, documents over (B, T)); q_offset and key limits must be left at their
// defaults (the op sets them per chunk); terms as fused_attention's, FoX's log forget gates
// (B, H, Tl) this rank's rows (they travel with k and v). Returns out (B, H, Tl, D) equal to the
// rows of the single-rank fused_attention at these positions; differentiable in q, k, v and the
// terms.
ag::Variable context_attention(const ag::Variable& q, const ag::Variable& k, const ag::Variable& v, const AttnConfig& cfg,
                               const ContextParallel& cp, const AttnTerms& terms = {});

}  // namespace hz::attn
