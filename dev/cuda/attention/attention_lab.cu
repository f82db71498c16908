// Horizon kernel lab: the fused attention's CUDA kernels, in the llm.c dev/cuda habit. Built only
// on demand (cmake -DHZ_KERNEL_LAB=ON; scripts/gpu/gpu_check.sh lab); CI compiles it (scripts/test.sh).
//
//   build-gpu/attention_lab [VARIANT ...] [--D 64] [--T 1024,4096,16384] [--mask causal] [--logit identity]
//                           [--reps 20] [--no-validate]
//
// Variants (NOTES.md has the reasoning, predictions and measured results):
//   0  reference kernels (attn_reference.cu): one warp per query / key row, fp32 accumulation;
//   1  tensor-core kernels as promoted into the library (attn_mma.cu with mma::Config<D>);
//   2  forward with the other m-tile count per warp (D 64: 16 rows/warp; D 128: 32 rows/warp);
//   3  dK/dV with 32-row query steps (fewer registers, more steps);
//   4  the one-pass backward (variant 1 with HZ_ATTN_BACKWARD=one_pass: dK, dV and dQ from one kernel,
//      dQ added in each query block's turn; 5 products per pair instead of 7);
//   5  the same with FlashAttention-2's atomic dQ (not deterministic): what variant 4's order costs;
//   6  the kernels on Hopper's wgmma (variant 1 with HZ_ATTN_MMA=wgmma, attn_wgmma.cu: the forward
//      as FlashAttention-3 has it, a producer warpgroup's bulk tensor copies into mbarrier stages and
//      two consumer warpgroups taking turns, each overlapping its softmax with its P V; two-pass
//      backward; an H100/H200 only: elsewhere it fails as "not run");
//   7  variant 6 with the one-pass backward (both variables: dQ's part as a wgmma from dS'^T in
//      shared memory; FlashAttention-3's scheme of products, without its warp specialisation);
//   8  variant 6 with the forward's products and softmax one after the other (HZ_ATTN_MMA=
//      wgmma_serial; one warpgroup per CTA, variant 1's query blocks): what the overlap gains;
//   9  variant 6 with the forward overlapped but without the producer (HZ_ATTN_MMA=wgmma_overlap:
//      the two warpgroups load with cp.async and meet at block barriers): what the producer and the
//      turns gain.
// On an H100/H200 the lab first checks that the bulk tensor copy lays tiles out as cp.async does
// (variant 6 loads with it; tma_check below). Each variant is first validated against variant 0 on
// ragged problems for every mask x logit
// transform (max |x - ref| / max |ref| within the bf16 floor, every output and gradient; see
// validate()), then
// timed with CUDA events (median of --reps after warm-up; fresh inputs per length) and reported in
// TFLOP/s on visible pairs (4 D per pair forward, 10 D backward) next to the roofline floors.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "attention/accounting.h"
#include "attention/cuda/attn_cuda.h"
#include "attention/cuda/mma_device.cuh"
#include "attention/fused.h"
#include "core/cuda/common.cuh"
#include "core/ops.h"
#include "core/rng.h"

using namespace hz;
using namespace hz::attn;
namespace ci = hz::attn::cuda_impl;

namespace {

// ---- problems --------------------------------------------------------------------------------------
struct Problem {
  int64_t B, H, T, D;
  std::string mask, logit;
};
AttnKernelParams params_of(const Problem& p) {
  AttnConfig cfg;
  if (p.mask == "causal") cfg.window.assign(p.H, 0);
  else if (p.mask == "swa") cfg.window.assign(p.H, std::min<int64_t>(512, p.T));
  else if (p.mask == "scope") cfg.window = scope_windows(p.H, p.T);
  else throw ValueError("mask: causal, swa or scope");
  cfg.logit = parse_logit(p.logit);
  cfg.tau = 10.0;
  return make_kernel_params(cfg, p.B, p.H, p.H, p.T, p.T, p.D);
}

struct Buffers {
  Tensor q, k, v, out, lse, gout, dq, dk, dv, c, dc_rows;
};
Buffers make_buffers(const Problem& p, uint64_t seed) {
  const Device dev = Device::cuda(0);
  Generator g(seed);
  Buffers b;
  b.q = g.normal({p.B, p.H, p.T, p.D}, 0, 1, DType::BF16, dev);
  b.k = g.normal({p.B, p.H, p.T, p.D}, 0, 1, DType::BF16, dev);
  b.v = g.normal({p.B, p.H, p.T, p.D}, 0, 1, DType::BF16, dev);
  b.gout = g.normal({p.B, p.H, p.T, p.D}, 0, 1, DType::BF16, dev);
  b.out = Tensor::full({p.B, p.H, p.T, p.D}, NAN, DType::BF16, dev);  // poisoned: every element must be written
  b.lse = Tensor::full({p.B, p.H, p.T}, NAN, DType::F32, dev);
  b.dq = Tensor::full(b.q.shape(), NAN, DType::BF16, dev);
  b.dk = Tensor::full(b.q.shape(), NAN, DType::BF16, dev);
  b.dv = Tensor::full(b.q.shape(), NAN, DType::BF16, dev);
  b.c = g.uniform({p.H}, 0.5, 1.5, DType::F32, dev);
  b.dc_rows = Tensor::full({p.B, p.H, p.T}, NAN, DType::F32, dev);  // LogN: dc per row (the caller sums the rows)
  return b;
}

// ---- variants ------------------------------------------------------------------------------------
using mma::Args;
using mma::kThreads;

template <class K>
void launch(K kernel, int64_t grid, int smem, const AttnKernelParams& P, const Args& a) {
  HZ_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<static_cast<unsigned>(grid), kThreads, smem, hz::cuda::stream(0)>>>(P, a);
  HZ_CUDA_LAUNCHED("lab kernel");
}

Args args_of(Buffers& b, const AttnKernelParams& P, Tensor& Dvec, ci::Counter* counters) {
  Args a;
  a.q = static_cast<const uint16_t*>(b.q.raw_data());
  a.k = static_cast<const uint16_t*>(b.k.raw_data());
  a.v = static_cast<const uint16_t*>(b.v.raw_data());
  a.c = P.logit == LogitKind::LogN ? b.c.data<float>() : nullptr;
  a.out = b.out.raw_data();
  a.lse = b.lse.data<float>();
  a.gout = static_cast<const uint16_t*>(b.gout.raw_data());
  a.Dvec = Dvec.data<float>();
  a.dq = b.dq.raw_data();
  a.dk = b.dk.raw_data();
  a.dv = b.dv.raw_data();
  a.dc_rows = P.logit == LogitKind::LogN ? b.dc_rows.data<float>() : nullptr;
  a.counters = counters;
  return a;
}

// A variant: forward and backward launchers over the buffers.
struct Variant {
  int id;
  std::string name;
  std::function<void(const AttnKernelParams&, Buffers&, ci::Counter*)> fwd, bwd;
};

template <int D, int kMT, int kBq>
Variant mma_variant(int id, const std::string& name) {
  Variant v{id, name, {}, {}};
  v.fwd = [](const AttnKernelParams& P, Buffers& b, ci::Counter* cnt) {
    Tensor Dvec = Tensor::empty({1}, DType::F32, Device::cuda(0));
    const Args a = args_of(b, P, Dvec, cnt);
    using S = mma::FwdShape<D, kMT>;
    launch(mma::fwd_kernel<D, kMT>, P.B * P.H * num_blocks(P.Tq, S::kBq), S::kSmem, P, a);
  };
  v.bwd = [](const AttnKernelParams& P, Buffers& b, ci::Counter* cnt) {
    Tensor Dvec = Tensor::empty({P.B, P.H, P.Tq}, DType::F32, Device::cuda(0));
    const Args a = args_of(b, P, Dvec, cnt);
    const int64_t rows = P.B * P.H * P.Tq;
    mma::dot_kernel<__nv_bfloat16><<<static_cast<unsigned>((rows + 7) / 8), 256, 0, hz::cuda::stream(0)>>>(
        rows, D, static_cast<const __nv_bfloat16*>(b.out.raw_data()),
        static_cast<const __nv_bfloat16*>(b.gout.raw_data()), Dvec.data<float>());
    HZ_CUDA_LAUNCHED("lab dot");
    launch(mma::dq_kernel<D>, P.B * P.H * num_blocks(P.Tq, mma::DqShape<D>::kBq), mma::DqShape<D>::kSmem, P, a);
    using K = mma::DkvShape<D, kBq>;
    launch(mma::dkv_kernel<D, kBq, false>, P.B * P.Hkv * num_blocks(P.Tk, K::kBk), K::kSmem, P, a);
  };
  return v;
}

// FlashAttention-2's backward as it is: the one pass with dQ added by float atomics into a zeroed
// f32 accumulator, then converted to bf16 (not deterministic; mma_body.h, dq_step's kAtomic)
template <int D>
void atomic_one_pass(const AttnKernelParams& P, Buffers& b, ci::Counter* cnt) {
  Tensor Dvec = Tensor::empty({P.B, P.H, P.Tq}, DType::F32, Device::cuda(0));
  Args a = args_of(b, P, Dvec, cnt);
  const int64_t rows = P.B * P.H * P.Tq;
  mma::dot_kernel<__nv_bfloat16><<<static_cast<unsigned>((rows + 7) / 8), 256, 0, hz::cuda::stream(0)>>>(
      rows, D, static_cast<const __nv_bfloat16*>(b.out.raw_data()), static_cast<const __nv_bfloat16*>(b.gout.raw_data()),
      Dvec.data<float>());
  HZ_CUDA_LAUNCHED("lab dot");
  constexpr int kBq = mma::Config<D>::kDkvBq;
  using K = mma::DkvShape<D, kBq>;
  Tensor acc = Tensor::zeros(b.q.shape(), DType::F32, Device::cuda(0));
  // the turn words (the kernel computes their addresses, the atomic version never reads them) and
  // the started-block count after them, as the library lays them out
  const int64_t nturn = P.B * P.H * num_blocks(P.Tq, kBq);
  Tensor words = Tensor::zeros({nturn + 1}, DType::I32, Device::cuda(0));
  a.dq_acc = acc.data<float>();
  a.dq_turn = static_cast<unsigned*>(words.raw_data());
  a.tile_next = a.dq_turn + nturn;
  launch(mma::dkvq_kernel<D, kBq, false, true>, P.B * P.Hkv * num_blocks(P.Tk, K::kBk), K::kSmem, P, a);
  b.dq = acc.to(DType::BF16);
}

template <int D>
std::vector<Variant> variants() {
  std::vector<Variant> v;
  Variant ref{0, "reference (warp per row, fp32)", {}, {}};
  ref.fwd = [](const AttnKernelParams& P, Buffers& b, ci::Counter* cnt) {
    AttnKernelParams p = P;
    p.block_q = p.block_k = 64;
    ci::ref_forward(p, b.q, b.k, b.v, p.logit == LogitKind::LogN ? b.c : Tensor(), Tensor(), b.out, b.lse, cnt,
                    hz::cuda::stream(0));
  };
  ref.bwd = [](const AttnKernelParams& P, Buffers& b, ci::Counter* cnt) {
    AttnKernelParams p = P;
    p.block_q = p.block_k = 64;
    ci::ref_backward(p, b.q, b.k, b.v, b.out, b.lse, b.gout, p.logit == LogitKind::LogN ? b.c : Tensor(), Tensor(),
                     b.dq, b.dk, b.dv, p.logit == LogitKind::LogN ? &b.dc_rows : nullptr, nullptr, nullptr, nullptr,
                     nullptr, cnt,
                     hz::cuda::stream(0));
  };
  v.push_back(ref);
  Variant lib{1, "tensor-core, promoted (mma::Config)", {}, {}};
  lib.fwd = [](const AttnKernelParams& P, Buffers& b, ci::Counter* cnt) {
    ci::mma_forward(P, b.q, b.k, b.v, P.logit == LogitKind::LogN ? b.c : Tensor(), Tensor(), Tensor(), b.out, b.lse, cnt,
                    hz::cuda::stream(0));
  };
  lib.bwd = [](const AttnKernelParams& P, Buffers& b, ci::Counter* cnt) {
    ci::mma_backward(P, b.q, b.k, b.v, b.out, b.lse, b.gout, P.logit == LogitKind::LogN ? b.c : Tensor(), Tensor(),
                     Tensor(), b.dq, b.dk, b.dv, P.logit == LogitKind::LogN ? &b.dc_rows : nullptr, nullptr, nullptr,
                     nullptr, nullptr, nullptr, cnt, hz::cuda::stream(0));
  };
  v.push_back(lib);
  constexpr int kOtherMT = mma::Config<D>::kFwdMT == 1 ? 2 : 1;
  v.push_back(mma_variant<D, kOtherMT, mma::Config<D>::kDkvBq>(
      2, "tensor-core, forward " + std::to_string(16 * kOtherMT) + " rows/warp"));
  v.push_back(mma_variant<D, mma::Config<D>::kFwdMT, 32>(3, "tensor-core, dK/dV 32-row query steps"));
  // FlashAttention-2's backward: dK, dV and dQ in one pass, dQ added in each query block's turn
  // (mma_body.h, dq_step; the library's HZ_ATTN_BACKWARD=one_pass)
  Variant one = lib;
  one.id = 4;
  one.name = "tensor-core, one-pass backward";
  one.bwd = [bwd = lib.bwd](const AttnKernelParams& P, Buffers& b, ci::Counter* cnt) {
    setenv("HZ_ATTN_BACKWARD", "one_pass", 1);
    bwd(P, b, cnt);
    unsetenv("HZ_ATTN_BACKWARD");
  };
  v.push_back(one);
  Variant atom = lib;  // (with LogN's dc: the two passes; the atomic kernel has no dc sums here)
  atom.id = 5;
  atom.name = "tensor-core, one-pass backward, atomic dQ (not deterministic)";
  atom.bwd = [bwd = lib.bwd](const AttnKernelParams& P, Buffers& b, ci::Counter* cnt) {
    if (P.logit == LogitKind::LogN) bwd(P, b, cnt);
    else atomic_one_pass<D>(P, b, cnt);
  };
  v.push_back(atom);
  // every product as a warpgroup MMA from swizzled shared memory (mma_body.h, kWg): the same tiles,
  // the two-pass backward
  Variant wg = lib;
  wg.id = 6;
  wg.name = "tensor-core on wgmma (sm_90a), two-pass backward";
  auto on_wgmma = [](const std::function<void(const AttnKernelParams&, Buffers&, ci::Counter*)>& f,
                     const char* choice = "wgmma") {
    return [f, choice](const AttnKernelParams& P, Buffers& b, ci::Counter* cnt) {
      setenv("HZ_ATTN_MMA", choice, 1);
      const bool on = ci::use_wgmma(P, DType::BF16, 0);
      f(P, b, cnt);
      unsetenv("HZ_ATTN_MMA");
      if (!on) throw std::runtime_error("the wgmma kernels do not run here (a compute-capability 9.0 GPU only)");
    };
  };
  wg.fwd = on_wgmma(lib.fwd);
  wg.bwd = on_wgmma(lib.bwd);
  v.push_back(wg);
  Variant wg1 = wg;
  wg1.id = 7;
  wg1.name = "tensor-core on wgmma (sm_90a), one-pass backward";
  wg1.bwd = on_wgmma(one.bwd);
  v.push_back(wg1);
  // the wgmma forward's simpler forms (HZ_ATTN_MMA)
  for (const auto& [id, name, choice] :
       {std::tuple{8, "forward without the intra-warpgroup overlap", "wgmma_serial"},
        std::tuple{9, "forward overlapped without a producer warpgroup", "wgmma_overlap"}}) {
    Variant form = wg;
    form.id = id;
    form.name = std::string("tensor-core on wgmma (sm_90a), ") + name;
    form.fwd = on_wgmma(lib.fwd, choice);
    form.bwd = on_wgmma(lib.bwd, choice);
    v.push_back(form);
  }
  return v;
}

// ---- the bulk tensor copy against cp.async ----------------------------------------------------------
// The warp-specialised forward (variant 6) loads its tiles with the copy engine; the others and the
// emulator's model of both (tests/attention/mma_emulator.h) with cp.async. Block k copies tile k of
// a (2, 100, 128) bf16 tensor both ways into the 128-byte swizzle (rows 0, 64 and -8 of either
// matrix: rows past the end and before the start zero) and counts the values that differ; a
// compute-capability 9.0 GPU only. Printed before the variants, so a failing variant 6 can be told
// apart from a copy engine that lays tiles out otherwise.
constexpr int kCheckRows = 100, kCheckCols = 128;
__global__ void tma_check_kernel(const __grid_constant__ mma::TileMap map, const uint16_t* g, unsigned* diff) {
  extern __shared__ __align__(16) unsigned char smem[];
  mma::DeviceCta x;
  uint16_t* a = reinterpret_cast<uint16_t*>(mma::align_1k(x, smem));
  uint16_t* b = a + 64 * kCheckCols;
  uint64_t* bar = reinterpret_cast<uint64_t*>(b + 64 * kCheckCols);
  const int k = static_cast<int>(blockIdx.x), mat = k % 2, row0 = k / 2 == 0 ? 0 : k / 2 == 1 ? 64 : -8;
  if (x.tid() == 0) {
    x.mbar_init(bar, 1);
    x.mbar_fence_init();
  }
  x.sync();
  if (x.tid() == 0) {
    x.mbar_arrive_expect_tx(bar, 64 * kCheckCols * 2);
    for (int cb = 0; cb < kCheckCols / 64; ++cb) x.tma_load(a + cb * 64 * 64, &map, 64 * cb, row0, mat, bar);
  }
  mma::load_tile_sw<kCheckCols>(x, b, g + static_cast<int64_t>(mat) * kCheckRows * kCheckCols, row0, 64, kCheckRows);
  x.cp_commit();
  x.template cp_wait<0>();
  x.sync();
  x.mbar_wait(bar, 0);
  for (int e = x.tid(); e < 64 * kCheckCols; e += mma::kThreads)
    if (a[e] != b[e]) atomicAdd(diff, 1u);
}
// Returns the number of values that differ (0: the same layout), or -1 when the GPU has no copy engine.
int64_t tma_check() {
  if (hz::cuda::compute_capability(0) != 90) return -1;
  Generator gen(7);
  const Tensor g = gen.normal({2, kCheckRows, kCheckCols}, 0, 1, DType::BF16, Device::cuda(0));
  mma::TileMap map;
  ci::encode_tile_map(map, static_cast<const uint16_t*>(g.raw_data()), kCheckCols, kCheckRows, 2, 64);
  Tensor diff = Tensor::zeros({1}, DType::I32, Device::cuda(0));
  const int smem = 1024 + 2 * 64 * kCheckCols * 2 + 64;
  HZ_CUDA_CHECK(cudaFuncSetAttribute(tma_check_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  tma_check_kernel<<<6, mma::kThreads, smem, hz::cuda::stream(0)>>>(map, static_cast<const uint16_t*>(g.raw_data()),
                                                                      static_cast<unsigned*>(diff.raw_data()));
  HZ_CUDA_LAUNCHED("lab: the bulk tensor copy check");
  return static_cast<int64_t>(diff.to_vector()[0]);
}

// ---- validation ------------------------------------------------------------------------------------
double rel_err(const Tensor& x, const Tensor& ref) {
  const std::vector<double> a = x.to_vector(), b = ref.to_vector();
  double e = 0, m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(b[i]) && a[i] == b[i]) continue;
    const double d = std::fabs(a[i] - b[i]);
    if (!(d <= e)) e = d;  // NaN sticks
    if (std::isfinite(b[i])) m = std::max(m, std::fabs(b[i]));
  }
  return e / std::max(m, 1e-30);
}

// Every variant against the reference kernels (variant 0: fp32 probabilities, no bf16 rounding of P
// or dS). The bound is a precision floor, not a guess: kTol for what rounds like one bf16 product,
// or, where the promoted kernels (variant 1, held at the bf16 floor against a float64 CPU op by
// hz_test_attention's tensor-core cases) are themselves further from the reference, 1.5 times
// their error on the same problem. LogN's dc is such a case: dc_i = sum_j dS_ij s_ij cancels (the
// dS of a row sum to zero), so its error relative to max |dc| runs past kTol (2.7e-2 measured on an
// H100 for causal, T 333, per row) while every term is at the floor. dc is compared per head (the
// sum the library takes: the one-pass backward writes its parts per key, not per row).
Tensor head_sums(const Tensor& parts) { return ops::sum(ops::sum(parts.to(Device::cpu()), 2, false), 0, false); }

bool validate(const Variant& var, const Variant& ref, const Variant& promoted, int64_t D) {
  constexpr double kTol = 2e-2;  // bf16 operands (P and dS rounded to bf16): ~2^-8 relative per product
  bool ok = true;
  ci::Counter* cnt = nullptr;
  Tensor counters = Tensor::zeros({3}, DType::I64, Device::cuda(0));
  cnt = reinterpret_cast<ci::Counter*>(counters.data<int64_t>());
  for (const char* mask : {"causal", "swa", "scope"})
    for (const char* logit : {"identity", "scale_invariant", "logn", "swan_row"}) {
      const Problem p{2, 4, 333, D, mask, logit};  // ragged: 333 is no multiple of any tile
      AttnKernelParams P = params_of(p);
      for (int64_t h = 0; h < P.H; ++h) P.window[h] = P.window[h] == 0 ? 0 : std::min<int64_t>(P.window[h], 100);
      const bool logn = P.logit == LogitKind::LogN;
      Buffers r = make_buffers(p, 7);
      ref.fwd(P, r, cnt);
      ref.bwd(P, r, cnt);
      auto errors = [&](const Variant& v, std::vector<double>& e) {
        Buffers x = make_buffers(p, 7);
        v.fwd(P, x, cnt);
        v.bwd(P, x, cnt);
        e = {rel_err(x.out, r.out), rel_err(x.lse, r.lse), rel_err(x.dq, r.dq), rel_err(x.dk, r.dk),
             rel_err(x.dv, r.dv), logn ? rel_err(head_sums(x.dc_rows), head_sums(r.dc_rows)) : 0.0};
      };
      std::vector<double> e, floor_e;
      errors(var, e);
      if (&var != &promoted) {
        errors(promoted, floor_e);
      } else {  // the promoted kernels: kTol, but for dc, whose floor the test suite holds (above)
        floor_e.assign(e.size(), 0.0);
        floor_e.back() = e.back();
      }
      bool good = true;
      for (size_t i = 0; i < e.size(); ++i) good &= e[i] <= std::max(kTol, 1.5 * floor_e[i]);  // NaN fails
      std::printf("  validate %-7s %-16s out %.1e lse %.1e dq %.1e dk %.1e dv %.1e dc %.1e  %s\n", mask, logit, e[0],
                  e[1], e[2], e[3], e[4], e[5], good ? "ok" : "FAIL");
      ok &= good;
    }
  return ok;
}

// ---- timing -----------------------------------------------------------------------------------------
float median_ms(const std::function<void()>& f, int reps) {
  cudaStream_t s = hz::cuda::stream(0);
  for (int i = 0; i < 2; ++i) f();  // warm-up
  std::vector<float> t;
  cudaEvent_t a, b;
  HZ_CUDA_CHECK(cudaEventCreate(&a));
  HZ_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < reps; ++i) {
    HZ_CUDA_CHECK(cudaEventRecord(a, s));
    f();
    HZ_CUDA_CHECK(cudaEventRecord(b, s));
    HZ_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    HZ_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  HZ_CUDA_CHECK(cudaEventDestroy(a));
  HZ_CUDA_CHECK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(std::stoll(item));
  return v;
}

// Times one variant at every length (fresh inputs per length), TFLOP/s on visible pairs.
template <int D>
void time_variant(const Variant& v, const std::vector<int64_t>& Ts, const std::string& mask, const std::string& logit,
                  int reps) {
  Tensor counters = Tensor::zeros({3}, DType::I64, Device::cuda(0));
  ci::Counter* cnt = reinterpret_cast<ci::Counter*>(counters.data<int64_t>());
  for (int64_t T : Ts) {
    const Problem p{std::max<int64_t>(1, 16384 / T), 2048 / D, T, D, mask, logit};
    const AttnKernelParams P = params_of(p);
    AttnConfig cfg;
    cfg.window.assign(P.window, P.window + P.H);
    const LayerCost cost = attention_cost(cfg, p.H, T, T, D);
    const double pairs = static_cast<double>(cost.visible_pairs) * p.B;
    const double flop_f = 4.0 * D * pairs, flop_b = 10.0 * D * pairs;
    // bytes: q, k, v read and out written (forward)
    const double bytes_f = 4.0 * p.B * p.H * T * D * 2;
    Buffers b = make_buffers(p, 11 + T);
    const float tf = median_ms([&] { v.fwd(P, b, cnt); }, reps);
    const float tb = median_ms([&] { v.bwd(P, b, cnt); }, reps);
    std::printf("  T %6lld B %3lld H %2lld  fwd %8.3f ms %6.1f TFLOP/s  bwd %8.3f ms %6.1f TFLOP/s  "
                "(floors at 989 TFLOP/s, 3.35 TB/s: fwd %.3f / %.3f ms)\n",
                static_cast<long long>(T), static_cast<long long>(p.B), static_cast<long long>(p.H), tf,
                flop_f / tf / 1e9, tb, flop_b / tb / 1e9, flop_f / 989e12 * 1e3, bytes_f / 3.35e12 * 1e3);
    std::fflush(stdout);
  }
}

template <int D>
int run(const std::vector<int>& chosen, const std::vector<int64_t>& Ts, const std::string& mask,
        const std::string& logit, int reps, bool check) {
  const std::vector<Variant> vs = variants<D>();
  cudaDeviceProp prop{};
  HZ_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs; D %d, mask %s, logits %s; bf16 inputs, fp32 accumulation\n", prop.name,
              prop.multiProcessorCount, D, mask.c_str(), logit.c_str());
  int failures = 0;
  for (const Variant& v : vs) {
    if (!chosen.empty() && std::find(chosen.begin(), chosen.end(), v.id) == chosen.end()) continue;
    std::printf("variant %d: %s\n", v.id, v.name.c_str());
    std::fflush(stdout);
    // One variant's failure (a wrong result, a thrown launch error) does not end the lab. A fault
    // that poisons the CUDA context would end the process: scripts/gpu/gpu_check.sh therefore runs
    // every variant in a process of its own.
    try {
      if (check && v.id != 0 && !validate(v, vs[0], vs[1], D)) {
        std::printf("variant %d: FAILED validation (not timed)\n", v.id);
        ++failures;
        continue;  // never time a wrong kernel
      }
      time_variant<D>(v, Ts, mask, logit, reps);
    } catch (const std::exception& e) {
      std::printf("variant %d: FAILED: %s\n", v.id, e.what());
      ++failures;
    }
    std::fflush(stdout);
  }
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<int> chosen;
    std::vector<int64_t> Ts{1024, 4096, 16384};
    int64_t D = 64;
    std::string mask = "causal", logit = "identity";
    int reps = 20;
    bool check = true;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw ValueError(a + " needs a value");
        return argv[++i];
      };
      if (a == "--D") D = std::stoll(next());
      else if (a == "--T") Ts = parse_list(next());
      else if (a == "--mask") mask = next();
      else if (a == "--logit") logit = next();
      else if (a == "--reps") reps = std::stoi(next());
      else if (a == "--no-validate") check = false;
      else chosen.push_back(std::stoi(a));
    }
    if (!hz::cuda::available()) {
      std::fprintf(stderr, "attention_lab: no usable CUDA device\n");
      return 2;
    }
    if (D != 64 && D != 128) throw ValueError("--D 64 or 128");
    int failures = 0;
    if (const int64_t d = tma_check(); d >= 0) {  // (an H100/H200 only)
      if (d == 0) std::printf("bulk tensor copy: 6 boxes equal cp.async's tiles\n");
      else std::printf("bulk tensor copy: FAILED, %lld values differ from cp.async's tiles\n", static_cast<long long>(d));
      failures += d != 0;
    }
    failures += D == 64 ? run<64>(chosen, Ts, mask, logit, reps, check) : run<128>(chosen, Ts, mask, logit, reps, check);
    if (failures) std::printf("%d variant(s) FAILED\n", failures);
    return failures ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attention_lab: %s\n", e.what());
    return 1;
  }
}
