#include "attention/spec.h"

#include <cmath>
#include <functional>
#include <sstream>
#include <type_traits>

#include "attention/spec_fields.h"
#include "attention/tiling.h"
#include "core/error.h"
#include "core/names.h"

namespace hz::attn {

namespace {
const char* const kPos[] = {"none", "rope", "prope", "alibi"};
const char* const kScaling[] = {"none", "pi", "ntk", "dynamic_ntk", "yarn", "llama3", "longrope"};
const char* const kYarnRamp[] = {"rotations", "index"};
const char* const kMask[] = {"causal", "window", "scope"};
const char* const kRopeSelect[] = {"high", "low", "uniform"};
const char* const kLogit[] = {"identity", "scale_invariant", "logn", "swan_row", "temperature"};
const char* const kQK[] = {"none", "full", "per_head"};
const char* const kGate[] = {"none", "head", "element"};
const char* const kRopeAngles[] = {"position", "accumulated"};
const char* const kLearnedFreqs[] = {"none", "layer", "head"};
static_assert(sizeof(kRopeAngles) / sizeof(*kRopeAngles) == static_cast<size_t>(RopeAngles::Count));
static_assert(sizeof(kLearnedFreqs) / sizeof(*kLearnedFreqs) == static_cast<size_t>(LearnedFreqs::Count));
const char* const kAdditive[] = {"none", "alibi", "key", "query", "query_key"};
static_assert(sizeof(kAdditive) / sizeof(*kAdditive) == static_cast<size_t>(AdditiveKind::Count));
static_assert(sizeof(kPos) / sizeof(*kPos) == static_cast<size_t>(PosKind::Count));
static_assert(sizeof(kScaling) / sizeof(*kScaling) == static_cast<size_t>(RopeScaling::Count));
static_assert(sizeof(kYarnRamp) / sizeof(*kYarnRamp) == static_cast<size_t>(YarnRamp::Count));
static_assert(sizeof(kMask) / sizeof(*kMask) == static_cast<size_t>(MaskKind::Count));
static_assert(sizeof(kLogit) / sizeof(*kLogit) == static_cast<size_t>(LogitKind::Count));
static_assert(sizeof(kQK) / sizeof(*kQK) == static_cast<size_t>(QKNorm::Count));
static_assert(sizeof(kGate) / sizeof(*kGate) == static_cast<size_t>(OutputGate::Count));

}  // namespace

const char* name(PosKind k) { return kPos[static_cast<int>(k)]; }
const char* name(RopeScaling k) { return kScaling[static_cast<int>(k)]; }
const char* name(YarnRamp k) { return kYarnRamp[static_cast<int>(k)]; }
const char* name(MaskKind k) { return kMask[static_cast<int>(k)]; }
const char* name(LogitKind k) { return kLogit[static_cast<int>(k)]; }
const char* name(RopeSelect k) { return kRopeSelect[static_cast<int>(k)]; }
RopeSelect parse_rope_select(const std::string& s) {
  return parse_name<RopeSelect>(s, kRopeSelect, "rope_select");
}
const char* name(RopeAngles k) { return kRopeAngles[static_cast<int>(k)]; }
const char* name(LearnedFreqs k) { return kLearnedFreqs[static_cast<int>(k)]; }
RopeAngles parse_rope_angles(const std::string& s) { return parse_name<RopeAngles>(s, kRopeAngles, "rope_angles"); }
LearnedFreqs parse_learned_freqs(const std::string& s) {
  return parse_name<LearnedFreqs>(s, kLearnedFreqs, "learned_freqs");
}
const char* name(QKNorm k) { return kQK[static_cast<int>(k)]; }
const char* name(OutputGate k) { return kGate[static_cast<int>(k)]; }
PosKind parse_pos(const std::string& s) { return parse_name<PosKind>(s, kPos, "position encoding"); }
RopeScaling parse_scaling(const std::string& s) { return parse_name<RopeScaling>(s, kScaling, "RoPE scaling"); }
YarnRamp parse_yarn_ramp(const std::string& s) { return parse_name<YarnRamp>(s, kYarnRamp, "YaRN ramp"); }
MaskKind parse_mask(const std::string& s) { return parse_name<MaskKind>(s, kMask, "mask"); }
// "ssmax" (Scalable-Softmax) names logn with its default n, the visible keys (LogitSpec)
LogitKind parse_logit(const std::string& s) {
  return s == "ssmax" ? LogitKind::LogN : parse_name<LogitKind>(s, kLogit, "logit transform");
}
QKNorm parse_qknorm(const std::string& s) { return parse_name<QKNorm>(s, kQK, "qk_norm"); }
OutputGate parse_gate(const std::string& s) { return parse_name<OutputGate>(s, kGate, "output gate"); }
const char* name(AdditiveKind k) { return kAdditive[static_cast<int>(k)]; }
AdditiveKind parse_additive(const std::string& s) { return parse_name<AdditiveKind>(s, kAdditive, "additive"); }

std::vector<int64_t> scope_windows(int64_t H, int64_t T, double gamma, int64_t min_scope,
                                   int64_t max_scope) {
  HZ_CHECK(H > 0 && T > 0, ValueError, "scope_windows: need n_heads > 0 and T > 0");
  if (max_scope <= 0) max_scope = T;
  if (gamma <= 0) gamma = std::pow(static_cast<double>(T), 1.0 / static_cast<double>(H));
  std::vector<int64_t> s(H);
  for (int64_t h = 1; h <= H; ++h) {
    const double g = std::pow(gamma, static_cast<double>(h));
    // ceil, but a value within 1e-9 (relative) of an integer is that integer
    const double r = std::round(g);
    int64_t v = std::abs(g - r) <= 1e-9 * std::max(1.0, r) ? static_cast<int64_t>(r)
                                                            : static_cast<int64_t>(std::ceil(g));
    s[h - 1] = std::min(std::max(v, min_scope), max_scope);
  }
  return s;
}

std::vector<double> alibi_slopes(int64_t H) {
  std::vector<double> m(H);
  for (int64_t h = 1; h <= H; ++h) m[h - 1] = std::pow(2.0, -8.0 * h / static_cast<double>(H));
  return m;
}

void scale_invariant_tables(double tau, int64_t n, std::vector<double>& a, std::vector<double>& m) {
  a.resize(n);
  m.resize(n);
  for (int64_t t = 0; t < n; ++t) scale_invariant_coef<double>(static_cast<double>(t), tau, a[t], m[t]);
}

double swan_row_scale(double a, int64_t n) { return swan_scale<double>(a, static_cast<double>(n)); }

double temperature_beta(double c, double s) { return s > 1.0 ? 1.0 + c * std::log(s) : 1.0; }

std::vector<int64_t> AttentionSpec::windows(int64_t H, int64_t T) const {
  switch (mask.kind) {
    case MaskKind::Causal: return std::vector<int64_t>(H, 0);
    case MaskKind::Window: return std::vector<int64_t>(H, mask.window);
    case MaskKind::Scope: {
      if (!mask.scopes.empty()) return mask.scopes;
      const int64_t t = mask.freeze_scopes && mask.scope_train_len > 0 ? mask.scope_train_len : T;
      return scope_windows(H, t, mask.scope_gamma, mask.scope_min, mask.scope_max);
    }
    default: throw ValueError("bad mask kind");
  }
}

void AttentionSpec::validate(int64_t H, int64_t Hkv, int64_t D, int64_t T) const {
  HZ_CHECK(H > 0 && Hkv > 0, ValueError, "attention: n_heads (", H, ") and n_kv_heads (", Hkv,
           ") must be positive");
  HZ_CHECK(H % Hkv == 0, ValueError, "attention: n_heads (", H, ") must be divisible by n_kv_heads (",
           Hkv, "); pick n_kv_heads among the divisors of ", H);
  HZ_CHECK(D > 0, ValueError, "attention: head_dim must be positive");
  HZ_CHECK(T > 0, ValueError, "attention: sequence length must be positive");
  HZ_CHECK(!diff || 2 * H <= 128, ValueError, "attention: diff runs 2 n_heads = ", 2 * H,
           " attention heads; the fused op takes at most 128");
  if (pos.kind == PosKind::Rope || pos.kind == PosKind::PRope) {
    HZ_CHECK(D % 2 == 0, ValueError, "attention: RoPE rotates pairs, so head_dim (", D,
             ") must be even");
    HZ_CHECK(pos.rope_base > 1.0, ValueError, "attention: rope_base must be > 1, got ", pos.rope_base);
    HZ_CHECK(pos.rope_fraction >= 0 && pos.rope_fraction <= 1, ValueError,
             "attention: rope_fraction must be in [0, 1], got ", pos.rope_fraction);
    for (int64_t m : pos.rope_pairs)
      HZ_CHECK(m >= 0 && m < D / 2, ValueError, "attention: rope_pairs lists pair ", m, "; head_dim ", D, " has pairs 0..",
               D / 2 - 1);
    HZ_CHECK(pos.rope_freq_factors.empty() || static_cast<int64_t>(pos.rope_freq_factors.size()) == D / 2, ValueError,
             "attention: rope_freq_factors has ", pos.rope_freq_factors.size(), " values; head_dim ", D, " has ", D / 2,
             " frequency pairs, one factor each");
    for (double m : pos.rope_freq_factors)
      HZ_CHECK(std::isfinite(m) && m >= 0, ValueError, "attention: rope_freq_factors must be finite and >= 0, got ", m);
    for (const auto* v : {&pos.longrope_long_factors, &pos.longrope_short_factors}) {
      const char* f = v == &pos.longrope_long_factors ? "longrope_long_factors" : "longrope_short_factors";
      HZ_CHECK(v->empty() || static_cast<int64_t>(v->size()) == D / 2, ValueError, "attention: ", f, " has ", v->size(),
               " values; head_dim ", D, " has ", D / 2, " frequency pairs, one factor each");
      for (double x : *v)
        HZ_CHECK(std::isfinite(x) && x > 0, ValueError, "attention: ", f, " must be finite and > 0, got ", x);
    }
  }
  HZ_CHECK(pos.scaling != RopeScaling::LongRoPE || !pos.longrope_long_factors.empty(), ValueError,
           "attention: rope_scaling longrope needs longrope_long_factors (head_dim/2 rescale factors, a list or a JSON "
           "file such as a LongRoPE release or a Phi-3 config.json)");
  HZ_CHECK(pos.rope_freq_factors.empty() || pos.kind == PosKind::Rope || pos.kind == PosKind::PRope, ValueError,
           "attention: rope_freq_factors multiply RoPE's frequencies, but the layer's position encoding is '",
           name(pos.kind), "'");
  // learned angles rotate through rotate_by_angles with RoPE's frequencies: a rope layer only
  const char* learned = pos.rope_angles != RopeAngles::Position ? "rope_angles: accumulated"
                        : pos.learned_freqs != LearnedFreqs::None ? "learned_freqs"
                        : pos.rotate_v                            ? "rotate_v"
                        : pos.angles_per_head                     ? "angles_per_head"
                                                                  : nullptr;
  HZ_CHECK(!learned || pos.kind == PosKind::Rope, ValueError, "attention: ", learned,
           " learns or reuses RoPE's angles, but the layer's position encoding is '", name(pos.kind),
           "'; use pos: rope");
  HZ_CHECK(!pos.angles_per_head || pos.rope_angles == RopeAngles::Accumulated, ValueError,
           "attention: angles_per_head gives each KV head its own accumulated angles; it needs rope_angles: accumulated");
  if (pos.kind == PosKind::PRope) {
    HZ_CHECK(pos.prope_fraction > 0 && pos.prope_fraction <= 1, ValueError,
             "attention: prope_fraction must be in (0, 1], got ", pos.prope_fraction);
    HZ_CHECK(pos.prope_base_eff > 1, ValueError, "attention: prope_base_eff must be > 1");
  }
  if (pos.scaling != RopeScaling::None) {
    HZ_CHECK(pos.kind == PosKind::Rope, ValueError, "attention: RoPE scaling '", name(pos.scaling),
             "' needs position encoding 'rope', got '", name(pos.kind), "'");
    HZ_CHECK(pos.factor >= 1.0 || (pos.scaling == RopeScaling::DynamicNTK && pos.factor > 0), ValueError,
             "attention: RoPE scaling factor must be >= 1, got ", pos.factor);
    if (pos.scaling == RopeScaling::YaRN) {
      HZ_CHECK(pos.yarn_beta > pos.yarn_alpha, ValueError, "attention: yarn_beta must exceed yarn_alpha");
      HZ_CHECK(pos.yarn_ramp != YarnRamp::Index || pos.yarn_alpha > 0, ValueError,
               "attention: the index YaRN ramp needs yarn_alpha > 0 (a number of rotations)");
      HZ_CHECK(pos.yarn_mscale >= 0, ValueError, "attention: yarn_mscale must be >= 0 (0: 0.1 ln s + 1)");
    }
    if (pos.scaling == RopeScaling::Llama3)
      HZ_CHECK(pos.llama3_high_freq_factor > pos.llama3_low_freq_factor && pos.llama3_low_freq_factor > 0, ValueError,
               "attention: llama3 needs high_freq_factor > low_freq_factor > 0, got ", pos.llama3_high_freq_factor,
               " and ", pos.llama3_low_freq_factor);
  }
  if (mask.kind == MaskKind::Window) {
    HZ_CHECK(mask.window > 0, ValueError, "attention: sliding window must be positive; use mask 'causal' for an unbounded window");
    HZ_CHECK(mask.window <= T, ValueError, "attention: sliding window (", mask.window,
             ") exceeds the context length (", T, "); use a window <= ", T, " or mask 'causal'");
  }
  HZ_CHECK(mask.chunk >= 0, ValueError, "attention: chunk must be >= 0 (0 = no chunks), got ", mask.chunk);
  HZ_CHECK(mask.prefix >= 0, ValueError, "attention: prefix must be >= 0 (0 = causal throughout), got ", mask.prefix);
  HZ_CHECK(mask.prefix == 0 || !forget, ValueError,
           "attention: a prefix attends to later keys, where FoX's decay (a product of gates between query and key) "
           "is not defined; use prefix or forget, not both");
  HZ_CHECK(additive != AdditiveKind::Alibi || pos.kind != PosKind::Alibi, ValueError,
           "attention: additive 'alibi' adds ALiBi's slopes beside the position encoding, which is alibi already; use "
           "pos: alibi or additive: alibi, not both");
  HZ_CHECK(mask.sink_tokens >= 0, ValueError, "attention: sink_tokens must be >= 0 (0 = none), got ", mask.sink_tokens);
  HZ_CHECK(mask.sink_tokens == 0 || mask.kind != MaskKind::Causal || mask.chunk > 0, ValueError,
           "attention: sink_tokens (", mask.sink_tokens, ") keep the first tokens visible beside a window, a scope ",
           "or a chunk; a causal mask without chunks sees them already");
  if (mask.kind == MaskKind::Scope) {
    if (!mask.scopes.empty()) {
      HZ_CHECK(static_cast<int64_t>(mask.scopes.size()) == H, ValueError, "attention: ",
               mask.scopes.size(), " explicit scopes given for ", H, " query heads; give one per head");
      for (auto s : mask.scopes)
        HZ_CHECK(s >= 1 && s <= T, ValueError, "attention: scope ", s, " outside [1, T=", T, "]");
    }
    HZ_CHECK(mask.scope_gamma == 0 || mask.scope_gamma > 1, ValueError,
             "attention: scope_gamma must be > 1 (or 0 for auto)");
    HZ_CHECK(mask.scope_min >= 1, ValueError, "attention: scope_min must be >= 1");
    HZ_CHECK(mask.scope_max == 0 || mask.scope_max >= mask.scope_min, ValueError,
             "attention: scope_max must be >= scope_min");
  }
  if (logit.kind == LogitKind::ScaleInvariant)
    HZ_CHECK(logit.tau > 0, ValueError, "attention: scale_invariant tau must be positive");
  if (logit.kind == LogitKind::SwanRow) {
    HZ_CHECK(logit.swan_a > 1, ValueError, "attention: swan_row a must be > 1 so that g(n) >= 1");
  }
  if (logit.kind == LogitKind::Temperature)
    HZ_CHECK(logit.beta > 0, ValueError, "attention: temperature beta must be positive");
  if (qk_norm == QKNorm::PerHead || qk_norm == QKNorm::Full) {
    // nothing else to check: gains are created by the layer
  }
}

namespace {
// describe()'s toggles: the fields the table (spec_fields.h) marks shown, each where it is not at its
// default, as "name(value)" (a number), "name=value" (a choice) or "name" (a switch); those of the mask
// (part = &s.mask) or those of AttentionSpec itself (part = nullptr). FoX shows its bias: fox(b=...).
struct Shown {
  std::ostringstream& os;
  const AttentionSpec& s;
  const void* part;
  bool in(const void* x) const {
    auto inside = [&](const auto& m) {
      const char *c = static_cast<const char*>(x), *b = reinterpret_cast<const char*>(&m);
      return std::less_equal<const char*>()(b, c) && std::less<const char*>()(c, b + sizeof(m));
    };
    if (part) return part == &s.mask && inside(s.mask);
    return !inside(s.pos) && !inside(s.mask) && !inside(s.logit);
  }
  static std::string leaf(const std::string& p) { return p.substr(p.rfind('.') + 1); }
  template <class T>
  void operator()(const std::string& p, T& v, const SpecField& f, const T& dflt) {
    if constexpr (std::is_arithmetic_v<T>) {  // no list is shown
      if (!f.described || v == dflt || !in(&v)) return;
      if constexpr (std::is_same_v<T, bool>) os << " " << (&v == &s.forget ? "fox(b=" + num(s.forget_bias) + ")" : leaf(p));
      else os << " " << leaf(p) << "(" << v << ")";
    }
  }
  template <class E, class P, class N>
  void enumeration(const std::string& p, E& v, const SpecField& f, P, N name, const E& dflt) {
    if (f.described && v != dflt && in(&v)) os << " " << leaf(p) << "=" << name(v);
  }
  static std::string num(double x) {
    std::ostringstream o;
    o << x;
    return o.str();
  }
};
void shown_fields(std::ostringstream& os, AttentionSpec& s, const void* part) {
  Shown w{os, s, part};
  visit_spec_fields_with_defaults("", s, w);
}
}  // namespace

std::string AttentionSpec::describe() const {
  std::ostringstream os;
  os << name(pos.kind);
  if (pos.kind == PosKind::Rope || pos.kind == PosKind::PRope) os << "(base=" << pos.rope_base;
  if (pos.kind == PosKind::PRope) os << ", p=" << pos.prope_fraction << ", base_eff=" << pos.prope_base_eff;
  if ((pos.kind == PosKind::Rope || pos.kind == PosKind::PRope) && pos.partial()) {
    if (pos.rope_pairs.empty()) os << ", pairs=" << name(pos.rope_select) << " " << pos.rope_fraction;
    else os << ", pairs=" << pos.rope_pairs.size() << " listed";
  }
  if ((pos.kind == PosKind::Rope || pos.kind == PosKind::PRope) && !pos.rope_freq_factors.empty())
    os << ", freq factors x" << pos.rope_freq_factors.size();
  if (pos.kind == PosKind::Rope && pos.rope_angles != RopeAngles::Position)
    os << ", angles=" << name(pos.rope_angles) << (pos.angles_per_head ? " per head" : "");
  if (pos.kind == PosKind::Rope && pos.learned_freqs != LearnedFreqs::None)
    os << ", learned_freqs=" << name(pos.learned_freqs);
  if (pos.kind == PosKind::Rope && pos.rotate_v) os << ", rotate_v";
  if (pos.kind == PosKind::Rope && pos.scaling != RopeScaling::None) {
    os << ", " << name(pos.scaling) << " x" << pos.factor;
    if (pos.original_context > 0) os << " of " << pos.original_context;
    if (pos.scaling == RopeScaling::YaRN)
      os << " ramp=" << name(pos.yarn_ramp) << "[" << pos.yarn_alpha << ", " << pos.yarn_beta << "]"
         << (pos.yarn_ramp == YarnRamp::Index && !pos.yarn_truncate ? " exact" : "")
         << (pos.yarn_mscale > 0 ? " mscale=" + std::to_string(pos.yarn_mscale) : std::string());
    if (pos.scaling == RopeScaling::Llama3)
      os << " freq_factors=[" << pos.llama3_low_freq_factor << ", " << pos.llama3_high_freq_factor << "]";
    if (pos.scaling == RopeScaling::LongRoPE)
      os << " factors=" << pos.longrope_long_factors.size() << (pos.longrope_short_factors.empty() ? "" : "+short");
  }
  if (pos.kind == PosKind::Rope || pos.kind == PosKind::PRope) os << ")";
  os << " " << name(mask.kind);
  if (mask.kind == MaskKind::Window) os << "(" << mask.window << ")";
  if (mask.kind == MaskKind::Scope)
    os << (mask.scopes.empty() ? "(gamma=" + (mask.scope_gamma > 0 ? std::to_string(mask.scope_gamma) : std::string("auto"))
                               : std::string("(explicit")) << (mask.freeze_scopes ? ", frozen)" : ")");
  AttentionSpec fields = *this;  // the table visits a mutable spec
  shown_fields(os, fields, &fields.mask);  // chunk(C) sink_tokens(S) prefix(P)
  os << " " << name(logit.kind);
  if (logit.kind == LogitKind::ScaleInvariant) os << "(tau=" << logit.tau << ")";
  if (logit.kind == LogitKind::SwanRow) os << "(a=" << logit.swan_a << ")";
  if (logit.kind == LogitKind::Temperature) os << "(beta=" << logit.beta << ", c=" << logit.temp_c << ")";
  if (logit.kind == LogitKind::LogN)
    os << "(c=" << logit.logn_c << (logit.logn_learnable ? ", learned" : "")
       << (logit.logn_position ? ", n=position" : ", n=visible") << ")";
  if (logit.qtemp_alpha != 0.0) os << " qtemp(alpha=" << logit.qtemp_alpha << ", beta=" << logit.qtemp_beta << ")";
  shown_fields(os, fields, nullptr);  // qk_norm=K gate=G sink fox(b=B) diff
  return os.str();
}

}  // namespace hz::attn
