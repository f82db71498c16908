// Horizon: which implementation runs a call of the fused attention op on a GPU.
//
// cuDNN's fused attention (cudnn-frontend's SDPA graph, forward and backward: attention/cuda/
// attn_cudnn.cpp) runs every call whose ingredients it expresses exactly; Horizon's own kernels
// (attention/cuda/: reference and tensor-core) run the rest. CPU calls always run Horizon's CPU
// kernel. One function decides, on the resolved kernel parameters (cudnn_plan), so the route a
// layer kind is shown (`horizon info`, the run log: "cudnn (window 128, sinks)") and the route its
// calls take are the same decision.
//
// What cuDNN is told (CudnnGraphDesc), in Horizon's terms (attention/tiling.h):
//   causal            the diagonal band's right bound 0: key j visible only for t = p_i - j >= 0;
//                     aligned bottom-right (query i at position Tk - Tq + i, the KV cache's decoding)
//   window W          the band's left bound W: t < W (Horizon's window convention, hf/horizon.cpp)
//   alibi             cuDNN's ALiBi with slopes 2^(-8h/H), h = 1..H (Horizon's, attention/spec.h)
//   sink              the learned sink logit per head joins each row's denominator (gpt-oss; its
//                     gradient through cuDNN's dsink)
//   attn_scale        1/sqrt(D) times the temperature's beta (a constant per call)
//   gqa               H query heads over Hkv key/value heads
// Everything else stays on Horizon's kernels, named by the ingredient that keeps it there: SCOPE's
// per-head scopes, chunks, sink tokens, a prefix, FoX's gates, GRAPE's additive rates, drawn positions, packed documents
// (cuDNN's ragged sequences index a (tokens, heads, D) layout; Horizon's documents sit inside
// (B, H, T, D) rows, a mapping not yet checked on a GPU), the logit
// transforms that depend on the row or the distance (scale-invariant, SSMax / LogN, SWAN's row,
// Llama 4's position temperature), DroPE's per-document temperature, a key range or query offset
// that splits a row (context parallelism's partial calls), and f32 activations (cuDNN's fused
// attention takes bf16).
#pragma once
#include <cstdint>
#include <string>

#include "attention/spec.h"
#include "attention/tiling.h"
#include "core/dtype.h"

namespace hz::attn {

// run.attention_backend: auto (cuDNN where it expresses the call, else Horizon's kernels),
// horizon (Horizon's kernels only), cudnn (cuDNN only: a call it cannot express is refused).
enum class AttnBackend : uint8_t { Auto, Horizon, CuDNN, Count };
static_assert(static_cast<int>(AttnBackend::Count) == 3, "update name(AttnBackend) and parse_attn_backend");
const char* name(AttnBackend b);                      // auto horizon cudnn
AttnBackend parse_attn_backend(const std::string& s);  // ValueError listing the names

// Whether this build has cuDNN's fused attention (cudnn-frontend's headers were found: HZ_CUDNN);
// without it every CUDA call runs Horizon's kernels and run.attention_backend: cudnn is refused at
// the first call.
bool cudnn_compiled();

// The attributes of the cuDNN SDPA graph a call builds (the graph cache's key with the shapes).
struct CudnnGraphDesc {
  int64_t window = 0;        // the band's left bound (0: none); the right bound is always 0 (causal)
  bool bottom_right = false; // Tq < Tk: the queries are the last Tq positions
  bool alibi = false;
  bool sink = false;
  bool gqa = false;
  double attn_scale = 0.0;   // the logits' scale: 1/sqrt(D), times beta under a temperature
  std::string describe() const;  // "causal, window 128, sinks, GQA"
  bool operator==(const CudnnGraphDesc& o) const;
};

struct CudnnPlan {
  bool ok = false;
  std::string why;       // when !ok: the first ingredient cuDNN does not express ("SCOPE per-head scopes")
  CudnnGraphDesc graph;  // when ok
};

// Whether cuDNN's fused attention computes exactly the call P (documents and positions resolved)
// with activations of dtype dt, and the graph it would build.
CudnnPlan cudnn_plan(const AttnKernelParams& P, DType dt);

// The route of a layer kind: its spec at the training length T (the windows and the temperature
// at T), n_heads query heads (the op sees DIFF V2's 2 n_heads), Hkv key/value heads, head dim D,
// activations of dtype dt, packed documents in its calls or not, under the recipe's choice.
// Horizon's kernels when the choice is horizon
// or cuDNN cannot express the layer (auto); a ValueError naming the ingredient when the choice is
// cudnn and cuDNN cannot.
struct LayerRoute {
  AttnBackend backend = AttnBackend::Horizon;  // Horizon or CuDNN, never Auto
  CudnnPlan plan;
  std::string describe() const;  // "cudnn (window 128, sinks)", "horizon (SCOPE per-head scopes)"
};
LayerRoute route_layer(const AttentionSpec& spec, int64_t n_heads, int64_t Hkv, int64_t D, int64_t T,
                       int64_t train_len, DType dt, bool documents, AttnBackend want);

}  // namespace hz::attn
