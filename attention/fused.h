// Horizon: the fused attention op (CPU: f32, f64, bf16 computing in f32; CUDA: f32, bf16).
//
// Legend: B batch, H query heads, Hkv key/value heads (H % Hkv == 0, query head h reads kv head
// h / (H / Hkv)), Tq queries, Tk keys, D head dim.
//   q (B, H, Tq, D), k (B, Hkv, Tk, D), v (B, Hkv, Tk, D) -> out (B, H, Tq, D) in q's dtype,
//   lse (B, H, Tq) in f32 for bf16 inputs, else in q's dtype.
//
// Alignment, mask, block skipping and logit transforms: attention/tiling.h, which is the one
// definition both devices use. In short: query i sits at position q_offset + i (default
// Tk - Tq: the queries are the last Tq positions); key j is visible iff key_begin <= j < key_end,
// t = p_i - j >= min_distance, t < window[h] (window 0 = unbounded) and, with packed documents,
// j lies in p_i's document; logits are L_ij = r_i a_t s_ij + m_t - slope_h t with
// s_ij = scale q_i . k_j (plus the terms' parts below).
//
// Forward is a tiled online softmax returning out and the row log-sum-exp; backward recomputes
// the probabilities from the log-sum-exp block by block, so no (Tq, Tk) tensor ever exists. Both
// are deterministic on both devices (no float atomics). Files: fused.cpp (checks, planning, device
// dispatch, the autograd node), fused_cpu.cpp (the CPU kernel), attention/cuda/ (the CUDA kernels:
// a simple reference kernel for every dtype and head dim, and bf16 tensor-core kernels for D 64
// and 128).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attention/backend.h"
#include "attention/documents.h"
#include "attention/spec.h"
#include "attention/tiling.h"
#include "autograd/variable.h"

namespace hz::attn {

// Which kernel runs a call on CUDA (CPU tensors always run the CPU kernel):
//   Auto        the tensor-core kernels where they apply (bf16 or f32 inputs, D 64 or 128, the
//               GPU's shared memory; f32 as bf16 pairs, ~2^-16 per product: attention/cuda/mma_body.h),
//               else the reference kernels; the environment variable HZ_ATTN_IMPL=reference|tensor_core
//               overrides Auto (read at each call: the GPU check compares both);
//   Reference   the simple kernels (one warp per query row / key row, fp32 accumulation; f32,
//               f64 and bf16; any D), the definition the fast kernels are checked against;
//   TensorCore  the mma.sync kernels; refused with a clear error where they do not apply.
enum class AttnImpl : uint8_t { Auto, Reference, TensorCore };

// Which implementation runs a CUDA call (attention/backend.h): cuDNN's fused attention where it
// expresses the call, Horizon's kernels (above) elsewhere. A config's Auto takes the process's
// choice, run.attention_backend (set_attention_backend: the trainer and study::load_run set it from
// the recipe; auto by default).
void set_attention_backend(AttnBackend b);
AttnBackend attention_backend();
// Whether f32 calls on CUDA keep to exact f32 arithmetic (the reference kernels) where a config's
// impl and HZ_ATTN_IMPL leave the choice to Auto, instead of the tensor cores' bf16 pairs (~2^-16
// per product); run.exact_f32_attention (the trainer, study::load_run and bench set it). Off by default.
void set_exact_f32_attention(bool on);

struct AttnConfig {
  std::vector<int64_t> window;      // per query head, 0 = unbounded
  int64_t chunk = 0;                // chunked attention: keys from the query's chunk of C positions (tiling.h)
  int64_t sink_tokens = 0;          // the first S positions of each document stay visible (tiling.h)
  int64_t prefix = 0;               // prefix-LM: each document's first P positions attend bidirectionally
  std::vector<double> alibi_slope;  // per query head; empty = no ALiBi
  LogitKind logit = LogitKind::Identity;
  double tau = 10.0;     // scale_invariant
  double swan_a = 362.0; // swan_row
  double beta = 1.0;     // temperature
  bool logn_position = false;  // logn: n = position + 1 rather than the visible keys (spec.h)
  double qtemp_alpha = 0.0, qtemp_beta = 8192.0;  // Llama 4's position temperature (spec.h)
  double scale = 0.0;    // 0 -> 1/sqrt(D)
  int64_t q_offset = -1; // -1 -> Tk - Tq
  int64_t key_begin = 0, key_end = -1;  // -1 -> Tk
  int64_t min_distance = 0;
  // Absolute position of key 0 for the terms that read absolute positions (packed documents'
  // bounds, SWAN's row index without position reset): key j sits at key_position + j and query i
  // at key_position + q_offset + i. Distances, windows and visible counts do not move. Context
  // parallelism's halo buffers, which start W - 1 keys before their chunk, set it.
  int64_t key_position = 0;
  // LogN's n counts the row's visible keys over the whole sequence from absolute position 0,
  // ignoring key_begin/key_end: a caller that splits a row's keys over several calls (context
  // parallelism's ring, distributed/context/ring.h) gives every call the whole row's n.
  bool logn_whole_row = false;
  // Packed documents (attention/documents.h): keys visible only inside the query's document;
  // needs B equal to the documents' batch, key_position + Tk and key_position + q_offset + Tq at
  // most their sequence length, and min_distance 0. With position reset, SWAN's row index counts from the document's start.
  std::shared_ptr<const Documents> documents;
  // Token positions (B, N) f64 on the op's device, N >= key_position + Tk and key_position + q_offset
  // + Tq (undefined: the indices): the drawn position each token carries (PoSE, randomized or real
  // positions, data/positions.h). ALiBi, scale-invariant attention, LogN by position, SWAN's row and
  // Llama 4's temperature read them (tiling.h); masks count indices. Not with documents.
  Tensor positions;
  double temp_c = 0.0;   // temperature: DroPE's c, for a per-document beta (documents only)
  int64_t train_len = 0;   // its C_train
  // Tiles of the CPU kernel and the CUDA reference kernels (0: the device's own: 64 x 64 on CUDA;
  // on the CPU 128 query rows by 128 keys, 256 from 4096 keys on, where the per-tile GEMMs' fixed
  // costs are amortised); the tensor-core kernels have their own (attn_tiles()).
  int64_t block_q = 0, block_k = 0;
  AttnImpl impl = AttnImpl::Auto;
  AttnBackend backend = AttnBackend::Auto;  // on CUDA; Auto: attention_backend()
};

// What a caller that keeps only some keys (the KV cache's rings, context parallelism's halo) asks
// of a config, rather than deriving it again. A head's reach: the most keys back a query of head h
// sees, the nearest of its lower-bound terms' reaches (tiling.h: its window or its chunk; a query
// sees at most the C keys of its chunk); 0 for an unbounded head. A prefix's own rows see their
// whole prefix, beyond it. max_reach: the largest over the heads, 0 when any head is unbounded.
int64_t head_reach(const AttnConfig& cfg, size_t h);
int64_t max_reach(const AttnConfig& cfg);
// Whether the sink tokens can be kept apart from a bounded reach, pinned as the sequence's first S
// keys ahead of the window's (false without sink tokens). Not with chunks (their boundaries follow
// the buffer's indices), a prefix (it sees ahead), packed documents (a document's sinks lie
// anywhere) or FoX's gates (`forget`: the decay between a sink and a query sums every gate between).
bool sinks_pinnable(const AttnConfig& cfg, bool forget);

// The op's config for a layer spec at sequence length T: one window per query head (SCOPE scopes
// follow T unless frozen), ALiBi slopes, the logit transform (temperature's beta = 1 + c ln s with
// s = T / train_len when the spec gives temp_c). Tiles and alignment keep their defaults. The one
// place an AttentionSpec becomes kernel-level settings (nn/attention_layer.cpp and tests use it).
AttnConfig make_attn_config(const AttentionSpec& spec, int64_t n_heads, int64_t T, int64_t train_len = 0);

// The kernel parameters of one call: the config resolved against the shapes (q_offset, key
// limits, scale, per-head windows and slopes). Throws ShapeError / ValueError saying what to
// change. Used by both devices and by attention_cost(). With documents the result points into
// cfg.documents' host bounds: keep cfg's documents alive while it is used.
AttnKernelParams make_kernel_params(const AttnConfig& cfg, int64_t B, int64_t H, int64_t Hkv, int64_t Tq,
                                    int64_t Tk, int64_t D);

// Token positions for a key buffer holding the sequence's positions [0, S) and then [first, first + n)
// (sink tokens pinned ahead of a window's keys: the KV cache, context parallelism's halo), for the
// op's AttnConfig::positions: (B, S + n) f64 on dev, the sequence's positions `seq` (B, T) at those
// rows, or the indices themselves when seq is undefined.
Tensor pinned_sink_positions(const Tensor& seq, int64_t B, int64_t S, int64_t first, int64_t n, Device dev);

// The tiles a call runs with on a device (AttnTiles, tiling.h).
AttnTiles attn_tiles(const AttnConfig& cfg, Device dev, DType dt, int64_t D, int64_t Tk = 0);
// Whether the backward of calls on CUDA's tensor-core kernels runs in one pass (dK, dV and dQ from
// one kernel: FlashAttention-2's scheme with dQ added to each query block in a fixed order,
// attention/cuda/mma_body.h) instead of a dQ and a dK/dV pass: asked for by HZ_ATTN_BACKWARD=one_pass
// (read at each call; two_pass, the default, until a GPU has timed both). Every call of both
// variants takes it (FoX's and GRAPE's rows' sums are added in the same fixed order as dQ, LogN's dc
// summed per key). False without CUDA.
bool one_pass_backward();
// Whether a call on CUDA's tensor-core kernels runs them on Hopper's warpgroup MMA (wgmma.mma_async
// from swizzled shared-memory tiles, attention/cuda/attn_wgmma.cu: the forward and both backwards,
// the one-pass one where one_pass_backward holds too) instead of mma.sync: asked for by
// HZ_ATTN_MMA=wgmma, wgmma_overlap or wgmma_serial (read at each call; mma, the default, until a
// GPU has timed them), for bf16 calls on a compute-capability 9.0 GPU (H100, H200) with a build for
// sm_90. False elsewhere.
bool use_wgmma(const AttnKernelParams& P, DType dt, Device dev);
// The wgmma forward's form, by HZ_ATTN_MMA: wgmma, FlashAttention-3's design (WarpSpecialized: a
// producer warpgroup loads K and V by the bulk tensor copy into mbarrier stages, two consumer
// warpgroups take turns with their products and overlap each softmax with their own P V);
// wgmma_overlap, the consumers' loop on their own (Overlap: cp.async from every thread, block
// barriers); wgmma_serial, one warpgroup per CTA whose products and softmax follow each other
// (Serial). The kernel lab times each against the next.
enum class WgmmaForward { Serial, Overlap, WarpSpecialized };
WgmmaForward wgmma_forward();
// The environment's choices among Horizon's tensor-core kernels that a call of dtype dt and head dim D
// gets on dev (use_wgmma for a causal call, one_pass_backward), for the run log: "wgmma
// (HZ_ATTN_MMA)" (or "wgmma, forward overlapped without a producer" / "wgmma, forward without
// overlap" with the other forms), "one-pass backward (HZ_ATTN_BACKWARD)", both, or empty (the
// defaults, or a call the tensor-core kernels do not take).
std::string tensor_core_options(Device dev, DType dt, int64_t D);
// The CPU kernel's tiles for a call with Tk keys when the config leaves them at 0.
int64_t cpu_block_q(const AttnConfig& cfg);
int64_t cpu_block_k(const AttnConfig& cfg, int64_t Tk);

// Block counters, summed over calls and devices since the last reset (tests, benchmarks).
// Forward pairs are counted by the forward kernel; backward pairs once per (query block, key
// block) pair (on CUDA by the key-major dK/dV pass; the dQ pass visits the same pairs again).
struct AttnStats {
  int64_t fwd_blocks = 0;           // (query block, key block) pairs visited forward
  int64_t fwd_boundary_blocks = 0;  // of which needed masking
  int64_t bwd_blocks = 0;
};
AttnStats attn_stats();  // waits for the CUDA devices' queued work
void reset_attn_stats();

struct AttnOutput {
  ag::Variable out;  // (B, H, Tq, D), differentiable in q, k, v and the terms
  Tensor lse;        // (B, H, Tq), -inf for rows with no visible key (the sink's logit with a sink)
};

// The op's optional inputs beyond q, k, v; an undefined one is absent. Each may require grad
// (learned) and have any floating dtype (e.g. f32 with bf16 activations); its gradient comes back
// in its dtype.
//   logn_c  (H)  LogN's c per query head, for logit LogN (ignored otherwise).
//   sink    (H)  attention sinks (as in gpt-oss): a logit z_h per query head that joins every row's
//                softmax denominator and carries no value:
//                    out_i = sum_j exp(L_ij - lse_i) v_j,  lse_i = log(exp(z_h) + sum_j exp(L_ij)),
//                so a row may put weight 1 - sum_j p_ij on nothing; dLoss/dz_h = -sum_i
//                exp(z_h - lse_i) dO_i . O_i. A row without visible keys gives out 0, lse z_h.
//   forget  (B, H, Tk)  FoX (forgetting attention): log f_j <= 0, the log forget gate of the
//                token at key position j (query i sits at key position q_offset + i, which needs
//                q_offset + Tq <= Tk). Logits gain the decay sum_{j < m <= p_i} log f_m = c_{p_i} - c_j,
//                c = cumsum(log f) over the keys (f64 on the CPU, the accumulation dtype on CUDA); dLoss/dc comes back
//                through the prefix sum. Composes with every mask, encoding and transform.
//   dist_q  (B, H, Tq), dist_k (B, H, Tk)  GRAPE's additive form (GRAPE-A, arXiv 2512.07805): per-token
//                rates of a distance penalty; logits gain -|t_ij| (dist_q_i + dist_k_j), t the distance
//                ALiBi reads (token positions included), so dist_k = slope_h with dist_q undefined is
//                ALiBi exactly. Either may be undefined (0); dLoss/ddist_q_i = -sum_j dL_ij |t_ij|,
//                dLoss/ddist_k_j = -sum_i dL_ij |t_ij| (per (b, h), no float atomics). Taken in f64 by
//                the kernels; on CUDA the reference kernels run such calls (not the tensor-core ones).
struct AttnTerms {
  ag::Variable logn_c{};
  ag::Variable sink{};
  ag::Variable forget{};
  ag::Variable dist_q{};
  ag::Variable dist_k{};
};

AttnOutput fused_attention(const ag::Variable& q, const ag::Variable& k, const ag::Variable& v,
                           const AttnConfig& cfg, const AttnTerms& terms = {});

}  // namespace hz::attn
