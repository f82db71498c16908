// Horizon: the per-layer attention specification. Five orthogonal choices (docs/methods.md):
//   1. position encoding applied to q/k (none, rope, prope, alibi) + RoPE frequency scaling;
//   2. mask, as one window per query head (0 = unbounded: causal; W: sliding window; SCOPE
//      scopes S_h = ceil(gamma^h));
//   3. logit transform (identity, scale_invariant, logn, swan_row, temperature);
//   4. QK-norm (none, over the whole projection as in DroPE, or per head);
//   5. output gate (gated attention, arXiv 2505.06708): none, or y * sigmoid(x W_g) on the
//      attention output before the output projection, one gate per head or per element.
// validate() refuses impossible combinations with a message that says what to change.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hz::attn {

enum class PosKind : uint8_t { None, Rope, PRope, Alibi, Count };
enum class RopeScaling : uint8_t { None, PI, NTK, DynamicNTK, YaRN, Llama3, LongRoPE, Count };
// How YaRN's ramp between interpolated and kept pairs is computed (attention/rope.h).
enum class YarnRamp : uint8_t { Rotations, Index, Count };
enum class MaskKind : uint8_t { Causal, Window, Scope, Count };
enum class LogitKind : uint8_t { Identity, ScaleInvariant, LogN, SwanRow, Temperature, Count };
enum class QKNorm : uint8_t { None, Full, PerHead, Count };
enum class OutputGate : uint8_t { None, Head, Element, Count };
enum class RopeSelect : uint8_t { High, Low, Uniform, Count };
// RoPE's angles (attention/rope.h rotate_by_angles): position p_i w_m, or accumulated token-dependent
// steps theta_i = sum_{t <= i} w_m softplus(x_t W + b) (arXiv 2606.24975).
enum class RopeAngles : uint8_t { Position, Accumulated, Count };
// GRAPE's multiplicative form, cheap version (arXiv 2512.07805): RoPE's per-pair frequency factors
// as a trained parameter, one vector per layer or per KV head.
enum class LearnedFreqs : uint8_t { None, Layer, Head, Count };
// GRAPE's additive form beside the position encoding (AttentionSpec::additive).
enum class AdditiveKind : uint8_t { None, Alibi, Key, Query, QueryKey, Count };
static_assert(static_cast<int>(AdditiveKind::Count) == 5, "update the name table in spec.cpp");
static_assert(static_cast<int>(PosKind::Count) == 4 && static_cast<int>(RopeScaling::Count) == 7 &&
                  static_cast<int>(YarnRamp::Count) == 2 &&
                  static_cast<int>(MaskKind::Count) == 3 && static_cast<int>(LogitKind::Count) == 5 &&
                  static_cast<int>(QKNorm::Count) == 3 && static_cast<int>(OutputGate::Count) == 3 &&
                  static_cast<int>(RopeSelect::Count) == 3 && static_cast<int>(RopeAngles::Count) == 2 &&
                  static_cast<int>(LearnedFreqs::Count) == 3,
              "update the name tables in spec.cpp");

const char* name(PosKind k);
const char* name(RopeScaling k);
const char* name(YarnRamp k);
const char* name(MaskKind k);
const char* name(LogitKind k);
const char* name(QKNorm k);
const char* name(OutputGate k);
const char* name(RopeSelect k);
const char* name(RopeAngles k);
const char* name(LearnedFreqs k);
const char* name(AdditiveKind k);
// Parse a lower-case name ("rope", "yarn", "scope", "scale_invariant", "per_head", ...);
// throws ValueError listing the accepted names.
PosKind parse_pos(const std::string& s);
RopeScaling parse_scaling(const std::string& s);
YarnRamp parse_yarn_ramp(const std::string& s);
MaskKind parse_mask(const std::string& s);
LogitKind parse_logit(const std::string& s);
QKNorm parse_qknorm(const std::string& s);
OutputGate parse_gate(const std::string& s);
RopeSelect parse_rope_select(const std::string& s);
RopeAngles parse_rope_angles(const std::string& s);
LearnedFreqs parse_learned_freqs(const std::string& s);
AdditiveKind parse_additive(const std::string& s);

struct PositionSpec {
  PosKind kind = PosKind::Rope;
  double rope_base = 10000.0;
  RopeScaling scaling = RopeScaling::None;
  double factor = 1.0;             // s for PI / NTK / YaRN / Llama3 (s <= 1: identity); dynamic NTK: see rope.h
  int64_t original_context = 0;    // C_train for YaRN / Llama3 / dynamic NTK (0: the stage's T)
  double yarn_alpha = 1.0, yarn_beta = 32.0;  // YaRN ramp ends in rotations over C_train (beta_slow, beta_fast)
  YarnRamp yarn_ramp = YarnRamp::Rotations;   // rotations: docs/methods.md; index: transformers' / reference code
  bool yarn_truncate = true;       // index ramp: round its ends outward (floor / ceil), transformers' default
  double yarn_mscale = 0.0;        // YaRN / LongRoPE cos/sin multiplier (0: their default, attention/rope.h)
  double llama3_low_freq_factor = 1.0, llama3_high_freq_factor = 4.0;  // Llama 3 ramp ends (rotations)
  double prope_fraction = 0.5;     // p-RoPE: fraction of pairs that rotate (highest freqs)
  double prope_base_eff = 1024.0;  // p-RoPE: frequencies log-spaced in [1/base_eff, 1]
  // Per-dimension control (partial RoPE as in MLA / MHA2MLA, HoPE): which of the D/2 frequency
  // pairs rotate; the others get frequency 0 and act as NoPE dimensions. rope_pairs lists them
  // (pair m, 0 the fastest); otherwise round(rope_fraction D/2) pairs chosen by rope_select:
  // high = the fastest (HoPE keeps the high frequencies), low = the slowest, uniform = evenly
  // spread. Applies to rope (after any scaling) and p-RoPE (to its own frequencies).
  std::vector<int64_t> rope_pairs;
  double rope_fraction = 1.0;
  RopeSelect rope_select = RopeSelect::High;
  bool partial() const { return !rope_pairs.empty() || rope_fraction < 1.0; }
  // Per-pair frequency factors: w_m <- w_m * rope_freq_factors[m] (D/2 values >= 0; empty: none),
  // after any scaling and pair selection. m = 1/s everywhere is PI; LongRoPE's searched factors,
  // clipped RoPE's taper of the slowest pairs and hard clipping (0 below a cut) are vectors of it.
  // Inference-time: a trained model can be evaluated with another vector.
  std::vector<double> rope_freq_factors;
  // LongRoPE's searched rescale factors (rope_scaling longrope): w_m <- w_m / lambda_m, lambda the long
  // factors beyond C_train and the short ones (empty: 1) within it; D/2 values > 0 each.
  std::vector<double> longrope_long_factors, longrope_short_factors;
  // Learned angles (pos rope only; docs/methods.md). rope_angles accumulated: theta_{i,m} =
  // sum_{t <= i} w_m softplus(x_t W + b)_m with the layer's parameters angle_w, angle_b (steps 1 at
  // W = 0: RoPE's relative angles at initialisation); angles_per_head: one angle sequence per KV head
  // (else one shared by every head). rotate_v: v_j rotated by theta_j and the output o_i back by
  // -theta_i. learned_freqs (GRAPE-M): angles times a trained factor per pair, per layer or per KV head.
  RopeAngles rope_angles = RopeAngles::Position;
  bool angles_per_head = false;
  bool rotate_v = false;
  LearnedFreqs learned_freqs = LearnedFreqs::None;
  // Whether the layer rotates through rotate_by_angles with an angle tensor it makes (rather than
  // the rotary op at positions).
  bool learned_angles() const {
    return rope_angles != RopeAngles::Position || rotate_v || learned_freqs != LearnedFreqs::None;
  }
};

struct MaskSpec {
  MaskKind kind = MaskKind::Causal;
  int64_t window = 0;              // sliding window W (query sees itself and W-1 predecessors)
  // Chunked attention (Llama 4): a query sees the keys of its own chunk of `chunk` positions, from the
  // chunk's start to itself (0 = off); with any mask kind (the window or scope bounds it further).
  int64_t chunk = 0;
  // Sink tokens (StreamingLLM's attention sinks; gpt-oss keeps them beside W = 128): the first
  // `sink_tokens` positions of each document stay visible to its every later query beside a window,
  // a scope or a chunk (0 = off).
  int64_t sink_tokens = 0;
  // Prefix-LM (T5's / UniLM's prefix mask): the first `prefix` positions of each document attend to
  // each other bidirectionally, the rest causally (0 = off); ALiBi and scale-invariant logits read |t|.
  int64_t prefix = 0;
  double scope_gamma = 0.0;        // SCOPE: 0 = auto, gamma = T^(1/H)
  int64_t scope_min = 1;           // SCOPE: smallest scope allowed
  int64_t scope_max = 0;           // SCOPE: largest scope (0 = T)
  std::vector<int64_t> scopes;     // SCOPE: explicit list, one per query head (overrides gamma)
  bool freeze_scopes = false;      // SCOPE: keep the training scopes when T grows (extrapolation tests)
  int64_t scope_train_len = 0;       // T the frozen scopes were computed for
};

struct LogitSpec {
  LogitKind kind = LogitKind::Identity;
  double tau = 10.0;               // scale_invariant
  double logn_c = 1.0;             // logn: initial / fixed c
  bool logn_learnable = true;      // logn: c is a learned scalar per head
  double swan_a = 362.0;           // swan_row: g(n) = ln(a + n) / ln(a)
  double beta = 1.0;               // temperature: explicit beta (used when temp_c == 0)
  double temp_c = 0.0;             // temperature: beta = 1 + c ln s when s > 1
  // logn: what n counts. false (SSMax, Nakanishi 2025, arXiv 2501.19399): the keys the row can
  // see, so under a window n stops at W, under packed documents it counts the document's keys,
  // under SCOPE each head its own scope. true (LogN as in Qwen / Su's log-n scaling): the query's
  // position + 1 (inside its document with position reset), whatever the mask hides.
  bool logn_position = false;
  // Llama 4's NoPE-layer temperature, on top of any transform: logits of the query at position p
  // scaled by 1 + qtemp_alpha ln(floor((p + 1) / qtemp_beta) + 1) (0 = off; Llama 4 uses 0.1 and
  // 8192): 1 inside the first qtemp_beta positions, growing with log p beyond.
  double qtemp_alpha = 0.0;
  double qtemp_beta = 8192.0;
};

struct AttentionSpec {
  PositionSpec pos;
  MaskSpec mask;
  LogitSpec logit;
  QKNorm qk_norm = QKNorm::None;
  // Gated attention output: o_h <- o_h * sigmoid(x . w_h) (head: one gate per head, w_h in R^C)
  // or o_hd <- o_hd * sigmoid(x . w_hd) (element), x the layer's (normed) input, before wo.
  OutputGate gate = OutputGate::None;
  // Attention sinks (as in gpt-oss): a learned logit z_h per query head joins every row's softmax
  // denominator, so a head may attend to nothing (attention/fused.h has the formula).
  bool sink = false;
  // FoX, the Forgetting Transformer (Lin et al. 2025, arXiv 2503.02130): a forget gate per head
  // and token, f_t = sigmoid(x_t . w_h + b_h), and logits gain sum_{j < m <= i} log f_m (the
  // data-dependent decay c_i - c_j, c = cumsum(log f)); b_h starts at forget_bias (0 as in FoX,
  // larger: longer memory at initialisation).
  bool forget = false;
  double forget_bias = 0.0;
  // DIFF Transformer V2 (Ye, Dong, Sun, Wei 2026): twice the query heads, the two of a pair in the
  // same GQA group (sharing its keys and values), and output head h = A_2h V - sigmoid(lambda_h) A_2h+1 V
  // with lambda = x W_lambda per token and head. The fused op runs the 2H heads (pairs share their
  // window and ALiBi slope); sinks, LogN's c and FoX's gates are per attention head (2H).
  bool diff = false;
  int64_t attn_heads(int64_t n_heads) const { return diff ? 2 * n_heads : n_heads; }
  // GRAPE's additive form (Zhang et al., arXiv 2512.07805) beside any position encoding: logits gain
  // -(p_i - p_j) (dist_q_i + dist_k_j) (attention/fused.h AttnTerms::dist_q / dist_k). alibi: ALiBi's
  // fixed slopes (dist_k = slope_h; not with pos alibi); key: dist_k = omega_h softplus(u_h . k_j /
  // sqrt(D)) with u_h unit-normalised, k after QK-norm and before any rotation; query: dist_q from
  // q_i and v_h likewise; query_key: both. omega_h = softplus(w_h) slope_h (ALiBi's slopes), w_h
  // starting at ln(e - 1) so omega_h = slope_h, learned when additive_learned_slope (the gated kinds
  // only: alibi's slopes stay fixed).
  AdditiveKind additive = AdditiveKind::None;
  bool additive_learned_slope = true;
  // Whether the fused op takes per-token rates (the gated kinds; alibi rides on the op's slopes).
  bool additive_rates() const {
    return additive == AdditiveKind::Key || additive == AdditiveKind::Query || additive == AdditiveKind::QueryKey;
  }

  // Throws ValueError naming the field and what to change.
  void validate(int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t T) const;
  // One window per query head for sequence length T (0 = unbounded).
  std::vector<int64_t> windows(int64_t n_heads, int64_t T) const;
  std::string describe() const;  // one line: "rope(base=10000) causal identity"
  // Whether the rotation (RoPE, p-RoPE) or a logit term (ALiBi's, GRAPE-A's and scale-invariant attention's
  // distance, LogN by position, SWAN's row, Llama 4's temperature) reads the tokens' positions:
  // what drawn token positions (PoSE, randomized, real-valued) change.
  bool rotary() const { return pos.kind == PosKind::Rope || pos.kind == PosKind::PRope; }
  bool logits_read_positions() const {
    return pos.kind == PosKind::Alibi || additive != AdditiveKind::None || logit.kind == LogitKind::ScaleInvariant ||
           (logit.kind == LogitKind::LogN && logit.logn_position) || logit.kind == LogitKind::SwanRow ||
           logit.qtemp_alpha != 0;
  }
};

// SCOPE scopes S_h = ceil(gamma^h), h = 1..H, gamma = T^(1/H) unless given; clamped to
// [min_scope, max_scope] (max 0 = T). Exact integer arithmetic guards against gamma^h landing a
// hair above an integer.
std::vector<int64_t> scope_windows(int64_t n_heads, int64_t T, double gamma = 0.0,
                                   int64_t min_scope = 1, int64_t max_scope = 0);
// ALiBi slopes m_h = 2^(-8h/H), h = 1..H.
std::vector<double> alibi_slopes(int64_t n_heads);
// Scale-invariant tables: a_t = sqrt(2 ln(t/tau + 1) + 1), m_t = -2 ln(t/tau + 1), t = 0..n-1.
void scale_invariant_tables(double tau, int64_t n, std::vector<double>& a, std::vector<double>& m);
// SWAN row scale g(n) = ln(a + n) / ln(a) for query position n (0-based).
double swan_row_scale(double a, int64_t n);
// DroPE / global temperature beta = 1 + c ln s for s > 1, else 1.
double temperature_beta(double c, double s);

}  // namespace hz::attn
