// Horizon: how a layer's attention reaches the keys other ranks of its context-parallel group hold
// (distributed/context/layout.h), from what its heads can see:
//   halo        every head has a window (w_h > 0) and W - 1 = max_h w_h - 1 keys fit in the
//               shortest chunk: chunk c needs only the W - 1 keys before its start, the tail of
//               chunk c - 1. Rank r sends the tail of its chunk r up to rank r + 1 and the tail of
//               its chunk 2N-1-r down to rank r - 1 (rank N-1 keeps its chunk N-1 tail for its own
//               chunk N): 2 (W - 1) rows of k and of v per rank, whatever T is. Keys in the halo
//               buffer [tail | chunk] sit at buffer positions, which shift every position by the
//               same amount: windows, distances and visible counts are unchanged, and the terms
//               that read absolute positions (packed documents' bounds, SWAN's row index) get the
//               buffer's first global position as the op's key_position.
//               Sink tokens beside windows (no chunks, no packed documents, no FoX, S within chunk
//               0) take the halo too: rank 0 sends the sequence's first S keys to every rank once
//               per layer call (broadcast_sinks), and each chunk's buffer is [the sinks it lacks |
//               tail | chunk]. Where a gap separates the sinks from the tail, buffer indices are no
//               positions: the op places the sinks at indices 0..S-1 (key_position 0), which keeps
//               the window and sink rules and the visible counts, and the terms that read distances
//               or positions get each row's true position as token positions (fused.h).
//   ring        otherwise (an unbounded head, a window longer than a chunk), by default
//               (parallel.context_exchange: ring): distributed/context/ring.h. It sends more than
//               the all-gather (k and v twice, dK/dV in f32 under bf16) and keeps less.
//   all-gather  (parallel.context_exchange: all_gather): every rank gathers the group's k and v
//               (N x its rows, Llama 3's scheme) and FoX's log f, keeps them for the backward, and
//               each of its chunks reads keys [0, end of the chunk) at its global offset.
// Backward returns dK/dV of remote keys to their owners: the halo's reverse shift added to the
// owner's tail rows, the ring's accumulators, or, for the all-gather, every rank sends each owner
// the gradient of the owner's rows and the owner sums them in rank order. All are deterministic,
// and no (T, T) tensor exists on any path.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "attention/fused.h"
#include "distributed/communicator.h"
#include "distributed/context/layout.h"

namespace hz::dist {

enum class ContextExchange : uint8_t { Halo, AllGather, Ring, Count };
const char* name(ContextExchange e);
// parallel.context_exchange: ring or all_gather (the halo is chosen per layer, where it applies)
ContextExchange parse_context_exchange(const std::string& s);

// The exchange a layer with this kernel config takes at this layout: the halo where it applies,
// else `global`.
// fox: the layer has FoX's forget gates (whose decay spans the gap between sinks and a window).
ContextExchange exchange_for(const attn::AttnConfig& cfg, const ZigzagLayout& layout,
                             ContextExchange global = ContextExchange::Ring, bool fox = false);

// Rows of k and v (each) this rank sends per layer call: forward and backward in the storage
// dtype, and the ring's dK/dV rows in the accumulation dtype:
//   halo        2 (W - 1) at most, forward and backward; with sink tokens rank 0 sends (N - 1) S more
//               forward and every rank (N - 1) S more backward (the sinks' gradients all-gathered);
//   all-gather  (N - 1) x the longest local length, forward and backward;
//   ring        T - (the next rank's local length) forward and again backward (k and v go round
//               once more), and T rows of dK/dV (every block's gradient travels home).
// With FoX each row carries its log f (halo, all-gather) or its global c (ring; B H values in the
// accumulation dtype), and the ring all-gathers each rank's two chunk totals of log f forward and
// of dLoss/dc backward: fox_totals (B, H) tensors in the accumulation dtype, 4 (N - 1).
struct ContextTraffic {
  int64_t fwd_rows = 0, bwd_rows = 0, bwd_acc_rows = 0, fox_totals = 0;
};
ContextTraffic context_traffic(const attn::AttnConfig& cfg, const ZigzagLayout& layout,
                               ContextExchange global = ContextExchange::Ring, bool fox = false);

// A group as the exchanges use it: its communicator (alive for as long as any graph recorded
// through it), this rank's layout, and the bytes this rank has sent through it.
struct ContextLink {
  Communicator* comm = nullptr;
  ZigzagLayout layout;
  int64_t bytes_sent = 0;
};

// (B, Hkv, Tl, D) local rows -> (B, Hkv, T, D) in global order (the all-gather); backward: each
// owner receives the gradient of its rows from every rank and sums them in rank order.
ag::Variable gather_sequence(const ag::Variable& x, const std::shared_ptr<ContextLink>& link);
// (B, Hkv, Tl, D) local rows -> (B, Hkv, h_a + h_b, D): the W - 1 keys before each local chunk
// (fewer at the sequence start), from the owners of the chunks before them; backward: the reverse.
ag::Variable exchange_halo(const ag::Variable& x, int64_t W, const std::shared_ptr<ContextLink>& link);
// (B, Hkv, Tl, D) local rows -> (B, Hkv, S, D) the sequence's first S rows, from rank 0 (S must lie
// in chunk 0); backward: the ranks' gradients all-gathered, summed in rank order into rank 0's rows.
ag::Variable broadcast_sinks(const ag::Variable& x, int64_t S, const std::shared_ptr<ContextLink>& link);
// Rows of the tail of chunk c - 1 that chunk c reads under windows of at most W keys.
int64_t halo_len(const ZigzagLayout& L, int64_t W, int64_t c);
// (The farthest reach of a layer's heads, 0 when one is unbounded, is attention/'s attn::max_reach:
// chunked layers take the halo too.)

int64_t bytes_of(const Tensor& t);

}  // namespace hz::dist
