// The fused attention op on CUDA against the CPU op: every mask x position encoding x logit
// transform, GQA, Tq != Tk, lengths that are no multiple of any tile, rows with no visible key,
// f32 / f64 (reference kernels) and bf16 (reference and tensor-core kernels), forward, lse and
// every gradient (q, k, v and LogN's c); f32 on the tensor cores (the split kernels: each input a
// pair of bf16); block counters, determinism and LaMPE on CUDA.
//
// Tolerances come from the precision floor: with ref the CPU op in f64,
//   max |x - ref| <= k * max |x_lowprec - ref| + atol,
// where x_lowprec is the same computation at the kernel's precision: the CPU op in f32 for the
// f32 kernels, and for bf16 a naive double-precision attention written here from docs/methods.md (its own
// mask, independent of tiling.h) that rounds where a bf16 tensor-core pipeline rounds (the
// probabilities and dS before their products, every output), or for the split kernels where they
// round (the inputs and those operands to hi + lo pairs, outputs in f32).
// The cases skip themselves without a usable GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <string>
#include <tuple>

#include "attention/fused.h"
#include "attention/lampe.h"
#include "attention/rope.h"
#include "autograd/functions.h"
#include "core/device.h"
#include "core/rng.h"
#include "tests/attention/attn_test_util.h"

using namespace hz;
using namespace hz::attn;
using namespace hzt::attn_util;

namespace {

#define HZT_NEED_GPU()                                                                                   \
  if (!cuda::available())                                                                                \
  GTEST_SKIP() << "no usable CUDA device (" << (cuda::compiled() ? "no GPU/driver visible" : "HZ_CUDA=OFF build") \
               << "); scripts/gpu/gpu_check.sh runs these on a GPU machine"

// ---- f32 (reference kernels) and f64 --------------------------------------------------------------
class FusedCudaF32 : public ::testing::TestWithParam<Problem> {};
TEST_P(FusedCudaF32, MatchesCpuWithinTheF32Floor) {
  HZT_NEED_GPU();
  const Problem p = GetParam();
  const Inputs in = make_inputs(p, DType::F32, 41);
  const Result ref = run_op(p, in, DType::F64, Device::cpu());
  const Result low = run_op(p, in, DType::F32, Device::cpu());
  const Result x = run_op(p, in, DType::F32, Device::cuda(0), AttnImpl::Reference);
  expect_results(x, low, ref, 4.0, 1e-6);
}
std::vector<Problem> f32_cases() {
  std::vector<Problem> v = combos(16, 37);
  for (const Problem& p : shapes(16)) v.push_back(p);
  Problem big = shapes(128)[0];
  v.push_back(big);
  return v;
}
INSTANTIATE_TEST_SUITE_P(Cases, FusedCudaF32, ::testing::ValuesIn(f32_cases()), CaseName());

// f32 on the tensor cores (what Auto runs for head_dim 64 and 128 where the GPU has the shared
// memory): the split kernels against the CPU op in float64 at the split twin's floor.
class FusedCudaF32TensorCore : public ::testing::TestWithParam<Problem> {};
TEST_P(FusedCudaF32TensorCore, MatchesCpuWithinTheSplitFloor) {
  HZT_NEED_GPU();
  const Problem p = GetParam();
  if (!attn_tiles(AttnConfig{}, Device::cuda(0), DType::F32, p.D).tensor_core)
    GTEST_SKIP() << "no f32 tensor-core kernels for head_dim " << p.D << " on " << cuda::device_name(0);
  const Inputs in = f32_inputs(p, 49);
  const Result ref = run_op(p, in, DType::F64, Device::cpu(), AttnImpl::Auto, false);
  const Result low = naive(p, split_rounded(in), Rounding::Split);
  const Result x = run_op(p, in, DType::F32, Device::cuda(0), AttnImpl::TensorCore, false);
  expect_results(x, low, ref, 3.0, kSplitAtol, kSplitAtolSums);
}
std::vector<Problem> f32_tc_cases() {
  std::vector<Problem> v = combos(64, 100);
  for (const Problem& p : shapes(64)) v.push_back(p);
  for (const Problem& p : shapes(128)) v.push_back(p);
  return v;
}
INSTANTIATE_TEST_SUITE_P(Cases, FusedCudaF32TensorCore, ::testing::ValuesIn(f32_tc_cases()), CaseName());

TEST(FusedCudaF64, MatchesCpuToRounding) {
  HZT_NEED_GPU();
  for (Problem p : shapes(24)) {
    const Inputs in = make_inputs(p, DType::F64, 43);
    const Result ref = run_op(p, in, DType::F64, Device::cpu());
    const Result x = run_op(p, in, DType::F64, Device::cuda(0));
    SCOPED_TRACE(p.tag());
    expect_same(x, ref, 1e-11);
  }
}

// ---- bf16: reference kernels and tensor-core kernels ----------------------------------------------
struct Bf16Case {
  Problem p;
  AttnImpl impl;
};
class FusedCudaBf16 : public ::testing::TestWithParam<Bf16Case> {};
TEST_P(FusedCudaBf16, MatchesCpuWithinTheBf16Floor) {
  HZT_NEED_GPU();
  const Bf16Case c = GetParam();
  const Problem& p = c.p;
  if (c.impl == AttnImpl::TensorCore && !attn_tiles(AttnConfig{}, Device::cuda(0), DType::BF16, p.D).tensor_core)
    GTEST_SKIP() << "the tensor-core kernels do not take head_dim " << p.D;
  const Inputs in = bf16_inputs(p, 47);
  const Result ref = run_op(p, in, DType::F64, Device::cpu(), AttnImpl::Auto, false);
  const Result low = naive(p, in, true);
  expect_same(naive(p, in, false), ref);  // the naive twin is itself right (else its floor would mean nothing)
  const Result x = run_op(p, in, DType::BF16, Device::cuda(0), c.impl, false);
  expect_results(x, low, ref, 3.0, 1e-3);
}
std::vector<Bf16Case> bf16_cases() {
  std::vector<Bf16Case> v;
  for (AttnImpl impl : {AttnImpl::Reference, AttnImpl::TensorCore}) {
    for (const Problem& p : combos(64, 100)) v.push_back({p, impl});
    for (const Problem& p : shapes(64)) v.push_back({p, impl});
    for (const Problem& p : shapes(128)) v.push_back({p, impl});
  }
  for (const Problem& p : shapes(32)) v.push_back({p, AttnImpl::Reference});
  return v;
}
INSTANTIATE_TEST_SUITE_P(Cases, FusedCudaBf16, ::testing::ValuesIn(bf16_cases()),
                         [](const ::testing::TestParamInfo<Bf16Case>& info) {
                           return std::string(info.param.impl == AttnImpl::TensorCore ? "tc_" : "ref_") +
                                  info.param.p.tag();
                         });

// ---- cuDNN's fused attention (attention/backend.h) --------------------------------------------------
// Every case of the bf16 lists that cuDNN expresses, with and without sinks, through cuDNN: the same
// floor as Horizon's kernels against the f64 CPU op, forward, lse and every gradient (the sinks' too).
bool cudnn_takes(const Problem& p) {
  AttnKernelParams P = make_kernel_params(config_of(p), p.B, p.H, p.Hkv, p.Tq, p.Tk, p.D);
  P.sink = p.sink;
  P.fox = p.fox;
  if (p.drawn) P.positions = reinterpret_cast<const double*>(&p);  // any non-null: drawn positions
  if (!p.docs.empty()) P.doc_start = P.doc_end = reinterpret_cast<const int32_t*>(&p);
  return cudnn_plan(P, DType::BF16).ok;
}
std::vector<Problem> cudnn_cases() {
  std::vector<Problem> v;
  for (int64_t D : {64, 128}) {
    std::vector<Problem> all = combos(D, 100);
    for (const Problem& p : shapes(D)) all.push_back(p);
    for (MaskKind m : {MaskKind::Causal, MaskKind::Window}) {  // decoding: the queries are the last keys
      Problem dec;
      dec.D = D;
      dec.mask = m;
      dec.Tq = 17, dec.Tk = 130, dec.H = 8, dec.Hkv = 2;
      all.push_back(dec);
    }
    for (Problem p : all)
      for (bool sink : {false, true}) {
        p.sink = sink;
        if (cudnn_takes(p)) v.push_back(p);
      }
  }
  return v;
}
TEST(FusedCudaCudnn, TheCasesCoverWhatCudnnIsTold) {  // no GPU needed
  bool window = false, alibi = false, sink = false, gqa = false, decode = false, temperature = false;
  for (const Problem& p : cudnn_cases()) {
    window |= p.mask == MaskKind::Window;
    alibi |= p.pos == PosKind::Alibi;
    sink |= p.sink;
    gqa |= p.Hkv < p.H;
    decode |= p.Tq < p.Tk;
    temperature |= p.logit == LogitKind::Temperature;
  }
  EXPECT_TRUE(window && alibi && sink && gqa && decode && temperature)
      << "window " << window << ", ALiBi " << alibi << ", sinks " << sink << ", GQA " << gqa << ", decoding " << decode
      << ", temperature " << temperature;
  EXPECT_GE(cudnn_cases().size(), 40u);
}
class FusedCudaCudnn : public ::testing::TestWithParam<Problem> {};
TEST_P(FusedCudaCudnn, MatchesCpuWithinTheBf16Floor) {
  HZT_NEED_GPU();
  if (!cudnn_compiled()) GTEST_SKIP() << "this build has no cudnn-frontend (HZ_CUDNN)";
  const Problem& p = GetParam();
  const Inputs in = bf16_inputs(p, 53);
  const Result ref = run_op(p, in, DType::F64, Device::cpu(), AttnImpl::Auto, false);
  const Result low = naive(p, in, true);
  const Result x = run_op(p, in, DType::BF16, Device::cuda(0), AttnImpl::Auto, false, AttnBackend::CuDNN);
  expect_results(x, low, ref, 3.0, 1e-3);
  // and cuDNN's repeats bit for bit (its deterministic backward)
  const Result again = run_op(p, in, DType::BF16, Device::cuda(0), AttnImpl::Auto, false, AttnBackend::CuDNN);
  EXPECT_EQ(x.out, again.out);
  EXPECT_EQ(x.dq, again.dq);
  EXPECT_EQ(x.dk, again.dk);
  EXPECT_EQ(x.dv, again.dv);
}
INSTANTIATE_TEST_SUITE_P(Cases, FusedCudaCudnn, ::testing::ValuesIn(cudnn_cases()),
                         [](const ::testing::TestParamInfo<Problem>& info) { return info.param.tag(); });

TEST(FusedCudaCudnn, ForcedOnACallItCannotExpressIsRefusedByName) {
  HZT_NEED_GPU();
  Problem p;
  p.mask = MaskKind::Scope;
  const Inputs in = bf16_inputs(p, 59);
  try {
    (void)run_op(p, in, DType::BF16, Device::cuda(0), AttnImpl::Auto, false, AttnBackend::CuDNN);
    FAIL() << "cudnn ran SCOPE";
  } catch (const NotImplementedError& e) {
    EXPECT_NE(std::string(e.what()).find(cudnn_compiled() ? "SCOPE per-head scopes" : "no cudnn-frontend"),
              std::string::npos) << e.what();
  }
}

// ---- counters, determinism, the implementation switch, LaMPE ----------------------------------------
TEST(FusedCuda, VisitedBlocksEqualTheCpuOpsAtTheSameTiles) {
  HZT_NEED_GPU();
  for (auto [dt, impl] : {std::pair{DType::BF16, AttnImpl::Reference}, {DType::BF16, AttnImpl::TensorCore},
                          {DType::F32, AttnImpl::TensorCore}}) {  // f32 on the tensor cores: the split kernels' tiles
    for (Problem p : shapes(64)) {
      AttnConfig cfg = config_of(p);
      cfg.impl = impl;
      if (impl == AttnImpl::TensorCore && !attn_tiles(AttnConfig{}, Device::cuda(0), dt, p.D).tensor_core) continue;
      const AttnTiles tiles = attn_tiles(cfg, Device::cuda(0), dt, p.D);
      SCOPED_TRACE(p.tag() + " " + dtype_name(dt) + (impl == AttnImpl::TensorCore ? " tensor-core" : " reference"));
      Generator g(5);
      auto run = [&](Device dev, int64_t bq, int64_t bk, bool backward) {
        AttnConfig c = cfg;
        c.block_q = bq;
        c.block_k = bk;
        ag::Variable q(g.normal({p.B, p.H, p.Tq, p.D}, 0, 1, dt, dev), true),
            k(g.normal({p.B, p.Hkv, p.Tk, p.D}, 0, 1, dt, dev), true),
            v(g.normal({p.B, p.Hkv, p.Tk, p.D}, 0, 1, dt, dev), true);
        ag::Variable lc(Tensor::ones({p.H}, DType::F32, dev));
        reset_attn_stats();
        const AttnOutput o = fused_attention(q, k, v, c, {p.logit == LogitKind::LogN ? lc : ag::Variable()});
        if (backward) ag::sum_all(o.out).backward();
        return attn_stats();
      };
      const AttnStats gf = run(Device::cuda(0), cfg.block_q, cfg.block_k, true);
      const AttnStats cf = run(Device::cpu(), tiles.fwd_q, tiles.fwd_k, false);
      const AttnStats cb = run(Device::cpu(), tiles.bwd_q, tiles.bwd_k, true);
      EXPECT_EQ(gf.fwd_blocks, cf.fwd_blocks);
      EXPECT_EQ(gf.fwd_boundary_blocks, cf.fwd_boundary_blocks);
      EXPECT_EQ(gf.bwd_blocks, cb.bwd_blocks);
      EXPECT_GT(gf.fwd_blocks, 0);
    }
  }
}

TEST(FusedCuda, BackwardIsBitwiseDeterministic) {
  HZT_NEED_GPU();
  for (auto [dt, impl] : {std::pair{DType::BF16, AttnImpl::Reference}, {DType::BF16, AttnImpl::TensorCore},
                          {DType::F32, AttnImpl::TensorCore}}) {
    Problem p = shapes(64)[0];  // GQA 4:1, SCOPE, LogN, batch 2
    if (impl == AttnImpl::TensorCore && !attn_tiles(AttnConfig{}, Device::cuda(0), dt, p.D).tensor_core)
      continue;
    const Inputs in = make_inputs(p, dt, 53);
    const Result a = run_op(p, in, dt, Device::cuda(0), impl);
    const Result b = run_op(p, in, dt, Device::cuda(0), impl);
    EXPECT_EQ(a.out, b.out);
    EXPECT_EQ(a.dq, b.dq);
    EXPECT_EQ(a.dk, b.dk);
    EXPECT_EQ(a.dv, b.dv);
    EXPECT_EQ(a.dc, b.dc);
  }
}

// ---- the one-pass backward (HZ_ATTN_BACKWARD=one_pass: dK, dV and dQ from one kernel, dQ added in
// each query block's turn; attention/cuda/mma_body.h, dq_step) ----------------------------------------
struct EnvScope {  // an environment variable set for the calls in this scope (the kernels read it at each call)
  EnvScope(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    setenv(name, value, 1);
  }
  ~EnvScope() {  // the value before (a scope inside another restores the outer one's)
    if (had_) setenv(name_, old_.c_str(), 1);
    else unsetenv(name_);
  }
  EnvScope(const EnvScope&) = delete;
  EnvScope& operator=(const EnvScope&) = delete;

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};
struct OnePassScope : EnvScope {  // the one-pass backward for the calls in this scope
  OnePassScope() : EnvScope("HZ_ATTN_BACKWARD", "one_pass") {}
};
struct WgmmaScope : EnvScope {  // Hopper's wgmma kernels (HZ_ATTN_MMA=wgmma) for the calls in this scope
  WgmmaScope() : EnvScope("HZ_ATTN_MMA", "wgmma") {}
};
struct WgmmaFormScope : EnvScope {  // the same, the forward in another form (fused.h, WgmmaForward)
  explicit WgmmaFormScope(WgmmaForward f)
      : EnvScope("HZ_ATTN_MMA", f == WgmmaForward::Serial ? "wgmma_serial"
                                : f == WgmmaForward::Overlap ? "wgmma_overlap"
                                                             : "wgmma") {}
};
// whether a bf16 call of p runs on wgmma (HZ_ATTN_MMA=wgmma set, a compute-capability 9.0 GPU)
bool wgmma_takes(const Problem& p) {
  const AttnConfig cfg = config_of(p);
  AttnKernelParams P = make_kernel_params(cfg, p.B, p.H, p.Hkv, p.Tq, p.Tk, p.D);
  P.sink = p.sink;
  P.fox = p.fox;
  return use_wgmma(P, DType::BF16, Device::cuda(0));
}
// The general variant's problems at both head dims: chunks with LogN, sink tokens beside a window, a
// prefix with FoX and sinks, drawn positions with sink tokens, GRAPE's rates and queries last.
std::vector<Problem> general_cases() {
  std::vector<Problem> v;
  for (int64_t D : {64, 128}) {
    Problem p;
    p.D = D, p.H = 4, p.Hkv = 2, p.Tq = p.Tk = 300, p.chunk = 96, p.logit = LogitKind::LogN;
    v.push_back(p);
    p = Problem{};
    p.D = D, p.H = 4, p.Hkv = 2, p.Tq = p.Tk = 400, p.mask = MaskKind::Window, p.sink_tokens = 4,
    p.pos = PosKind::Alibi;
    v.push_back(p);
    p = Problem{};
    p.D = D, p.H = 2, p.Hkv = 1, p.Tq = p.Tk = 300, p.prefix = 100, p.logit = LogitKind::ScaleInvariant,
    p.fox = p.sink = true;
    v.push_back(p);
    p = Problem{};
    p.D = D, p.H = 2, p.Hkv = 1, p.Tq = 77, p.Tk = 300, p.drawn = true, p.sink_tokens = 2, p.dist = 3,
    p.mask = MaskKind::Scope;
    v.push_back(p);
  }
  return v;
}
struct OnePassCase {
  Problem p;
  DType dt;
};
// Every tensor-core case (bf16, and f32 on the split kernels) with the one-pass backward, at the
// two-pass kernels' floors, and run twice: the same bits (FoX's and LogN's gradients included: the
// kernel with FoX's and GRAPE's rows' sums and LogN's key sums; the general variant's problems).
// Every gradient of two runs, the same bits.
void expect_same_grads(const Result& x, const Result& y) {
  EXPECT_EQ(x.dq, y.dq);
  EXPECT_EQ(x.dk, y.dk);
  EXPECT_EQ(x.dv, y.dv);
  EXPECT_EQ(x.dz, y.dz);
  EXPECT_EQ(x.df, y.df);
  EXPECT_EQ(x.dc, y.dc);
}
// (with HZ_ATTN_BACKWARD=one_pass set by the caller)
void check_one_pass_case(const Problem& p, DType dt) {
  const bool split = dt == DType::F32;
  const Inputs in = split ? f32_inputs(p, 49) : bf16_inputs(p, 47);
  const Result ref = run_op(p, in, DType::F64, Device::cpu(), AttnImpl::Auto, false);
  const Result low = split ? naive(p, split_rounded(in), Rounding::Split) : naive(p, in, true);
  const Result x = run_op(p, in, dt, Device::cuda(0), AttnImpl::TensorCore, false);
  if (split) expect_results(x, low, ref, 3.0, kSplitAtol, kSplitAtolSums);
  else expect_results(x, low, ref, 3.0, 1e-3);
  expect_same_grads(x, run_op(p, in, dt, Device::cuda(0), AttnImpl::TensorCore, false));
}
class FusedCudaOnePass : public ::testing::TestWithParam<OnePassCase> {};
TEST_P(FusedCudaOnePass, MatchesCpuAndRepeatsBitForBit) {
  HZT_NEED_GPU();
  const Problem p = GetParam().p;
  const DType dt = GetParam().dt;
  if (!attn_tiles(AttnConfig{}, Device::cuda(0), dt, p.D).tensor_core)
    GTEST_SKIP() << "no " << dtype_name(dt) << " tensor-core kernels for head_dim " << p.D;
  const OnePassScope one;
  check_one_pass_case(p, dt);
}
std::vector<OnePassCase> one_pass_cases() {
  std::vector<OnePassCase> v;
  for (DType dt : {DType::BF16, DType::F32}) {
    std::vector<Problem> ps = combos(64, 100);
    for (const Problem& p : shapes(64)) ps.push_back(p);
    for (const Problem& p : shapes(128)) ps.push_back(p);
    for (const Problem& p : general_cases()) ps.push_back(p);  // the general variant
    for (const Problem& p : ps) v.push_back({p, dt});
  }
  return v;
}
INSTANTIATE_TEST_SUITE_P(Cases, FusedCudaOnePass, ::testing::ValuesIn(one_pass_cases()),
                         [](const ::testing::TestParamInfo<OnePassCase>& info) {
                           return std::string(info.param.dt == DType::F32 ? "split_" : "bf16_") + info.param.p.tag();
                         });
// The same bf16 cases with the one-pass backward on Hopper's wgmma (both variables set; skipped on
// other GPUs, FusedCuda.WgmmaKernelsRunOnHopper keeps them from skipping on an H100/H200).
class FusedCudaWgmmaOnePass : public ::testing::TestWithParam<Problem> {};
TEST_P(FusedCudaWgmmaOnePass, MatchesCpuAndRepeatsBitForBit) {
  HZT_NEED_GPU();
  const Problem p = GetParam();
  const OnePassScope one;
  const WgmmaScope wg;
  if (!attn_tiles(AttnConfig{}, Device::cuda(0), DType::BF16, p.D).tensor_core || !wgmma_takes(p))
    GTEST_SKIP() << "the wgmma kernels do not run here (a compute-capability 9.0 GPU)";
  check_one_pass_case(p, DType::BF16);
}
std::vector<Problem> wgmma_one_pass_cases() {
  std::vector<Problem> v;
  for (const OnePassCase& c : one_pass_cases())
    if (c.dt == DType::BF16) v.push_back(c.p);
  return v;
}
INSTANTIATE_TEST_SUITE_P(Cases, FusedCudaWgmmaOnePass, ::testing::ValuesIn(wgmma_one_pass_cases()),
                         [](const ::testing::TestParamInfo<Problem>& info) { return info.param.tag(); });

// x within 2^-7 of ref's largest entry, and ref not all zeros (two kernels that round their f32 sums
// to bf16 once each; a lost or doubled block would be off by the entries themselves).
void expect_near_largest(const char* name, const std::vector<double>& x, const std::vector<double>& ref) {
  ASSERT_EQ(x.size(), ref.size()) << name;
  double err = 0, mx = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    err = std::max(err, std::fabs(x[i] - ref[i]));
    mx = std::max(mx, std::fabs(ref[i]));
  }
  EXPECT_LE(err, mx / 128) << name;
  EXPECT_GT(mx, 0.0) << name;
}

// Long sequences, where hundreds of blocks wait on each other's turns at once (a turn out of order
// would hang here or change bits between runs): causal, a window with FoX and LogN, and packed
// documents, GQA, batch 2, T 2048 (32 key blocks per head), bf16 at D 64 and 128 and f32 at D 64.
// The one pass twice gives the same bits, and it agrees with the two-pass kernels to 2^-7 of each
// gradient's largest entry (both round their f32 sums to bf16 once; a lost or doubled key block's
// part would be of the order of the entries themselves).
TEST(FusedCuda, OnePassBackwardOnLongSequences) {
  HZT_NEED_GPU();
  for (auto [dt, D] : {std::pair{DType::BF16, int64_t{64}}, {DType::BF16, int64_t{128}}, {DType::F32, int64_t{64}}}) {
    if (!attn_tiles(AttnConfig{}, Device::cuda(0), dt, D).tensor_core) continue;
    for (int variant = 0; variant < 3; ++variant) {
      Problem p;
      p.B = 2, p.H = 8, p.Hkv = 2, p.D = D, p.Tq = p.Tk = 2048;
      if (variant == 1) p.mask = MaskKind::Window, p.fox = true, p.logit = LogitKind::LogN;
      if (variant == 2) p.docs = {{700, 1000, 348}, {2048}};
      SCOPED_TRACE(p.tag() + " " + dtype_name(dt));
      const Inputs in = make_inputs(p, dt, 61);
      const Result two = run_op(p, in, dt, Device::cuda(0), AttnImpl::TensorCore, false);
      const OnePassScope one;
      auto check = [&] {
        const Result a = run_op(p, in, dt, Device::cuda(0), AttnImpl::TensorCore, false);
        expect_same_grads(a, run_op(p, in, dt, Device::cuda(0), AttnImpl::TensorCore, false));
        for (auto [name, x, y] : {std::tuple{"dq", &a.dq, &two.dq}, {"dk", &a.dk, &two.dk}, {"dv", &a.dv, &two.dv},
                                  {"dlog f", &a.df, &two.df}, {"dc", &a.dc, &two.dc}})
          if (!y->empty()) expect_near_largest(name, *x, *y);
      };
      check();
      // the one pass on Hopper's wgmma (bf16, a compute-capability 9.0 GPU), against the same two-pass run
      const WgmmaScope wg;
      if (dt == DType::BF16 && wgmma_takes(p)) {
        SCOPED_TRACE("wgmma");
        check();
      }
    }
  }
}

// ---- the kernels on Hopper's wgmma (HZ_ATTN_MMA=wgmma: attention/cuda/attn_wgmma.cu) -------------

// On an H100/H200 the wgmma kernels must be there (a build for sm_90 has them): the cases below skip
// on other GPUs, and must not skip here.
TEST(FusedCuda, WgmmaKernelsRunOnHopper) {
  HZT_NEED_GPU();
  if (cuda::compute_capability(0) != 90) GTEST_SKIP() << "not a compute-capability 9.0 GPU: " << cuda::device_name(0);
  Problem p;
  p.Tq = p.Tk = 128;
  EXPECT_FALSE(wgmma_takes(p)) << "the default is mma.sync";
  EXPECT_EQ(tensor_core_options(Device::cuda(0), DType::BF16, 64), "");
  const WgmmaScope wg;
  EXPECT_TRUE(wgmma_takes(p));
  p.D = 128;
  EXPECT_TRUE(wgmma_takes(p));
  // the run log's line (attention/fused.h): bf16 only, with the one-pass backward beside it
  EXPECT_EQ(tensor_core_options(Device::cuda(0), DType::BF16, 128), "wgmma (HZ_ATTN_MMA)");
  // the overlapped forms' query blocks: two warpgroups of one 64-row m-tile (mma::Config's
  // kFwdWGOverlap, kFwdMTOverlap) at both head dims; without the overlap mma.sync's tiles
  EXPECT_EQ(attn_tiles(AttnConfig{}, Device::cuda(0), DType::BF16, 64).fwd_q, 128);
  EXPECT_EQ(attn_tiles(AttnConfig{}, Device::cuda(0), DType::BF16, 128).fwd_q, 128);
  {
    const WgmmaFormScope overlap(WgmmaForward::Overlap);
    EXPECT_TRUE(wgmma_takes(p));
    EXPECT_EQ(tensor_core_options(Device::cuda(0), DType::BF16, 128),
              "wgmma, forward overlapped without a producer (HZ_ATTN_MMA)");
    EXPECT_EQ(attn_tiles(AttnConfig{}, Device::cuda(0), DType::BF16, 128).fwd_q, 128);
  }
  {
    const WgmmaFormScope serial(WgmmaForward::Serial);
    EXPECT_TRUE(wgmma_takes(p));
    EXPECT_EQ(tensor_core_options(Device::cuda(0), DType::BF16, 128), "wgmma, forward without overlap (HZ_ATTN_MMA)");
    EXPECT_EQ(attn_tiles(AttnConfig{}, Device::cuda(0), DType::BF16, 64).fwd_q, 128);
    EXPECT_EQ(attn_tiles(AttnConfig{}, Device::cuda(0), DType::BF16, 128).fwd_q, 64);
  }
  const OnePassScope one;
  EXPECT_EQ(tensor_core_options(Device::cuda(0), DType::BF16, 64),
            "wgmma (HZ_ATTN_MMA), one-pass backward (HZ_ATTN_BACKWARD)");
  if (attn_tiles(AttnConfig{}, Device::cuda(0), DType::F32, 64).tensor_core) {  // the split kernels: no wgmma
    EXPECT_EQ(tensor_core_options(Device::cuda(0), DType::F32, 64), "one-pass backward (HZ_ATTN_BACKWARD)");
  }
  EXPECT_EQ(tensor_core_options(Device::cpu(), DType::BF16, 64), "");
}

// Every bf16 tensor-core case the wgmma kernels take (both variants), forward and backward at the
// floors, run twice: the same bits; and the forward's other forms (wgmma_overlap, wgmma_serial: the
// same operations on each row's accumulator in the same order), the same bits as each other and,
// where its steps are 64 keys too, as wgmma's.
class FusedCudaWgmma : public ::testing::TestWithParam<Problem> {};
TEST_P(FusedCudaWgmma, MatchesCpuAndRepeatsBitForBit) {
  HZT_NEED_GPU();
  const Problem p = GetParam();
  const WgmmaScope wg;
  if (!attn_tiles(AttnConfig{}, Device::cuda(0), DType::BF16, p.D).tensor_core || !wgmma_takes(p))
    GTEST_SKIP() << "the wgmma kernels do not run here (a compute-capability 9.0 GPU)";
  const Inputs in = bf16_inputs(p, 43);
  const Result ref = run_op(p, in, DType::F64, Device::cpu(), AttnImpl::Auto, false);
  const Result low = naive(p, in, true);
  const Result x = run_op(p, in, DType::BF16, Device::cuda(0), AttnImpl::TensorCore, false);
  expect_results(x, low, ref, 3.0, 1e-3);
  const Result y = run_op(p, in, DType::BF16, Device::cuda(0), AttnImpl::TensorCore, false);
  EXPECT_EQ(x.out, y.out);
  EXPECT_EQ(x.lse, y.lse);
  EXPECT_EQ(x.dq, y.dq);
  EXPECT_EQ(x.dk, y.dk);
  EXPECT_EQ(x.dv, y.dv);
  // the simpler forms step through 64 keys, as the warp-specialised one does at D 128 and in the
  // general variant; at D 64 its 128-key steps round apart (each row's maximum over 128 keys)
  const bool gen = p.chunk > 0 || p.sink_tokens > 0 || p.prefix > 0 || p.drawn || p.dist > 0;
  const Result* same = p.D == 128 || gen ? &x : nullptr;
  Result first;
  for (WgmmaForward f : {WgmmaForward::Overlap, WgmmaForward::Serial}) {
    const WgmmaFormScope form(f);
    SCOPED_TRACE(f == WgmmaForward::Overlap ? "wgmma_overlap" : "wgmma_serial");
    const Result z = run_op(p, in, DType::BF16, Device::cuda(0), AttnImpl::TensorCore, false);
    if (same == nullptr) {
      expect_results(z, low, ref, 3.0, 1e-3);
      first = z;
      same = &first;
      continue;
    }
    EXPECT_EQ(same->out, z.out);
    EXPECT_EQ(same->lse, z.lse);
    EXPECT_EQ(same->dq, z.dq);
  }
}
std::vector<Problem> wgmma_cases() {
  std::vector<Problem> v = combos(64, 100);
  for (const Problem& p : shapes(64)) v.push_back(p);
  for (const Problem& p : shapes(128)) v.push_back(p);
  for (const Problem& p : general_cases()) v.push_back(p);
  return v;
}
INSTANTIATE_TEST_SUITE_P(Cases, FusedCudaWgmma, ::testing::ValuesIn(wgmma_cases()),
                         [](const ::testing::TestParamInfo<Problem>& info) { return info.param.tag(); });

// Long sequences (T 2048, B 2, H 8, GQA; causal, a window, packed documents; D 64 and 128): the wgmma
// kernels agree with the mma.sync ones to 2^-7 of each output's and gradient's largest entry and 1e-3
// in lse (the two instructions may sum a product's terms in different orders; a wrong tile or row
// would be off by the entries themselves), and repeat their bits.
TEST(FusedCuda, WgmmaKernelsOnLongSequences) {
  HZT_NEED_GPU();
  for (int64_t D : {64, 128})
    for (int variant = 0; variant < 3; ++variant) {
      Problem p;
      p.B = 2, p.H = 8, p.Hkv = 2, p.D = D, p.Tq = p.Tk = 2048;
      if (variant == 1) p.mask = MaskKind::Window;
      if (variant == 2) p.docs = {{700, 1000, 348}, {2048}};
      SCOPED_TRACE(p.tag());
      const Inputs in = make_inputs(p, DType::BF16, 67);
      const Result mm = run_op(p, in, DType::BF16, Device::cuda(0), AttnImpl::TensorCore, false);
      const WgmmaScope wg;
      if (!wgmma_takes(p)) GTEST_SKIP() << "no wgmma kernels on this GPU";
      const Result a = run_op(p, in, DType::BF16, Device::cuda(0), AttnImpl::TensorCore, false);
      const Result b = run_op(p, in, DType::BF16, Device::cuda(0), AttnImpl::TensorCore, false);
      for (auto [name, x, y, z] : {std::tuple{"out", &a.out, &b.out, &mm.out}, {"dq", &a.dq, &b.dq, &mm.dq},
                                   {"dk", &a.dk, &b.dk, &mm.dk}, {"dv", &a.dv, &b.dv, &mm.dv}}) {
        EXPECT_EQ(*x, *y) << name;
        expect_near_largest(name, *x, *z);
      }
      EXPECT_EQ(a.lse, b.lse);
      double lerr = 0;
      for (size_t i = 0; i < mm.lse.size(); ++i)
        lerr = std::max(lerr, std::fabs(a.lse[i] - mm.lse[i]) / std::max(1.0, std::fabs(mm.lse[i])));
      EXPECT_LE(lerr, 1e-3);
    }
}

// The softmax's terms on the CUDA reference kernels against the CPU op in float64, forward and every
// gradient (the terms' own included): sinks (composed around the kernels), FoX's forget gates and
// GRAPE-A's rates (in them: key rates, query rates or both), with GQA, windows, SCOPE scopes, LogN,
// scale-invariant logits, a prefix and Tq != Tk (the tensor-core kernels' cases further below).
TEST(FusedCuda, SinksGatesAndGrapeRatesMatchTheCpuInFloat64) {
  HZT_NEED_GPU();
  struct C {
    std::vector<int64_t> window;
    LogitKind logit;
    int64_t Tq, Tk, prefix;
    bool sink, fox;
    int dist;  // GRAPE-A: 1 dist_k, 2 dist_q, 3 both
  };
  const std::vector<C> cases = {{{0, 0, 0, 0}, LogitKind::Identity, 37, 37, 0, true, false, 0},
                                {{0, 0, 0, 0}, LogitKind::Identity, 37, 37, 0, false, true, 0},
                                {{3, 7, 20, 0}, LogitKind::LogN, 37, 37, 0, true, true, 0},
                                {{9, 9, 9, 9}, LogitKind::ScaleInvariant, 13, 40, 0, true, true, 0},
                                {{0, 0, 0, 0}, LogitKind::Identity, 37, 37, 0, false, false, 1},
                                {{3, 7, 20, 0}, LogitKind::Identity, 37, 37, 0, false, true, 3},
                                {{9, 9, 9, 9}, LogitKind::Identity, 13, 40, 0, false, false, 2},
                                {{0, 0, 6, 6}, LogitKind::Identity, 40, 40, 11, false, false, 3}};
  const int64_t B = 2, H = 4, Hkv = 2, D = 16;
  for (const C& c : cases) {
    SCOPED_TRACE(std::string(c.sink ? "sink " : "") + (c.fox ? "fox " : "") + "dist " + std::to_string(c.dist) +
                 " prefix " + std::to_string(c.prefix) + " " + name(c.logit));
    AttnConfig cfg;
    cfg.window = c.window;
    cfg.logit = c.logit;
    cfg.prefix = c.prefix;
    cfg.block_q = cfg.block_k = 8;
    Generator g(61);
    const Tensor q = g.normal({B, H, c.Tq, D}, 0, 1, DType::F64), k = g.normal({B, Hkv, c.Tk, D}, 0, 1, DType::F64),
                 v = g.normal({B, Hkv, c.Tk, D}, 0, 1, DType::F64), gout = g.normal({B, H, c.Tq, D}, 0, 1, DType::F64),
                 z = g.normal({H}, 0, 1, DType::F64), f = g.uniform({B, H, c.Tk}, -1.0, 0.0, DType::F64),
                 lc = g.uniform({H}, 0.5, 1.5, DType::F64), rk = g.uniform({B, H, c.Tk}, -0.1, 0.5, DType::F64),
                 rq = g.uniform({B, H, c.Tq}, -0.1, 0.5, DType::F64);
    auto run = [&](Device dev) {
      std::vector<ag::Variable> x{ag::Variable(q.to(dev), true),  ag::Variable(k.to(dev), true),
                                  ag::Variable(v.to(dev), true),  ag::Variable(z.to(dev), true),
                                  ag::Variable(f.to(dev), true),  ag::Variable(rk.to(dev), true),
                                  ag::Variable(rq.to(dev), true)};
      const bool used[] = {true, true, true, c.sink, c.fox, (c.dist & 1) != 0, (c.dist & 2) != 0};
      AttnTerms t;
      t.logn_c = c.logit == LogitKind::LogN ? ag::Variable(lc.to(dev)) : ag::Variable();
      if (used[3]) t.sink = x[3];
      if (used[4]) t.forget = x[4];
      if (used[5]) t.dist_k = x[5];
      if (used[6]) t.dist_q = x[6];
      const ag::Variable o = fused_attention(x[0], x[1], x[2], cfg, t).out;
      o.backward(gout.to(dev));
      std::vector<std::vector<double>> r{o.value().to_vector()};
      for (size_t i = 0; i < x.size(); ++i)
        if (used[i]) r.push_back(x[i].grad().to_vector());
      return r;
    };
    const auto cpu = run(Device::cpu()), gpu = run(Device::cuda(0));
    ASSERT_EQ(cpu.size(), gpu.size());
    for (size_t i = 0; i < cpu.size(); ++i)
      for (size_t e = 0; e < cpu[i].size(); ++e) ASSERT_NEAR(gpu[i][e], cpu[i][e], 1e-11) << "tensor " << i << " elem " << e;
  }
}

// The second interval of a row (chunks, sink tokens, a prefix) and drawn token positions on the CUDA
// reference kernels against the CPU op in float64 (the tensor-core kernels' general variant below): forward and
// every gradient, with windows per head, GQA, Tq != Tk and terms that count keys or read distances.
TEST(FusedCuda, ChunksSinkTokensPrefixAndPositionsMatchTheCpuInFloat64) {
  HZT_NEED_GPU();
  struct C {
    std::string name;
    std::vector<int64_t> window;
    int64_t chunk, sink_tokens, prefix;
    bool alibi, positions;
    LogitKind logit;
    int64_t Tq, Tk;
  };
  const std::vector<C> cases = {{"chunk", {0, 0, 0, 0}, 16, 0, 0, false, false, LogitKind::Identity, 70, 70},
                                {"chunk+window+logn", {5, 9, 0, 33}, 12, 0, 0, true, false, LogitKind::LogN, 29, 70},
                                {"sink tokens+window", {8, 8, 16, 16}, 0, 4, 0, false, false, LogitKind::LogN, 70, 70},
                                {"sinks+chunk+si", {0, 20, 0, 7}, 16, 3, 0, true, false, LogitKind::ScaleInvariant, 70, 70},
                                {"prefix", {0, 0, 10, 10}, 0, 0, 21, true, false, LogitKind::ScaleInvariant, 70, 70},
                                {"positions", {0, 0, 12, 0}, 0, 0, 0, true, true, LogitKind::ScaleInvariant, 23, 70},
                                {"positions+qtemp", {0, 9, 0, 0}, 10, 2, 0, true, true, LogitKind::SwanRow, 70, 70}};
  const int64_t B = 2, H = 4, Hkv = 2, D = 16;
  for (const C& c : cases) {
    SCOPED_TRACE(c.name);
    AttnConfig cfg;
    cfg.window = c.window;
    cfg.chunk = c.chunk;
    cfg.sink_tokens = c.sink_tokens;
    cfg.prefix = c.prefix;
    cfg.logit = c.logit;
    cfg.tau = 4.0;
    cfg.swan_a = 7.0;
    cfg.qtemp_alpha = c.name == "positions+qtemp" ? 0.3 : 0.0;
    cfg.qtemp_beta = 6.0;
    if (c.alibi) cfg.alibi_slope = alibi_slopes(H);
    cfg.block_q = cfg.block_k = 8;
    Generator g(67);
    const Tensor q = g.normal({B, H, c.Tq, D}, 0, 1, DType::F64), k = g.normal({B, Hkv, c.Tk, D}, 0, 1, DType::F64),
                 v = g.normal({B, Hkv, c.Tk, D}, 0, 1, DType::F64), gout = g.normal({B, H, c.Tq, D}, 0, 1, DType::F64),
                 lc = g.uniform({H}, 0.5, 1.5, DType::F64);
    Tensor pos;
    if (c.positions) {  // increasing real positions with gaps in [0.5, 4), a draw per sequence
      std::vector<double> p = g.uniform({B, c.Tk}, 0.5, 4.0, DType::F64).to_vector();
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 1; j < c.Tk; ++j) p[b * c.Tk + j] += p[b * c.Tk + j - 1];
      pos = Tensor::from_vector(p, {B, c.Tk}, DType::F64);
    }
    auto run = [&](Device dev) {
      AttnConfig cd = cfg;
      if (pos.defined()) cd.positions = pos.to(dev);
      std::vector<ag::Variable> x{ag::Variable(q.to(dev), true), ag::Variable(k.to(dev), true),
                                  ag::Variable(v.to(dev), true), ag::Variable(lc.to(dev), true)};
      AttnTerms t;
      if (c.logit == LogitKind::LogN) t.logn_c = x[3];
      const ag::Variable o = fused_attention(x[0], x[1], x[2], cd, t).out;
      o.backward(gout.to(dev));
      std::vector<std::vector<double>> r{o.value().to_vector()};
      for (size_t i = 0; i < x.size(); ++i)
        if (i < 3 || c.logit == LogitKind::LogN) r.push_back(x[i].grad().to_vector());
      return r;
    };
    const auto cpu = run(Device::cpu()), gpu = run(Device::cuda(0));
    ASSERT_EQ(cpu.size(), gpu.size());
    for (size_t i = 0; i < cpu.size(); ++i)
      for (size_t e = 0; e < cpu[i].size(); ++e) ASSERT_NEAR(gpu[i][e], cpu[i][e], 1e-11) << "tensor " << i << " elem " << e;
  }
}

// The bf16 tensor-core kernels against the CPU op in float64 at the bf16 precision floor (the
// naive pipeline twin), every gradient the problem has.
void expect_tensor_core_at_the_floor(const Problem& x, uint64_t seed) {
  SCOPED_TRACE(x.tag());
  const Inputs in = bf16_inputs(x, seed);
  const Result ref = run_op(x, in, DType::F64, Device::cpu(), AttnImpl::Auto, false);
  const Result low = naive(x, in, true);
  const Result tc = run_op(x, in, DType::BF16, Device::cuda(0), AttnImpl::TensorCore, false);
  expect_results(tc, low, ref, 3.0, 1e-3);
}

// FoX on the bf16 tensor-core kernels against the CPU op in float64 at the bf16 precision floor
// (the naive pipeline twin), log f's gradient included (tests/attention/mma_emulator_test.cpp
// runs the same kernel code on the host).
TEST(FusedCuda, ForgetGatesOnTheTensorCoreKernels) {
  HZT_NEED_GPU();
  std::vector<Problem> ps;
  Problem p;
  p.fox = true, p.H = 4, p.Hkv = 2, p.Tq = p.Tk = 300;
  ps.push_back(p);
  p.mask = MaskKind::Scope, p.logit = LogitKind::LogN, p.pos = PosKind::Rope;
  ps.push_back(p);
  p.D = 128, p.mask = MaskKind::Window, p.logit = LogitKind::ScaleInvariant, p.pos = PosKind::Alibi, p.Tq = 77;
  ps.push_back(p);
  p = Problem{};  // with sinks (in the epilogue): the dQ pass's row sums of dS are not 0
  p.fox = p.sink = true, p.H = 4, p.Hkv = 2, p.Tq = p.Tk = 200;
  ps.push_back(p);
  for (const Problem& x : ps) expect_tensor_core_at_the_floor(x, 83);
}

// The tensor-core kernels' general variant (chunks, sink tokens, a prefix, token positions) against
// the CPU op in float64 at the bf16 precision floor, D 64 and 128 (tests/attention/mma_emulator_test.cpp
// runs the same kernel code on the host).
TEST(FusedCuda, ChunksSinkTokensPrefixAndPositionsOnTheTensorCoreKernels) {
  HZT_NEED_GPU();
  std::vector<Problem> ps;
  Problem p;
  p.H = 4, p.Hkv = 2, p.Tq = p.Tk = 300, p.chunk = 96, p.logit = LogitKind::LogN;
  ps.push_back(p);
  p = Problem{};
  p.H = 4, p.Hkv = 2, p.Tq = p.Tk = 400, p.mask = MaskKind::Window, p.sink_tokens = 4, p.pos = PosKind::Alibi;
  ps.push_back(p);
  p = Problem{};
  p.H = 2, p.Hkv = 1, p.Tq = p.Tk = 300, p.prefix = 100, p.logit = LogitKind::ScaleInvariant, p.fox = p.sink = true;
  ps.push_back(p);
  p = Problem{};
  p.H = 2, p.Hkv = 1, p.Tq = 77, p.Tk = 300, p.drawn = true, p.pos = PosKind::Alibi, p.sink_tokens = 2,
  p.mask = MaskKind::Scope, p.logit = LogitKind::ScaleInvariant;
  ps.push_back(p);
  for (const Problem& x : ps) {
    expect_tensor_core_at_the_floor(x, 89);
    Problem y = x;
    y.D = 128;
    expect_tensor_core_at_the_floor(y, 89);
  }
}

// GRAPE-A's rates on the tensor-core kernels (their general variant) against the CPU op in float64 at
// the bf16 precision floor, the rates' gradients included, D 64 and 128
// (MmaEmulator.GrapeRatesInTheGeneralVariantMatchTheCpuOp runs the same kernel code on the host).
TEST(FusedCuda, GrapeRatesOnTheTensorCoreKernels) {
  HZT_NEED_GPU();
  std::vector<Problem> ps;
  Problem p;
  p.H = 4, p.Hkv = 2, p.Tq = p.Tk = 300, p.dist = 1;
  ps.push_back(p);
  p = Problem{};
  p.H = 4, p.Hkv = 2, p.Tq = p.Tk = 300, p.dist = 3, p.mask = MaskKind::Window, p.pos = PosKind::Alibi,
  p.fox = p.sink = true;
  ps.push_back(p);
  p = Problem{};
  p.H = 2, p.Hkv = 1, p.Tq = 77, p.Tk = 300, p.dist = 2, p.drawn = true, p.logit = LogitKind::ScaleInvariant;
  ps.push_back(p);
  for (const Problem& x : ps) {
    expect_tensor_core_at_the_floor(x, 97);
    Problem y = x;
    y.D = 128;
    expect_tensor_core_at_the_floor(y, 97);
  }
}

// FoX gates that need no gradient (frozen gates, gradients of the inputs only): both kernel
// families get no dfox buffers and must neither write there nor change out, dq, dk or dv; gates on
// another device than the queries are refused by name.
TEST(FusedCuda, ForgetGatesThatNeedNoGradient) {
  HZT_NEED_GPU();
  const int64_t B = 2, H = 4, Hkv = 2, T = 150;
  for (int64_t D : {64, 128})
    for (AttnImpl impl : {AttnImpl::TensorCore, AttnImpl::Reference}) {
      SCOPED_TRACE("D " + std::to_string(D) + (impl == AttnImpl::TensorCore ? " tensor-core" : " reference"));
      AttnConfig cfg;
      cfg.window = {0, 16, 0, 40};
      cfg.impl = impl;
      Generator g(67);
      const Device dev = Device::cuda(0);
      const Tensor q = g.normal({B, H, T, D}, 0, 1, DType::BF16).to(dev), k = g.normal({B, Hkv, T, D}, 0, 1, DType::BF16).to(dev),
                   v = g.normal({B, Hkv, T, D}, 0, 1, DType::BF16).to(dev), gout = g.normal({B, H, T, D}, 0, 1, DType::BF16).to(dev),
                   f = g.uniform({B, H, T}, -1.0, 0.0, DType::F32).to(dev);
      auto run = [&](bool f_grad) {
        std::vector<ag::Variable> x{ag::Variable(q, true), ag::Variable(k, true), ag::Variable(v, true)};
        AttnTerms t;
        t.forget = ag::Variable(f, f_grad);
        const ag::Variable o = fused_attention(x[0], x[1], x[2], cfg, t).out;
        o.backward(gout);
        std::vector<std::vector<double>> r{o.value().to_vector()};
        for (const ag::Variable& xi : x) r.push_back(xi.grad().to_vector());
        EXPECT_EQ(t.forget.grad().defined(), f_grad);
        return r;
      };
      const auto with = run(true), without = run(false);
      ASSERT_EQ(with.size(), without.size());
      for (size_t i = 0; i < with.size(); ++i) EXPECT_EQ(with[i], without[i]) << "tensor " << i;
      AttnTerms elsewhere;
      elsewhere.forget = ag::Variable(f.to(Device::cpu()));
      EXPECT_THROW(fused_attention(ag::Variable(q), ag::Variable(k), ag::Variable(v), cfg, elsewhere), DeviceError);
    }
}

// Sinks in the tensor-core kernels' epilogue (rows without keys included) against the CPU op in
// float64 at the bf16 floor (MmaEmulator.SinksMatchTheCpuOp runs the same kernel code on the host).
TEST(FusedCuda, SinksOnTheTensorCoreKernels) {
  HZT_NEED_GPU();
  std::vector<Problem> ps;
  Problem p;
  p.sink = true, p.H = 4, p.Hkv = 2, p.Tq = p.Tk = 300, p.mask = MaskKind::Scope, p.logit = LogitKind::LogN;
  ps.push_back(p);
  p = Problem{};
  p.sink = true, p.H = 2, p.Hkv = 1, p.Tq = p.Tk = 300, p.key_end = 40, p.min_distance = 200, p.D = 128;
  ps.push_back(p);
  for (const Problem& x : ps) expect_tensor_core_at_the_floor(x, 89);
}

TEST(FusedCuda, ImplementationSwitch) {
  HZT_NEED_GPU();
  Problem p;
  p.D = 24;  // no tensor-core kernel for this head dim
  const Inputs in = make_inputs(p, DType::BF16, 59);
  EXPECT_THROW(run_op(p, in, DType::BF16, Device::cuda(0), AttnImpl::TensorCore), NotImplementedError);
  EXPECT_NO_THROW(run_op(p, in, DType::BF16, Device::cuda(0), AttnImpl::Auto));
  EXPECT_FALSE(attn_tiles(AttnConfig{}, Device::cuda(0), DType::F32, 24).tensor_core);  // reference
  EXPECT_FALSE(attn_tiles(AttnConfig{}, Device::cuda(0), DType::F64, 64).tensor_core);  // f64: reference
  // run.exact_f32_attention: f32 calls left to Auto run the reference kernels, bf16 ones and an
  // explicit TensorCore do not change
  const bool f32_tc = attn_tiles(AttnConfig{}, Device::cuda(0), DType::F32, 64).tensor_core,
             bf16_tc = attn_tiles(AttnConfig{}, Device::cuda(0), DType::BF16, 64).tensor_core;
  set_exact_f32_attention(true);
  EXPECT_FALSE(attn_tiles(AttnConfig{}, Device::cuda(0), DType::F32, 64).tensor_core);
  AttnConfig tc;
  tc.impl = AttnImpl::TensorCore;
  if (f32_tc) {
    EXPECT_TRUE(attn_tiles(tc, Device::cuda(0), DType::F32, 64).tensor_core);
  }
  EXPECT_EQ(attn_tiles(AttnConfig{}, Device::cuda(0), DType::BF16, 64).tensor_core, bf16_tc);
  set_exact_f32_attention(false);
  EXPECT_EQ(attn_tiles(AttnConfig{}, Device::cuda(0), DType::F32, 64).tensor_core, f32_tc);
  AttnConfig ref;
  ref.impl = AttnImpl::Reference;
  EXPECT_FALSE(attn_tiles(ref, Device::cuda(0), DType::BF16, 64).tensor_core);
}

// On the data-center GPUs (sm_80, sm_90, sm_100: 163-227 KB of shared memory per block) the
// tensor-core kernels must be what Auto picks for bf16 at D 64 and 128 and for f32 at D 64 (at D
// 128 on sm_90 and newer: the split dQ kernel takes 200 KB): if they were unavailable (a build
// without their code for this GPU, a failed attribute query) every "tc_" and split case would skip
// and the GPU check would pass without testing them.
TEST(FusedCuda, TensorCoreKernelsAreAvailableOnSm80AndNewer) {
  HZT_NEED_GPU();
  const int cc = cuda::compute_capability(0);
  if (cc < 80) GTEST_SKIP() << "sm_" << cc << ": the tensor-core kernels need sm_80 or newer";
  if (cc != 80 && cc < 90) GTEST_SKIP() << "sm_" << cc << ": at most 99 KB of shared memory per block";
  for (auto [dt, D] : {std::pair{DType::BF16, int64_t{64}}, {DType::BF16, int64_t{128}}, {DType::F32, int64_t{64}},
                       {DType::F32, int64_t{128}}}) {
    if (dt == DType::F32 && D == 128 && cc < 90) continue;
    EXPECT_TRUE(attn_tiles(AttnConfig{}, Device::cuda(0), dt, D).tensor_core)
        << "no tensor-core attention for " << dtype_name(dt) << ", head_dim " << D << " on " << cuda::device_name(0);
  }
}

TEST(FusedCuda, LampeMergesRegionsOnTheGpu) {
  HZT_NEED_GPU();
  Generator g(61);
  PositionSpec ps;
  ps.rope_base = 100;
  const RopeFreqs f = rope_frequencies(ps, 64, 90);
  LampeConfig lc;
  lc.L = 40;
  lc.a = 0;
  lc.b = 10;
  lc.s_local = 16;
  lc.s_sink = 4;
  const Tensor q = g.normal({1, 4, 90, 64}, 0, 1, DType::F64), k = g.normal({1, 2, 90, 64}, 0, 1, DType::F64),
               v = g.normal({1, 2, 90, 64}, 0, 1, DType::F64);
  const AttnOutput ref = lampe_attention(ag::Variable(q), ag::Variable(k), ag::Variable(v), f, lc);
  for (DType dt : {DType::F32, DType::BF16}) {
    const Device dev = Device::cuda(0);
    const AttnOutput x = lampe_attention(ag::Variable(q.to(dt).to(dev)), ag::Variable(k.to(dt).to(dev)),
                                         ag::Variable(v.to(dt).to(dev)), f, lc);
    EXPECT_TRUE(x.out.value().device().is_cuda());
    const AttnOutput low = lampe_attention(ag::Variable(q.to(dt)), ag::Variable(k.to(dt)), ag::Variable(v.to(dt)), f, lc);
    // f32 at head_dim 64 runs the split kernels where the GPU has them: their bound beside the floor
    const bool split = dt == DType::F32 && attn_tiles(AttnConfig{}, dev, DType::F32, 64).tensor_core;
    const std::vector<double> ro = ref.out.value().to_vector(), rl = ref.lse.to_vector();
    auto tol = [&](const std::vector<double>& r) {
      return dt == DType::BF16 ? 3e-2 : split ? kSplitAtol * max_abs(r) : 1e-5;
    };
    EXPECT_LE(max_err(x.out.value().to_vector(), ro), 4 * max_err(low.out.value().to_vector(), ro) + tol(ro));
    EXPECT_LE(max_err(x.lse.to_vector(), rl), 4 * max_err(low.lse.to_vector(), rl) + tol(rl));
  }
}

}  // namespace

// ---- the harness itself, on the host (no GPU needed) ---------------------------------------------
namespace {
TEST(FusedCudaHarness, NaiveTwinAndFloorsAreSound) {
  // the naive twin equals the CPU op; the bf16 floor is neither zero nor loose; the CPU op on bf16
  // inputs (which rounds only its outputs) passes the bf16 criterion the GPU cases use
  std::vector<Problem> ps = combos(64, 40);
  for (const Problem& p : shapes(64)) ps.push_back(p);
  for (size_t n = 0; n < ps.size(); n += 7) {
    const Problem& p = ps[n];
    SCOPED_TRACE(p.tag());
    const Inputs in = bf16_inputs(p, 47);
    const Result ref = run_op(p, in, DType::F64, Device::cpu(), AttnImpl::Auto, false);
    const Result low = naive(p, in, true);
    expect_same(naive(p, in, false), ref);
    const double f = max_err(low.out, ref.out) / max_abs(ref.out);
    EXPECT_GT(f, 1e-5);
    EXPECT_LT(f, 2e-2);
    const Result cpu_bf16 = run_op(p, in, DType::BF16, Device::cpu(), AttnImpl::Auto, false);
    expect_results(cpu_bf16, low, ref, 3.0, 1e-3);
  }
}
}  // namespace
