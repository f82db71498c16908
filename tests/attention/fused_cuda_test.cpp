// The fused attention op on CUDA against the CPU op: every mask x position encoding x logit
// transform, GQA, Tq != Tk, lengths that are no multiple of any tile, rows with no visible key,
// f32 / f64 (reference kernels) and bf16 (reference and tensor-core kernels), forward, lse and
// every gradient (q, k, v and LogN's c); block counters, determinism and LaMPE on CUDA.
//
// Tolerances come from the precision floor (STYLE.md item 7): with ref the CPU op in f64,
//   max |x - ref| <= k * max |x_lowprec - ref| + atol,
// where x_lowprec is the same computation at the kernel's precision: the CPU op in f32 for the
// f32 kernels, and for bf16 a naive double-precision attention written here from SPEC.md (its own
// mask, independent of tiling.h) that rounds where a bf16 tensor-core pipeline rounds (the
// probabilities and dS before their products, every output).
// The cases skip themselves without a usable GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "attention/fused.h"
#include "attention/lampe.h"
#include "attention/rope.h"
#include "autograd/functions.h"
#include "core/bf16.h"
#include "core/cuda/runtime.h"
#include "core/rng.h"

using namespace hz;
using namespace hz::attn;

namespace {

#define HZT_NEED_GPU()                                                                                   \
  if (!cuda::available())                                                                                \
  GTEST_SKIP() << "no usable CUDA device (" << (cuda::compiled() ? "no GPU/driver visible" : "HZ_CUDA=OFF build") \
               << "); scripts/gpu_check.sh runs these on a GPU machine"

double round_bf16(double x) { return bf16_bits_to_f32(f64_to_bf16_bits(x)); }
std::vector<double> round_all(std::vector<double> v, DType dt) {
  if (dt == DType::F64) return v;
  return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, dt).to_vector();
}

// ---- the problem -----------------------------------------------------------------------------
struct Problem {
  int64_t B = 1, H = 4, Hkv = 2, Tq = 100, Tk = 100, D = 64;
  MaskKind mask = MaskKind::Causal;
  PosKind pos = PosKind::None;
  LogitKind logit = LogitKind::Identity;
  int64_t key_end = -1, min_distance = 0, q_offset = -1;
  std::string tag() const {
    std::string s = std::string(name(mask)) + "_" + name(pos) + "_" + name(logit) + "_B" + std::to_string(B) + "H" +
                    std::to_string(H) + "kv" + std::to_string(Hkv) + "_Tq" + std::to_string(Tq) + "Tk" +
                    std::to_string(Tk) + "_D" + std::to_string(D);
    if (key_end >= 0) s += "_kend" + std::to_string(key_end);
    if (min_distance > 0) s += "_md" + std::to_string(min_distance);
    return s;
  }
};

AttentionSpec spec_of(const Problem& p) {
  AttentionSpec s;
  s.pos.kind = p.pos;
  s.pos.rope_base = 500.0;
  s.pos.prope_base_eff = 50.0;
  s.mask.kind = p.mask;
  s.mask.window = 24;
  s.logit.kind = p.logit;
  s.logit.tau = 3.0;
  s.logit.swan_a = 5.0;
  s.logit.beta = 1.3;
  return s;
}
AttnConfig config_of(const Problem& p) {
  AttnConfig cfg = make_attn_config(spec_of(p), p.H, p.Tk);
  cfg.key_end = p.key_end;
  cfg.min_distance = p.min_distance;
  cfg.q_offset = p.q_offset;
  cfg.block_q = 16;  // reference kernels and CPU: small tiles, many boundary blocks
  cfg.block_k = 8;
  return cfg;
}

// Input values (f64, already rounded to dt): q, k, v, gout, c.
struct Inputs {
  std::vector<double> q, k, v, g, c;
};
Inputs make_inputs(const Problem& p, DType dt, uint64_t seed) {
  Generator gen(seed);
  Inputs in;
  in.q = round_all(gen.normal({p.B * p.H * p.Tq * p.D}, 0, 1, DType::F64).to_vector(), dt);
  in.k = round_all(gen.normal({p.B * p.Hkv * p.Tk * p.D}, 0, 1, DType::F64).to_vector(), dt);
  in.v = round_all(gen.normal({p.B * p.Hkv * p.Tk * p.D}, 0, 1, DType::F64).to_vector(), dt);
  in.g = round_all(gen.normal({p.B * p.H * p.Tq * p.D}, 0, 1, DType::F64).to_vector(), dt);
  in.c = gen.uniform({p.H}, 0.5, 1.5, DType::F64).to_vector();  // LogN's c stays f32/f64 (a parameter)
  return in;
}

struct Result {
  std::vector<double> out, lse, dq, dk, dv, dc;
};

// The op on a device and dtype: rotary encoding (when the problem has one) and fused attention,
// forward and backward with upstream gradient g; gradients w.r.t. the un-rotated q, k.
Result run_op(const Problem& p, const Inputs& in, DType dt, Device dev, AttnImpl impl = AttnImpl::Auto,
              bool rotate = true) {
  const AttnConfig base = config_of(p);
  AttnConfig cfg = base;
  cfg.impl = impl;
  const DType cdt = dt == DType::F64 ? DType::F64 : DType::F32;
  ag::Variable q(Tensor::from_vector(in.q, {p.B, p.H, p.Tq, p.D}, dt).to(dev), true);
  ag::Variable k(Tensor::from_vector(in.k, {p.B, p.Hkv, p.Tk, p.D}, dt).to(dev), true);
  ag::Variable v(Tensor::from_vector(in.v, {p.B, p.Hkv, p.Tk, p.D}, dt).to(dev), true);
  ag::Variable c(Tensor::from_vector(in.c, {p.H}, cdt).to(dev), true);
  ag::Variable qr = q, kr = k;
  if (rotate && (p.pos == PosKind::Rope || p.pos == PosKind::PRope)) {
    const RopeFreqs f = rope_frequencies(spec_of(p).pos, p.D, p.Tk);
    const int64_t off = cfg.q_offset < 0 ? p.Tk - p.Tq : cfg.q_offset;
    qr = apply_rope(q, Tensor::arange(off, off + p.Tq), f);
    kr = apply_rope(k, Tensor::arange(0, p.Tk), f);
  }
  const AttnOutput o = fused_attention(qr, kr, v, cfg, p.logit == LogitKind::LogN ? c : ag::Variable());
  o.out.backward(Tensor::from_vector(in.g, {p.B, p.H, p.Tq, p.D}, dt).to(dev));
  Result r;
  r.out = o.out.value().to_vector();
  r.lse = o.lse.to_vector();
  r.dq = q.grad().to_vector();
  r.dk = k.grad().to_vector();
  r.dv = v.grad().to_vector();
  if (p.logit == LogitKind::LogN) r.dc = c.grad().to_vector();
  return r;
}

// The rotated q and k in f64 (inputs of the bf16 cases, which rotate on the host).
Inputs rotated(const Problem& p, Inputs in) {
  if (p.pos != PosKind::Rope && p.pos != PosKind::PRope) return in;
  const RopeFreqs f = rope_frequencies(spec_of(p).pos, p.D, p.Tk);
  const int64_t off = p.q_offset < 0 ? p.Tk - p.Tq : p.q_offset;
  in.q = rope_rotate(Tensor::from_vector(in.q, {p.B, p.H, p.Tq, p.D}, DType::F64), Tensor::arange(off, off + p.Tq), f,
                     false)
             .to_vector();
  in.k = rope_rotate(Tensor::from_vector(in.k, {p.B, p.Hkv, p.Tk, p.D}, DType::F64), Tensor::arange(0, p.Tk), f, false)
             .to_vector();
  return in;
}

// ---- naive attention from SPEC.md, optionally rounding like a bf16 tensor-core pipeline --------
Result naive(const Problem& p, const Inputs& in, bool bf16_pipeline) {
  const AttnConfig cfg = config_of(p);
  const int64_t G = p.H / p.Hkv, off = p.q_offset < 0 ? p.Tk - p.Tq : p.q_offset;
  const int64_t kend = p.key_end < 0 ? p.Tk : std::min(p.key_end, p.Tk);
  const double scale = 1.0 / std::sqrt(static_cast<double>(p.D));
  auto rnd = [&](double x) { return bf16_pipeline ? round_bf16(x) : x; };
  Result r;
  r.out.assign(p.B * p.H * p.Tq * p.D, 0.0);
  r.lse.assign(p.B * p.H * p.Tq, 0.0);
  r.dq.assign(r.out.size(), 0.0);
  r.dk.assign(p.B * p.Hkv * p.Tk * p.D, 0.0);
  r.dv.assign(r.dk.size(), 0.0);
  r.dc.assign(p.H, 0.0);
  std::vector<double> L(p.Tk), P(p.Tk), a(p.Tk), S(p.Tk);
  std::vector<char> vis(p.Tk);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h) {
      const int64_t hk = h / G, w = cfg.window[h];
      const double slope = cfg.alibi_slope.empty() ? 0.0 : cfg.alibi_slope[h];
      for (int64_t i = 0; i < p.Tq; ++i) {
        const int64_t pos = off + i, row = (b * p.H + h) * p.Tq + i;
        const double* qi = &in.q[row * p.D];
        const double* gi = &in.g[row * p.D];
        int64_t n = 0;
        for (int64_t j = 0; j < p.Tk; ++j) {
          const int64_t t = pos - j;
          vis[j] = j >= std::max<int64_t>(0, cfg.key_begin) && j < kend && t >= p.min_distance && (w == 0 || t < w);
          n += vis[j];
        }
        double rf = 1.0, lnn = n > 0 ? std::log(static_cast<double>(n)) : 0.0;
        if (p.logit == LogitKind::LogN) rf = in.c[h] * lnn;
        if (p.logit == LogitKind::SwanRow) rf = std::log(cfg.swan_a + pos) / std::log(cfg.swan_a);
        if (p.logit == LogitKind::Temperature) rf = cfg.beta;
        double mx = -INFINITY;
        for (int64_t j = 0; j < p.Tk; ++j) {
          if (!vis[j]) continue;
          const double* kj = &in.k[((b * p.Hkv + hk) * p.Tk + j) * p.D];
          double s = 0;
          for (int64_t d = 0; d < p.D; ++d) s += qi[d] * kj[d];
          S[j] = s * scale;
          const double t = static_cast<double>(pos - j);
          a[j] = 1.0;
          double m = 0.0;
          if (p.logit == LogitKind::ScaleInvariant) {
            a[j] = std::sqrt(2.0 * std::log(t / cfg.tau + 1.0) + 1.0);
            m = -2.0 * std::log(t / cfg.tau + 1.0);
          }
          L[j] = rf * a[j] * S[j] + m - slope * t;
          mx = std::max(mx, L[j]);
        }
        if (n == 0) {
          r.lse[row] = -INFINITY;
          continue;  // out and dq rows stay 0
        }
        double l = 0;
        for (int64_t j = 0; j < p.Tk; ++j) l += vis[j] ? std::exp(L[j] - mx) : 0.0;
        r.lse[row] = mx + std::log(l);
        std::vector<double> o(p.D, 0.0);
        for (int64_t j = 0; j < p.Tk; ++j) {
          P[j] = vis[j] ? std::exp(L[j] - r.lse[row]) : 0.0;
          if (!vis[j]) continue;
          const double pj = rnd(std::exp(L[j] - mx)) / l;  // the pipeline rounds the unnormalised weights
          const double* vj = &in.v[((b * p.Hkv + hk) * p.Tk + j) * p.D];
          for (int64_t d = 0; d < p.D; ++d) o[d] += pj * vj[d];
        }
        double Di = 0;
        for (int64_t d = 0; d < p.D; ++d) {
          r.out[row * p.D + d] = rnd(o[d]);
          Di += gi[d] * r.out[row * p.D + d];
        }
        for (int64_t j = 0; j < p.Tk; ++j) {
          if (!vis[j]) continue;
          const int64_t krow = (b * p.Hkv + hk) * p.Tk + j;
          const double* kj = &in.k[krow * p.D];
          const double* vj = &in.v[krow * p.D];
          double dp = 0;
          for (int64_t d = 0; d < p.D; ++d) dp += gi[d] * vj[d];
          const double ds = P[j] * (dp - Di);
          r.dc[h] += ds * lnn * a[j] * S[j];
          const double gq = rnd(ds * rf * a[j] * scale), pj = rnd(P[j]);
          for (int64_t d = 0; d < p.D; ++d) {
            r.dq[row * p.D + d] += gq * kj[d];
            r.dk[krow * p.D + d] += gq * qi[d];
            r.dv[krow * p.D + d] += pj * gi[d];
          }
        }
      }
    }
  if (bf16_pipeline)
    for (auto* v : {&r.dq, &r.dk, &r.dv})
      for (double& x : *v) x = round_bf16(x);
  if (p.logit != LogitKind::LogN) r.dc.clear();
  return r;
}

// ---- comparison -----------------------------------------------------------------------------------
double max_err(const std::vector<double>& x, const std::vector<double>& ref) {
  double e = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isinf(ref[i]) || std::isinf(x[i])) {
      if (x[i] != ref[i]) return INFINITY;
      continue;
    }
    const double d = std::fabs(x[i] - ref[i]);
    if (!(d <= e)) e = d;  // NaN makes e NaN and fails below
  }
  return e;
}
double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v)
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  return m;
}
// max |x - ref| <= k * max |low - ref| + atol_rel * max |ref|
void expect_within_floor(const char* what, const std::vector<double>& x, const std::vector<double>& low,
                         const std::vector<double>& ref, double k, double atol_rel) {
  ASSERT_EQ(x.size(), ref.size()) << what;
  ASSERT_EQ(low.size(), ref.size()) << what;
  const double err = max_err(x, ref), floor = max_err(low, ref), lim = k * floor + atol_rel * max_abs(ref);
  EXPECT_LE(err, lim) << what << ": max error " << err << ", precision floor " << floor << " (limit " << lim << ")";
}

void expect_results(const Result& x, const Result& low, const Result& ref, double k, double atol_rel) {
  expect_within_floor("out", x.out, low.out, ref.out, k, atol_rel);
  expect_within_floor("lse", x.lse, low.lse, ref.lse, k, atol_rel);
  expect_within_floor("dq", x.dq, low.dq, ref.dq, k, atol_rel);
  expect_within_floor("dk", x.dk, low.dk, ref.dk, k, atol_rel);
  expect_within_floor("dv", x.dv, low.dv, ref.dv, k, atol_rel);
  if (!ref.dc.empty()) expect_within_floor("dc", x.dc, low.dc, ref.dc, k, atol_rel);
}

std::vector<Problem> combos(int64_t D, int64_t T) {
  std::vector<Problem> v;
  for (MaskKind m : {MaskKind::Causal, MaskKind::Window, MaskKind::Scope})
    for (PosKind p : {PosKind::None, PosKind::Rope, PosKind::PRope, PosKind::Alibi})
      for (LogitKind l : {LogitKind::Identity, LogitKind::ScaleInvariant, LogitKind::LogN, LogitKind::SwanRow,
                          LogitKind::Temperature}) {
        Problem pr;
        pr.mask = m;
        pr.pos = p;
        pr.logit = l;
        pr.D = D;
        pr.Tq = pr.Tk = T;
        v.push_back(pr);
      }
  return v;
}
// Shapes beyond the combos: GQA 4:1, batch 2, Tq != Tk (queries last; and an explicit offset),
// rows with no visible key (keys cut at key_end, a minimum distance), D 128 and small D.
std::vector<Problem> shapes(int64_t D) {
  std::vector<Problem> v;
  Problem p;
  p.D = D;
  p.B = 2, p.H = 8, p.Hkv = 2, p.Tq = p.Tk = 77, p.mask = MaskKind::Scope, p.logit = LogitKind::LogN;
  v.push_back(p);
  p = Problem{};
  p.D = D;
  p.Tq = 33, p.Tk = 130, p.mask = MaskKind::Window, p.pos = PosKind::Alibi, p.logit = LogitKind::ScaleInvariant;
  v.push_back(p);
  p = Problem{};
  p.D = D;
  p.Tq = 1, p.Tk = 200, p.mask = MaskKind::Scope, p.logit = LogitKind::SwanRow;  // decoding one token
  v.push_back(p);
  p = Problem{};
  p.D = D;
  p.Tq = 90, p.Tk = 70, p.q_offset = 10, p.mask = MaskKind::Causal, p.logit = LogitKind::Temperature;
  v.push_back(p);
  p = Problem{};
  p.D = D;
  p.Tq = p.Tk = 150, p.key_end = 40, p.min_distance = 50, p.mask = MaskKind::Causal;  // rows 0..49 see nothing
  v.push_back(p);
  p = Problem{};
  p.D = D;
  p.H = p.Hkv = 2, p.Tq = p.Tk = 257, p.mask = MaskKind::Window, p.logit = LogitKind::LogN;
  v.push_back(p);
  return v;
}

struct CaseName {
  std::string operator()(const ::testing::TestParamInfo<Problem>& info) const { return info.param.tag(); }
};

// ---- f32 (reference kernels) and f64 --------------------------------------------------------------
class FusedCudaF32 : public ::testing::TestWithParam<Problem> {};
TEST_P(FusedCudaF32, MatchesCpuWithinTheF32Floor) {
  HZT_NEED_GPU();
  const Problem p = GetParam();
  const Inputs in = make_inputs(p, DType::F32, 41);
  const Result ref = run_op(p, in, DType::F64, Device::cpu());
  const Result low = run_op(p, in, DType::F32, Device::cpu());
  const Result x = run_op(p, in, DType::F32, Device::cuda(0));
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

TEST(FusedCudaF64, MatchesCpuToRounding) {
  HZT_NEED_GPU();
  for (Problem p : shapes(24)) {
    const Inputs in = make_inputs(p, DType::F64, 43);
    const Result ref = run_op(p, in, DType::F64, Device::cpu());
    const Result x = run_op(p, in, DType::F64, Device::cuda(0));
    SCOPED_TRACE(p.tag());
    for (auto [a, b] : {std::pair{&x.out, &ref.out}, {&x.dq, &ref.dq}, {&x.dk, &ref.dk}, {&x.dv, &ref.dv}, {&x.dc, &ref.dc}})
      EXPECT_LE(max_err(*a, *b), 1e-11 * std::max(1.0, max_abs(*b)));
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
  // q, k rotated on the host in f64 and rounded to bf16: the kernels' exact inputs
  Inputs in = make_inputs(p, DType::BF16, 47);
  in = rotated(p, in);
  in.q = round_all(in.q, DType::BF16);
  in.k = round_all(in.k, DType::BF16);
  const Result ref = run_op(p, in, DType::F64, Device::cpu(), AttnImpl::Auto, false);
  const Result exact = naive(p, in, false), low = naive(p, in, true);
  // the naive twin is itself right (else its floor would mean nothing)
  ASSERT_LE(max_err(exact.out, ref.out), 1e-10 * std::max(1.0, max_abs(ref.out)));
  ASSERT_LE(max_err(exact.dq, ref.dq), 1e-10 * std::max(1.0, max_abs(ref.dq)));
  ASSERT_LE(max_err(exact.dk, ref.dk), 1e-10 * std::max(1.0, max_abs(ref.dk)));
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

// ---- counters, determinism, the implementation switch, LaMPE ----------------------------------------
TEST(FusedCuda, VisitedBlocksEqualTheCpuOpsAtTheSameTiles) {
  HZT_NEED_GPU();
  for (AttnImpl impl : {AttnImpl::Reference, AttnImpl::TensorCore}) {
    for (Problem p : shapes(64)) {
      AttnConfig cfg = config_of(p);
      cfg.impl = impl;
      const AttnTiles tiles = attn_tiles(cfg, Device::cuda(0), DType::BF16, p.D);
      if (impl == AttnImpl::TensorCore && !tiles.tensor_core) continue;
      SCOPED_TRACE(p.tag() + (impl == AttnImpl::TensorCore ? " tensor-core" : " reference"));
      Generator g(5);
      auto run = [&](Device dev, int64_t bq, int64_t bk, bool backward) {
        AttnConfig c = cfg;
        c.block_q = bq;
        c.block_k = bk;
        ag::Variable q(g.normal({p.B, p.H, p.Tq, p.D}, 0, 1, DType::BF16, dev), true),
            k(g.normal({p.B, p.Hkv, p.Tk, p.D}, 0, 1, DType::BF16, dev), true),
            v(g.normal({p.B, p.Hkv, p.Tk, p.D}, 0, 1, DType::BF16, dev), true);
        ag::Variable lc(Tensor::ones({p.H}, DType::F32, dev));
        reset_attn_stats();
        const AttnOutput o = fused_attention(q, k, v, c, p.logit == LogitKind::LogN ? lc : ag::Variable());
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
  for (AttnImpl impl : {AttnImpl::Reference, AttnImpl::TensorCore}) {
    Problem p = shapes(64)[0];  // GQA 4:1, SCOPE, LogN, batch 2
    if (impl == AttnImpl::TensorCore && !attn_tiles(AttnConfig{}, Device::cuda(0), DType::BF16, p.D).tensor_core)
      continue;
    const Inputs in = make_inputs(p, DType::BF16, 53);
    const Result a = run_op(p, in, DType::BF16, Device::cuda(0), impl);
    const Result b = run_op(p, in, DType::BF16, Device::cuda(0), impl);
    EXPECT_EQ(a.out, b.out);
    EXPECT_EQ(a.dq, b.dq);
    EXPECT_EQ(a.dk, b.dk);
    EXPECT_EQ(a.dv, b.dv);
    EXPECT_EQ(a.dc, b.dc);
  }
}

TEST(FusedCuda, ImplementationSwitch) {
  HZT_NEED_GPU();
  Problem p;
  p.D = 24;  // no tensor-core kernel for this head dim
  const Inputs in = make_inputs(p, DType::BF16, 59);
  EXPECT_THROW(run_op(p, in, DType::BF16, Device::cuda(0), AttnImpl::TensorCore), NotImplementedError);
  EXPECT_NO_THROW(run_op(p, in, DType::BF16, Device::cuda(0), AttnImpl::Auto));
  EXPECT_FALSE(attn_tiles(AttnConfig{}, Device::cuda(0), DType::F32, 64).tensor_core);  // f32: reference
  AttnConfig ref;
  ref.impl = AttnImpl::Reference;
  EXPECT_FALSE(attn_tiles(ref, Device::cuda(0), DType::BF16, 64).tensor_core);
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
    const double tol = dt == DType::F32 ? 1e-5 : 3e-2;
    EXPECT_LE(max_err(x.out.value().to_vector(), ref.out.value().to_vector()),
              4 * max_err(low.out.value().to_vector(), ref.out.value().to_vector()) + tol);
    EXPECT_LE(max_err(x.lse.to_vector(), ref.lse.to_vector()), 4 * max_err(low.lse.to_vector(), ref.lse.to_vector()) + tol);
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
    Inputs in = make_inputs(p, DType::BF16, 47);
    in = rotated(p, in);
    in.q = round_all(in.q, DType::BF16);
    in.k = round_all(in.k, DType::BF16);
    const Result ref = run_op(p, in, DType::F64, Device::cpu(), AttnImpl::Auto, false);
    const Result exact = naive(p, in, false), low = naive(p, in, true);
    EXPECT_LE(max_err(exact.out, ref.out), 1e-10 * std::max(1.0, max_abs(ref.out)));
    EXPECT_LE(max_err(exact.lse, ref.lse), 1e-10 * std::max(1.0, max_abs(ref.lse)));
    EXPECT_LE(max_err(exact.dq, ref.dq), 1e-10 * std::max(1.0, max_abs(ref.dq)));
    EXPECT_LE(max_err(exact.dk, ref.dk), 1e-10 * std::max(1.0, max_abs(ref.dk)));
    EXPECT_LE(max_err(exact.dv, ref.dv), 1e-10 * std::max(1.0, max_abs(ref.dv)));
    if (!ref.dc.empty()) EXPECT_LE(max_err(exact.dc, ref.dc), 1e-10 * std::max(1.0, max_abs(ref.dc)));
    const double f = max_err(low.out, ref.out) / max_abs(ref.out);
    EXPECT_GT(f, 1e-5);
    EXPECT_LT(f, 2e-2);
    const Result cpu_bf16 = run_op(p, in, DType::BF16, Device::cpu(), AttnImpl::Auto, false);
    expect_results(cpu_bf16, low, ref, 3.0, 1e-3);
  }
}
}  // namespace
