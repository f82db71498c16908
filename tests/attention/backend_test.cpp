// The route of an attention call on a GPU (attention/backend.h): cuDNN's fused attention takes exactly
// the calls it expresses, with the graph attributes that express them, and names the first
// ingredient of any other call; a layer kind's route is the same decision at its training shape.
#include <gtest/gtest.h>

#include <cmath>

#include "attention/backend.h"
#include "attention/fused.h"

using namespace hz;
using namespace hz::attn;

namespace {

constexpr int64_t kH = 8, kT = 256, kD = 64;

// The kernel parameters of a call of spec s (B 1, Tq = Tk = T unless given), with the terms' flags.
AttnKernelParams params(const AttentionSpec& s, int64_t Hkv = kH, int64_t D = kD, int64_t Tq = kT, int64_t Tk = kT) {
  AttnConfig cfg = make_attn_config(s, kH, Tk, kT);
  const int64_t H = s.diff ? 2 * kH : kH;
  AttnKernelParams P = make_kernel_params(cfg, 1, H, Hkv, Tq, Tk, D);
  P.sink = s.sink;
  P.fox = s.forget;
  return P;
}

// cuDNN refuses P, naming `what`.
::testing::AssertionResult refused(const AttnKernelParams& P, const std::string& what, DType dt = DType::BF16) {
  const CudnnPlan plan = cudnn_plan(P, dt);
  if (plan.ok) return ::testing::AssertionFailure() << "taken: " << plan.graph.describe();
  if (plan.why.find(what) == std::string::npos)
    return ::testing::AssertionFailure() << "refused for '" << plan.why << "', not for '" << what << "'";
  return ::testing::AssertionSuccess();
}

}  // namespace

TEST(CudnnPlan, TakesCausalAttentionWithItsScale) {
  const CudnnPlan plan = cudnn_plan(params({}), DType::BF16);
  ASSERT_TRUE(plan.ok) << plan.why;
  EXPECT_EQ(plan.graph.window, 0);
  EXPECT_FALSE(plan.graph.bottom_right);
  EXPECT_FALSE(plan.graph.alibi || plan.graph.sink || plan.graph.gqa);
  EXPECT_DOUBLE_EQ(plan.graph.attn_scale, 1.0 / 8.0);
  EXPECT_EQ(plan.graph.describe(), "causal");
}

TEST(CudnnPlan, TakesWindowsSinksGqaAndTemperature) {
  AttentionSpec s;
  s.mask.kind = MaskKind::Window;
  s.mask.window = 128;
  s.sink = true;
  s.logit.kind = LogitKind::Temperature;
  s.logit.beta = 1.5;
  const CudnnPlan plan = cudnn_plan(params(s, 2), DType::BF16);
  ASSERT_TRUE(plan.ok) << plan.why;
  EXPECT_EQ(plan.graph.window, 128);
  EXPECT_TRUE(plan.graph.sink);
  EXPECT_TRUE(plan.graph.gqa);
  EXPECT_DOUBLE_EQ(plan.graph.attn_scale, 1.5 / 8.0);  // beta folded into the scale
  EXPECT_EQ(plan.graph.describe(), "window 128, sinks, GQA");
  // DroPE's temperature at 4x the training length: beta = 1 + c ln 4, still one constant per call
  AttentionSpec d;
  d.logit.kind = LogitKind::Temperature;
  d.logit.temp_c = 0.5;
  const CudnnPlan at4 = cudnn_plan(params(d, kH, kD, 4 * kT, 4 * kT), DType::BF16);
  ASSERT_TRUE(at4.ok) << at4.why;
  EXPECT_NEAR(at4.graph.attn_scale, (1.0 + 0.5 * std::log(4.0)) / 8.0, 1e-15);
}

TEST(CudnnPlan, DecodingIsBottomRightAndOtherOffsetsAreRefused) {
  AttnKernelParams P = params({}, kH, kD, 1, kT);  // one new token after T - 1 cached keys
  const CudnnPlan plan = cudnn_plan(P, DType::BF16);
  ASSERT_TRUE(plan.ok) << plan.why;
  EXPECT_TRUE(plan.graph.bottom_right);
  P.q_offset = 10;
  EXPECT_TRUE(refused(P, "offset"));
  AttnKernelParams split = params({});
  split.key_begin = 64;  // context parallelism's partial call over some of a row's keys
  EXPECT_TRUE(refused(split, "key range"));
}

TEST(CudnnPlan, AlibiOnlyWithItsStandardSlopesAndSquareCalls) {
  AttentionSpec s;
  s.pos.kind = PosKind::Alibi;
  const CudnnPlan plan = cudnn_plan(params(s), DType::BF16);
  ASSERT_TRUE(plan.ok) << plan.why;
  EXPECT_TRUE(plan.graph.alibi);
  EXPECT_TRUE(refused(params(s, kH, kD, 1, kT), "ALiBi with Tq != Tk"));
  s.diff = true;  // DIFF V2's attention heads 2h and 2h+1 share a slope: not 2^(-8h/H) over 2H heads
  EXPECT_TRUE(refused(params(s), "ALiBi slopes"));
}

TEST(CudnnPlan, NamesEveryIngredientItLeavesToHorizon) {
  EXPECT_TRUE(refused(params({}), "f32 activations", DType::F32));
  EXPECT_TRUE(refused(params({}, kH, 60), "head_dim 60"));
  EXPECT_TRUE(refused(params({}, kH, 264), "head_dim 264"));
  AttentionSpec scope;
  scope.mask.kind = MaskKind::Scope;
  EXPECT_TRUE(refused(params(scope), "SCOPE per-head scopes"));
  AttentionSpec chunk;
  chunk.mask.chunk = 64;
  EXPECT_TRUE(refused(params(chunk), "chunked attention"));
  AttentionSpec sinks;
  sinks.mask.kind = MaskKind::Window;
  sinks.mask.window = 64;
  sinks.mask.sink_tokens = 4;
  EXPECT_TRUE(refused(params(sinks), "sink tokens"));
  AttentionSpec prefix;
  prefix.mask.prefix = 16;
  EXPECT_TRUE(refused(params(prefix), "prefix"));
  AttentionSpec fox;
  fox.forget = true;
  EXPECT_TRUE(refused(params(fox), "FoX"));
  AttentionSpec si, logn, ssmax, swan, qtemp;
  si.logit.kind = LogitKind::ScaleInvariant;
  EXPECT_TRUE(refused(params(si), "scale-invariant"));
  ssmax.logit.kind = LogitKind::LogN;
  EXPECT_TRUE(refused(params(ssmax), "SSMax"));
  logn.logit.kind = LogitKind::LogN;
  logn.logit.logn_position = true;
  EXPECT_TRUE(refused(params(logn), "LogN"));
  swan.logit.kind = LogitKind::SwanRow;
  EXPECT_TRUE(refused(params(swan), "SWAN"));
  qtemp.logit.qtemp_alpha = 0.1;
  EXPECT_TRUE(refused(params(qtemp), "Llama 4's position temperature"));
  AttnKernelParams drawn = params({});
  const double positions[kT] = {};
  drawn.positions = positions;  // PoSE and other drawn positions read by a logit term
  EXPECT_TRUE(refused(drawn, "drawn token positions"));
  AttnKernelParams docs = params({});
  const int32_t bounds[2 * kT] = {};
  docs.doc_start = bounds;
  docs.doc_end = bounds + kT;
  docs.doc_T = kT;
  EXPECT_TRUE(refused(docs, "packed documents"));
}

TEST(LayerRoute, IsThePlanAtTheTrainingShapeUnderTheRecipesChoice) {
  AttentionSpec local;
  local.mask.kind = MaskKind::Window;
  local.mask.window = 128;
  local.sink = true;
  const LayerRoute r = route_layer(local, kH, kH, kD, kT, kT, DType::BF16, false, AttnBackend::Auto);
  EXPECT_EQ(r.backend, AttnBackend::CuDNN);
  EXPECT_EQ(r.describe(), "cudnn (window 128, sinks)");
  EXPECT_EQ(route_layer(local, kH, kH, kD, kT, kT, DType::BF16, false, AttnBackend::Horizon).describe(),
            "horizon (run.attention_backend: horizon)");
  // packed documents in the layer's calls keep it on Horizon's kernels, as cudnn_plan does per call
  EXPECT_EQ(route_layer(local, kH, kH, kD, kT, kT, DType::BF16, true, AttnBackend::Auto).describe(),
            "horizon (packed documents)");
  AttentionSpec scope;
  scope.mask.kind = MaskKind::Scope;
  const LayerRoute s = route_layer(scope, kH, kH, kD, kT, kT, DType::BF16, false, AttnBackend::Auto);
  EXPECT_EQ(s.backend, AttnBackend::Horizon);
  EXPECT_EQ(s.describe(), "horizon (SCOPE per-head scopes (windows that differ by head))");
  try {
    (void)route_layer(scope, kH, kH, kD, kT, kT, DType::BF16, false, AttnBackend::CuDNN);
    FAIL() << "cudnn forced on SCOPE";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("SCOPE per-head scopes"), std::string::npos) << e.what();
  }
  // DIFF V2's op is plain attention over 2H heads sharing k and v: cuDNN takes it (GQA)
  AttentionSpec diff;
  diff.diff = true;
  const LayerRoute d = route_layer(diff, kH, kH, kD, kT, kT, DType::BF16, false, AttnBackend::Auto);
  EXPECT_EQ(d.describe(), "cudnn (causal, GQA)");
  EXPECT_EQ(parse_attn_backend("cudnn"), AttnBackend::CuDNN);
  EXPECT_THROW(parse_attn_backend("flash"), ValueError);
}
