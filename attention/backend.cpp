// Horizon: the route of a fused-attention call on a GPU (see backend.h).
#include "attention/backend.h"

#include <cmath>

#include "attention/fused.h"
#include "attention/fused_kernels.h"
#include "core/error.h"

namespace hz::attn {

namespace {
const char* const kBackend[] = {"auto", "horizon", "cudnn"};
const char* const kDocuments = "packed documents";
}  // namespace

const char* name(AttnBackend b) { return kBackend[static_cast<int>(b)]; }

bool cudnn_compiled() { return detail::cudnn_compiled(); }

AttnBackend parse_attn_backend(const std::string& s) {
  for (int i = 0; i < static_cast<int>(AttnBackend::Count); ++i)
    if (s == kBackend[i]) return static_cast<AttnBackend>(i);
  throw ValueError("attention backend '" + s + "': expected auto, horizon or cudnn");
}

std::string CudnnGraphDesc::describe() const {
  std::string s = window > 0 ? "window " + std::to_string(window) : "causal";
  if (bottom_right) s += " (bottom-right)";
  if (alibi) s += ", ALiBi";
  if (sink) s += ", sinks";
  if (gqa) s += ", GQA";
  return s;
}

bool CudnnGraphDesc::operator==(const CudnnGraphDesc& o) const {
  return window == o.window && bottom_right == o.bottom_right && alibi == o.alibi && sink == o.sink &&
         gqa == o.gqa && attn_scale == o.attn_scale;
}

CudnnPlan cudnn_plan(const AttnKernelParams& P, DType dt) {
  CudnnPlan plan;
  auto no = [&](std::string why) {
    plan.why = std::move(why);
    return plan;
  };
  if (dt != DType::BF16) return no(std::string(dtype_name(dt)) + " activations (cuDNN's fused attention takes bf16)");
  if (P.D % 8 != 0 || P.D > 256) return no("head_dim " + std::to_string(P.D) + " (cuDNN: a multiple of 8 up to 256)");
  if (P.fox) return no("FoX forget gates");
  if (P.dist) return no("GRAPE's additive distance term");
  if (P.chunk > 0) return no("chunked attention");
  if (P.sink_tokens > 0) return no("sink tokens (StreamingLLM)");
  if (P.prefix > 0) return no("a prefix-LM prefix");
  if (P.positions) return no("drawn token positions");
  if (P.min_distance > 0) return no("a minimum distance");
  if (P.key_begin != 0 || P.key_end != P.Tk) return no("a key range (a row split over calls)");
  if (P.q_offset != P.Tk - P.Tq) return no("queries at an offset other than Tk - Tq");
  for (int64_t h = 1; h < P.H; ++h)
    if (P.window[h] != P.window[0]) return no("SCOPE per-head scopes (windows that differ by head)");
  switch (P.logit) {
    case LogitKind::Identity: break;
    case LogitKind::Temperature:
      if (has_documents(P) && P.temp_c != 0.0) return no("DroPE's per-document temperature");
      break;
    case LogitKind::ScaleInvariant: return no("scale-invariant logits");
    case LogitKind::LogN: return no(P.logn_position ? "LogN logit scaling" : "SSMax logit scaling");
    case LogitKind::SwanRow: return no("SWAN's row scaling");
    default: return no(std::string(name(P.logit)) + " logits");
  }
  if (P.qtemp_alpha != 0.0) return no("Llama 4's position temperature");
  if (P.alibi) {
    if (P.Tq != P.Tk) return no("ALiBi with Tq != Tk");
    const std::vector<double> standard = alibi_slopes(P.H);
    for (int64_t h = 0; h < P.H; ++h)
      if (P.slope[h] != standard[h]) return no("ALiBi slopes other than 2^(-8h/H) (DIFF V2's paired heads)");
  }
  // cuDNN takes packed sequences as ragged offsets into a (tokens, heads, D) layout; Horizon's
  // documents live inside (B, H, T, D) rows, and that mapping waits for a GPU to be checked on
  if (has_documents(P)) return no(kDocuments);
  plan.ok = true;
  CudnnGraphDesc& g = plan.graph;
  g.window = P.window[0];
  g.bottom_right = P.Tq < P.Tk;
  g.alibi = P.alibi;
  g.sink = P.sink;
  g.gqa = P.Hkv < P.H;
  g.attn_scale = P.scale * (P.logit == LogitKind::Temperature ? P.beta : 1.0);
  return plan;
}

std::string LayerRoute::describe() const {
  if (backend == AttnBackend::CuDNN) return "cudnn (" + plan.graph.describe() + ")";
  return "horizon (" + (plan.why.empty() ? std::string("run.attention_backend: horizon") : plan.why) + ")";
}

LayerRoute route_layer(const AttentionSpec& spec, int64_t n_heads, int64_t Hkv, int64_t D, int64_t T,
                       int64_t train_len, DType dt, bool documents, AttnBackend want) {
  const int64_t H = spec.diff ? 2 * n_heads : n_heads;
  AttnKernelParams P = make_kernel_params(make_attn_config(spec, n_heads, T, train_len), 1, H, Hkv, T, T, D);
  P.sink = spec.sink;
  P.fox = spec.forget;
  P.dist = spec.additive_rates();
  LayerRoute r;
  r.plan = cudnn_plan(P, dt);
  if (r.plan.ok && documents) r.plan = CudnnPlan{false, kDocuments, {}};  // what cudnn_plan says of such a call
  if (want == AttnBackend::CuDNN && !r.plan.ok)
    throw ValueError("run.attention_backend: cudnn cannot run this layer kind (" + spec.describe() + "): " + r.plan.why +
                     "; use auto (cuDNN where it can, Horizon's kernels elsewhere) or horizon");
  r.backend = want != AttnBackend::Horizon && r.plan.ok ? AttnBackend::CuDNN : AttnBackend::Horizon;
  if (want == AttnBackend::Horizon) r.plan.why.clear();
  return r;
}

}  // namespace hz::attn
