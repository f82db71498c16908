// nn/kv_cache: incremental decoding equals the full forward, for every layer kind. Each case
// builds a float64 model, decodes greedily with the cache (prefill + one step per token) and
// compares every step's logits with Transformer::forward over the whole final sequence at
// T = capacity, then the argmax tokens one by one. Rings that wrap (SWA, SCOPE), GQA groups with
// different scopes, LaMPE squeezing, and length-dependent options (dynamic NTK, temperature,
// SCOPE scopes at T > training length) are all exercised.
#include <gtest/gtest.h>

#include <cmath>

#include "core/device.h"
#include "nn/kv_cache.h"

using namespace hz;
using namespace hz::nn;

namespace {

ModelConfig base_config() {
  ModelConfig c;
  c.vocab_size = 29;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 4;
  c.mlp_hidden = 48;
  c.train_len = 16;  // the "training" length; contexts below go beyond it
  c.init_std = 0.2;    // peaked attention, so a wrong key or logit shows
  c.dtype = DType::F64;
  return c;
}

struct Case {
  std::string name;
  std::vector<attn::AttentionSpec> kinds;  // one per layer
  int64_t n_kv_heads = 4;
  bool lampe = false;
};

int64_t argmax(const std::vector<double>& v, int64_t off, int64_t n) {
  int64_t b = 0;
  for (int64_t i = 1; i < n; ++i)
    if (v[off + i] > v[off + b]) b = i;
  return b;
}

// Decodes `n_new` tokens greedily after a fixed prompt and checks them against the full forward.
void check_case(const Case& cs, int64_t prompt_len = 9, int64_t n_new = 14) {
  SCOPED_TRACE(cs.name);
  ModelConfig c = base_config();
  c.n_kv_heads = cs.n_kv_heads;
  c.n_layers = static_cast<int64_t>(cs.kinds.size());
  c.kinds.clear();
  c.pattern.clear();
  for (size_t l = 0; l < cs.kinds.size(); ++l) {
    c.kinds.push_back({"k" + std::to_string(l), cs.kinds[l]});
    c.pattern.push_back("k" + std::to_string(l));
  }
  Transformer m(c, 7);
  if (cs.lampe)
    for (auto& b : m.layers) {
      attn::LampeConfig lc;
      lc.L = 10;  // mapping length ~10 < capacity: the middle region is squeezed
      lc.a = 0;
      lc.b = 10;
      lc.s_local = 4;
      lc.s_sink = 2;
      b->attn->lampe = lc;
    }
  const int64_t V = c.vocab_size, capacity = prompt_len + n_new;
  std::vector<int32_t> seq;
  for (int64_t i = 0; i < prompt_len; ++i) seq.push_back(static_cast<int32_t>((i * 7 + 3) % V));
  KVCache cache(m, capacity);
  std::vector<std::vector<double>> step_logits;
  Tensor lg = cache.prefill(seq);
  for (int64_t s = 0; s < n_new; ++s) {
    step_logits.push_back(lg.to_vector());
    const int32_t tok = static_cast<int32_t>(argmax(step_logits.back(), 0, V));
    seq.push_back(tok);
    if (s + 1 < n_new) lg = cache.step(tok);
  }
  EXPECT_EQ(cache.length(), capacity - 1);
  // the full forward over the final sequence, T = capacity
  std::vector<double> ids(seq.begin(), seq.end());
  AttnCall call;
  call.T = capacity;
  const std::vector<double> full =
      m.forward(Tensor::from_vector(ids, {1, capacity}, DType::I64), Tensor(), call).value().to_vector();
  for (int64_t s = 0; s < n_new; ++s) {
    const int64_t row = prompt_len - 1 + s;
    double maxdiff = 0, scale = 0;
    for (int64_t v = 0; v < V; ++v) {
      maxdiff = std::max(maxdiff, std::abs(step_logits[s][v] - full[row * V + v]));
      scale = std::max(scale, std::abs(full[row * V + v]));
    }
    EXPECT_LT(maxdiff, 1e-10 * std::max(1.0, scale)) << "step " << s << " (position " << row << ")";
    EXPECT_EQ(argmax(full, row * V, V), seq[prompt_len + s]) << "token " << s;
  }
}

attn::AttentionSpec rope() { return {}; }
attn::AttentionSpec nope() {
  attn::AttentionSpec s;
  s.pos.kind = attn::PosKind::None;
  return s;
}

// s under a sliding window of w keys, with `sinks` sink tokens beside it
attn::AttentionSpec windowed(attn::AttentionSpec s, int64_t w, int64_t sinks = 0) {
  s.mask.kind = attn::MaskKind::Window;
  s.mask.window = w;
  s.mask.sink_tokens = sinks;
  return s;
}

}  // namespace

TEST(KVCache, RopeCausal) { check_case({"rope", {rope(), rope()}}); }

TEST(KVCache, PerPairRopeFrequencyFactors) {  // issue 38: decoding reads the same frequencies
  attn::AttentionSpec f = rope();
  f.pos.rope_freq_factors.assign(4, 1.0);  // check_case's head_dim 8: four pairs
  f.pos.rope_freq_factors[0] = 0.5;
  f.pos.rope_freq_factors[3] = 0.0;
  check_case({"freq_factors", {f, rope()}});
}

// Learned angles: the accumulated steps' running sum continues from the total the cache keeps (per
// KV head, with V rotated; under a window's ring with GRAPE-M per head); GRAPE-M at positions with V
// rotated under DIFF V2.
TEST(KVCache, LearnedAngles) {
  attn::AttentionSpec a = rope(), w = windowed(rope(), 4), d = rope();
  a.pos.rope_angles = attn::RopeAngles::Accumulated;
  a.pos.angles_per_head = true;
  a.pos.rotate_v = true;
  w.pos.rope_angles = attn::RopeAngles::Accumulated;
  w.pos.learned_freqs = attn::LearnedFreqs::Head;
  d.pos.learned_freqs = attn::LearnedFreqs::Layer;
  d.pos.rotate_v = true;
  d.diff = true;
  check_case({"learned_angles", {a, w, d}, 2});
}

TEST(KVCache, GatedOutputPerHeadAndPerElement) {
  attn::AttentionSpec h = rope(), e = nope();
  h.gate = attn::OutputGate::Head;
  e.gate = attn::OutputGate::Element;
  e.mask.kind = attn::MaskKind::Window;
  e.mask.window = 5;
  check_case({"gated", {h, e}, 2});
}

TEST(KVCache, SinksAndForgetGates) {  // FoX's log f shifts with the keys of a window layer's ring
  attn::AttentionSpec g = nope(), w = rope();
  g.sink = true;
  g.forget = true;
  w.forget = true;
  w.sink = true;
  w.mask.kind = attn::MaskKind::Window;
  w.mask.window = 4;
  check_case({"sinks_fox", {g, w}, 2});
}

// GRAPE-A: the key rates shift with their keys through a window layer's ring (and a long prompt that
// overflows it), beside FoX's log f in the same per-key buffer; query rates of the new queries; GQA
// with two bands (SCOPE), DIFF V2's paired heads, ALiBi beside RoPE, and sink tokens beside a window
// (the keys then stay unpinned)
TEST(KVCache, GrapeAdditiveRates) {
  attn::AttentionSpec k = nope(), qk = windowed(rope(), 4), q = windowed(nope(), 5, 2);
  k.additive = attn::AdditiveKind::Key;
  qk.additive = attn::AdditiveKind::QueryKey;
  qk.forget = true;
  q.additive = attn::AdditiveKind::Query;
  check_case({"grape_key_query_key", {k, qk}, 2});
  attn::AttentionSpec s = nope(), d = rope(), a = rope(), st = windowed(nope(), 4, 2);
  s.mask.kind = attn::MaskKind::Scope;
  s.mask.scopes = {3, 3, 6, 6};
  s.additive = attn::AdditiveKind::QueryKey;
  d.diff = true;
  d.additive = attn::AdditiveKind::Key;
  a.additive = attn::AdditiveKind::Alibi;
  st.additive = attn::AdditiveKind::Key;
  check_case({"grape_scope_diff", {s, d}, 2});
  check_case({"grape_query_sinks_alibi_beside_rope", {q, a, st}, 2}, 3, 14);
}

TEST(KVCache, PositionTermsUnderAWindowRing) {  // LogN by position and Llama 4's temperature read
  attn::AttentionSpec l = rope(), t = nope();       // absolute positions while the ring moves
  l.logit.kind = attn::LogitKind::LogN;
  l.logit.logn_position = true;
  l.mask.kind = attn::MaskKind::Window;
  l.mask.window = 4;
  t.logit.qtemp_alpha = 0.4;
  t.logit.qtemp_beta = 3;
  t.mask.kind = attn::MaskKind::Window;
  t.mask.window = 5;
  check_case({"position_terms", {l, t}, 2});
}

TEST(KVCache, ChunkedAttention) {  // issue 38: Llama 4's chunks, alone and inside a window's ring
  attn::AttentionSpec c = rope(), w = nope();
  c.mask.chunk = 4;
  c.logit.kind = attn::LogitKind::LogN;  // counts the keys of the chunk
  w.mask.kind = attn::MaskKind::Window;
  w.mask.window = 5;
  w.mask.chunk = 3;
  w.forget = true;
  check_case({"chunked", {c, w}, 2});
  // a chunked layer keeps a ring of its chunk's C keys (a query sees no further back), min(W, C) with a window
  ModelConfig mc = base_config();
  mc.n_layers = 2;
  mc.kinds = {{"c", c}, {"w", w}};
  mc.pattern = {"c", "w"};
  const Transformer model(mc, 1);
  const KVCache cache(model, 100);
  EXPECT_EQ(cache.layers()[0].keys_kept, std::vector<int64_t>(mc.kv_heads(), 4));
  EXPECT_EQ(cache.layers()[1].keys_kept, std::vector<int64_t>(mc.kv_heads(), 3));
}

TEST(KVCache, SinkTokensStayBesideTheWindow) {  // issue 38: StreamingLLM's sinks, with SSMax counting them
  attn::AttentionSpec w = windowed(rope(), 5, 2), c = nope();
  w.logit.kind = attn::LogitKind::LogN;
  c.mask.chunk = 4;
  c.mask.sink_tokens = 3;
  c.forget = true;
  check_case({"sink_tokens", {w, c}, 2});
}

// Sink tokens beside a window keep S + W keys, not every key (StreamingLLM's bounded cache): the ring's
// rows are no positions, so the terms that read distances or positions (ALiBi, scale-invariant,
// Llama 4's temperature, SWAN's row) and SSMax's count must come out as the full forward's; prompts
// shorter and longer than the sinks, GQA with two windows (two bands).
TEST(KVCache, PinnedSinksKeepOnlyTheSinksAndTheWindow) {
  attn::AttentionSpec a = windowed(nope(), 4, 3), r = windowed(rope(), 5, 2);
  a.pos.kind = attn::PosKind::Alibi;
  a.logit.kind = attn::LogitKind::ScaleInvariant;
  a.logit.tau = 2.0;
  a.logit.qtemp_alpha = 0.5;
  a.logit.qtemp_beta = 3.0;
  r.logit.kind = attn::LogitKind::SwanRow;
  r.logit.swan_a = 4.0;
  check_case({"pinned_long_prompt", {a, r}});              // prompt 9: sinks and a full ring at once
  check_case({"pinned_short_prompt", {a, r}}, 2, 16);      // the sinks arrive over the first steps
  attn::AttentionSpec s = nope();  // SSMax counts the sinks and the window; two windows over GQA
  s.mask.kind = attn::MaskKind::Scope;
  s.mask.scopes = {3, 3, 6, 6};  // kv head 0 keeps 3 keys, kv head 1 six: two bands
  s.mask.sink_tokens = 2;
  s.logit.kind = attn::LogitKind::LogN;
  check_case({"pinned_scope_ssmax_gqa", {s, a}, 2}, 5, 18);
  ModelConfig c = base_config();
  c.kinds = {{"a", a}, {"r", r}};
  c.pattern = {"a", "r"};
  Transformer m(c, 1);
  KVCache cache(m, 40);
  EXPECT_EQ(cache.layers()[0].keys_kept, std::vector<int64_t>(4, 3 + 4));
  EXPECT_EQ(cache.layers()[1].keys_kept, std::vector<int64_t>(4, 2 + 5));
  const int64_t D = 8;  // rows: sinks + window + ceil(window / 8)
  EXPECT_EQ(cache.bytes(), 2 * (4 * (3 + 4 + 1) + 4 * (2 + 5 + 1)) * D * 8);
}

TEST(KVCache, DiffTransformerV2) {  // paired heads: 2H query heads over the cache's kv heads, a window ring
  attn::AttentionSpec d = rope(), w = nope();
  d.diff = true;
  d.logit.kind = attn::LogitKind::LogN;
  w.diff = true;
  w.mask.kind = attn::MaskKind::Window;
  w.mask.window = 5;
  w.sink = true;
  check_case({"diff", {d, w}, 2});
}

TEST(KVCache, PrefixLm) {  // the prompt holds the prefix; generated tokens attend causally
  attn::AttentionSpec p = rope(), w = nope();
  p.mask.prefix = 6;
  p.logit.kind = attn::LogitKind::LogN;
  w.mask.kind = attn::MaskKind::Window;
  w.mask.window = 4;
  w.mask.prefix = 9;  // the whole prompt
  w.pos.kind = attn::PosKind::Alibi;
  check_case({"prefix", {p, w}, 2});
}

TEST(KVCache, SlidingWindowRingWraps) {
  attn::AttentionSpec s = rope();
  s.mask.kind = attn::MaskKind::Window;
  s.mask.window = 5;  // ring of 5 slots, 22 positions
  check_case({"swa", {s, nope()}});
}

TEST(KVCache, ScopeWithGqaAndFreeze) {
  attn::AttentionSpec s = nope();
  s.mask.kind = attn::MaskKind::Scope;  // scopes follow T = capacity (23 > training 16)
  attn::AttentionSpec f = s;
  f.mask.freeze_scopes = true;  // scopes of T = 16
  f.mask.scope_train_len = 16;
  check_case({"scope", {s, f}, /*n_kv_heads=*/2});
}

TEST(KVCache, ScaleInvariantPRopeQkNorm) {
  attn::AttentionSpec s;
  s.pos.kind = attn::PosKind::PRope;
  s.logit.kind = attn::LogitKind::ScaleInvariant;
  s.logit.tau = 3;
  s.qk_norm = attn::QKNorm::Full;
  attn::AttentionSpec p = s;
  p.qk_norm = attn::QKNorm::PerHead;
  p.logit.tau = 7;
  check_case({"scale_invariant", {s, p}});
}

TEST(KVCache, LogNWithWindow) {
  attn::AttentionSpec s = nope();
  s.logit.kind = attn::LogitKind::LogN;
  s.logit.logn_c = 0.7;
  attn::AttentionSpec w = rope();
  w.logit.kind = attn::LogitKind::LogN;
  w.mask.kind = attn::MaskKind::Window;
  w.mask.window = 6;
  check_case({"logn", {s, w}});
}

TEST(KVCache, Alibi) {
  attn::AttentionSpec s = nope();
  s.pos.kind = attn::PosKind::Alibi;
  check_case({"alibi", {s, s}});
}

TEST(KVCache, LampeSqueezesMiddleRegion) { check_case({"lampe", {rope(), rope()}, 4, /*lampe=*/true}); }

TEST(KVCache, LampeWithYarnAndGqa) {
  attn::AttentionSpec s = rope();
  s.pos.scaling = attn::RopeScaling::YaRN;
  s.pos.factor = 2;
  s.pos.original_context = 16;
  check_case({"lampe_yarn", {s, s}, 2, true});
}

TEST(KVCache, GqaSwanRowDynamicNtkTemperature) {
  attn::AttentionSpec g = nope();
  g.logit.kind = attn::LogitKind::SwanRow;
  g.logit.swan_a = 20;
  attn::AttentionSpec d = rope();
  d.pos.scaling = attn::RopeScaling::DynamicNTK;  // s = capacity / 16 > 1
  d.logit.kind = attn::LogitKind::Temperature;
  d.logit.temp_c = 0.4;  // beta = 1 + 0.4 ln(capacity / 16)
  check_case({"swan_ntk_temp", {g, d, d}, 1});
}

TEST(KVCache, PromptLongerThanWindowAndMemory) {
  attn::AttentionSpec s = rope();
  s.mask.kind = attn::MaskKind::Window;
  s.mask.window = 4;
  check_case({"long_prompt", {s, s}}, /*prompt_len=*/13, /*n_new=*/6);
  // memory: a window layer needs W keys per kv head (and holds W + ceil(W / 8) rows, the slack that
  // lets it shift its keys once every ceil(W / 8) + 1 tokens), a causal one the whole capacity
  ModelConfig c = base_config();
  c.kinds = {{"w", s}, {"g", rope()}};
  c.pattern = {"w", "g"};
  Transformer m(c, 1);
  KVCache cache(m, 40);
  ASSERT_EQ(cache.layers().size(), 2u);
  EXPECT_EQ(cache.layers()[0].keys_kept, std::vector<int64_t>(4, 4));
  EXPECT_EQ(cache.layers()[1].keys_kept, std::vector<int64_t>(4, 40));
  const int64_t D = 8;
  EXPECT_EQ(cache.bytes(), 2 * (4 * (4 + 1) + 4 * 40) * D * 8);
  EXPECT_THROW(cache.step(1), ValueError);  // no prefill yet
  EXPECT_THROW(cache.prefill(std::vector<int32_t>(41, 1)), ValueError);  // longer than the capacity
}

// A layer whose logits depend on the query's absolute position (SWAN row scaling) keeps every key
// even under a window, so the position the op sees is the absolute one.
// SWAN's row reads the absolute position, which the op gets as key_position = the ring's base:
// a window layer with row scaling keeps only its window and still decodes the full forward's logits.
TEST(KVCache, SwanRowUnderAWindowKeepsOnlyTheWindow) {
  attn::AttentionSpec s = nope();
  s.logit.kind = attn::LogitKind::SwanRow;
  s.logit.swan_a = 20;
  s.mask.kind = attn::MaskKind::Window;
  s.mask.window = 3;
  check_case({"swan_window", {s, rope()}});
  ModelConfig c = base_config();
  c.kinds = {{"s", s}};
  c.pattern = {"s"};
  Transformer m(c, 1);
  KVCache cache(m, 30);
  EXPECT_EQ(cache.layers()[0].keys_kept, std::vector<int64_t>(4, 3));
}

// A CUDA model decodes on the GPU, cache included: the same steps as the CPU's cache, whose
// logits the tests above hold to the full forward.
// The same model (seed 5) decoding greedily on the CPU and on GPU 0 from a `prompt_len`-token prompt:
// the logits agree at the f32 floor at every one of `steps` steps, stay on the GPU there, and both
// caches hold the same bytes.
static void expect_gpu_decodes_as_cpu(const ModelConfig& c, int64_t capacity, int prompt_len, int steps) {
  Transformer cpu(c, 5), gpu(c, 5);
  gpu.to(Device::cuda(0));
  KVCache a(cpu, capacity), b(gpu, capacity);
  std::vector<int32_t> prompt;
  for (int i = 0; i < prompt_len; ++i) prompt.push_back((i * 5 + 2) % 29);
  Tensor la = a.prefill(prompt), lb = b.prefill(prompt);
  for (int s = 0; s < steps; ++s) {
    ASSERT_TRUE(lb.device().is_cuda()) << "the logits of a CUDA model stay on the GPU";
    const std::vector<double> x = la.to_vector(), y = lb.to_vector();
    double diff = 0, scale = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      diff = std::max(diff, std::abs(x[i] - y[i]));
      scale = std::max(scale, std::abs(x[i]));
    }
    EXPECT_LT(diff, 1e-4 * std::max(1.0, scale)) << "step " << s;
    const int32_t tok = static_cast<int32_t>(argmax(x, 0, c.vocab_size));
    la = a.step(tok);
    lb = b.step(tok);
  }
  EXPECT_EQ(a.bytes(), b.bytes());
}

TEST(KVCacheCuda, DecodesOnTheGpuAsOnTheCpu) {
  if (!cuda::available())
    GTEST_SKIP() << "no usable CUDA device (" << (cuda::compiled() ? "no GPU/driver visible" : "HZ_CUDA=OFF build")
                 << "); scripts/gpu/gpu_check.sh runs this on a GPU machine";
  attn::AttentionSpec w = rope();
  w.mask.kind = attn::MaskKind::Window;
  w.mask.window = 5;
  attn::AttentionSpec sc = nope();
  sc.mask.kind = attn::MaskKind::Scope;
  sc.logit.kind = attn::LogitKind::ScaleInvariant;
  ModelConfig c = base_config();
  c.dtype = DType::F32;
  c.n_kv_heads = 2;
  c.n_layers = 3;
  c.kinds = {{"w", w}, {"s", sc}, {"g", rope()}};
  c.pattern = {"w", "s", "g"};
  expect_gpu_decodes_as_cpu(c, 40, 11, 25);
}

TEST(KVCacheCuda, LearnedAnglesDecodeOnTheGpuAsOnTheCpu) {
  if (!cuda::available())
    GTEST_SKIP() << "no usable CUDA device (" << (cuda::compiled() ? "no GPU/driver visible" : "HZ_CUDA=OFF build")
                 << "); scripts/gpu/gpu_check.sh runs this on a GPU machine";
  attn::AttentionSpec a = rope(), g = rope();
  a.pos.rope_angles = attn::RopeAngles::Accumulated;
  a.pos.angles_per_head = true;
  a.pos.rotate_v = true;
  g.pos.learned_freqs = attn::LearnedFreqs::Head;
  ModelConfig c = base_config();
  c.dtype = DType::F32;
  c.n_kv_heads = 2;
  c.n_layers = 2;
  c.kinds = {{"a", a}, {"g", g}};
  c.pattern = {"a", "g"};
  expect_gpu_decodes_as_cpu(c, 30, 9, 15);
}
