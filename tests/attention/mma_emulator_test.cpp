// The tensor-core attention kernels (attention/cuda/mma_body.h: forward, dQ, dK/dV) run on the host
// through the thread-block emulator (mma_emulator.h) and are compared with the CPU op at the bf16
// precision floor (attn_test_util.h), with the same block counts. This is the same code the CUDA
// kernels compile, in the configuration they use (mma::Config), so index, masking, softmax, pipeline
// and barrier mistakes show up here without a GPU; what the emulator cannot show (real timing,
// races between asynchronous copies and other warps, the hardware's own reading of the PTX) is left
// to scripts/gpu/gpu_check.sh.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <type_traits>

#include "attention/cuda/mma_body.h"
#include "tests/attention/attn_test_util.h"
#include "tests/attention/mma_emulator.h"

using namespace hz;
using namespace hz::attn;
using namespace hzt::attn_util;

namespace {

std::vector<uint16_t> to_bits(const std::vector<double>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = f64_to_bf16_bits(v[i]);
  return b;
}
std::vector<double> from_bits(const std::vector<uint16_t>& b) {
  std::vector<double> v(b.size());
  for (size_t i = 0; i < b.size(); ++i) v[i] = bf16_bits_to_f32(b[i]);
  return v;
}
// The split kernels' input (mma_body.h): rows of D values (f32) as rows of 2D bf16, [hi | lo].
std::vector<uint16_t> split_bits(const std::vector<double>& v, int D) {
  std::vector<uint16_t> b(2 * v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const size_t row = i / D, d = i % D;
    std::tie(b[row * 2 * D + d], b[row * 2 * D + D + d]) = split_bf16(v[i]);
  }
  return b;
}
// Outputs in the kernels' storage: bf16 bits, or f32 for the split kernels.
template <bool kSplit>
struct OutBuf {
  std::vector<uint16_t> v;
  explicit OutBuf(size_t n) : v(n, 0x7fc1) {}  // NaN poison
  std::vector<double> values() const { return from_bits(v); }
  double at(size_t i) const { return bf16_bits_to_f32(v[i]); }
  void* data() { return v.data(); }
};
template <>
struct OutBuf<true> {
  std::vector<float> v;
  explicit OutBuf(size_t n) : v(n, NAN) {}
  std::vector<double> values() const { return {v.begin(), v.end()}; }
  double at(size_t i) const { return v[i]; }
  void* data() { return v.data(); }
};

template <class F>
void each_cta(int64_t grid, int smem, F body, int threads = mma::kThreads) {
  for (int64_t cta = 0; cta < grid; ++cta) {
    hzt::emu::Cta c(threads, static_cast<size_t>(smem), static_cast<uint64_t>(cta) + 1);
    c.run([&](hzt::emu::Thread& t) { body(t, cta, c.smem()); });
  }
}

struct Emulated {
  Result r;
  AttnStats stats;
};

// Which kernels run_emulated runs. fox_grad false: FoX's gates need no gradient (fused.cpp passes
// no dfox buffers). one_pass: the one-pass backward (dK/dV with dQ and the rows' sums, the plain
// variant) in place of the dQ and dK/dV kernels, with what its launcher adds (mma_launch.cuh): dq and
// the rows' sums zeroed, the turns zeroed, the sinks' rows from sink_row_grad. atomic: its atomic version (the
// kernel lab's variant 5: dQ by float atomics into a zeroed accumulator, converted to dq after).
// wgmma: the kernels on Hopper's warpgroup MMA (attn_wgmma*.cu: the forward and the backward, two
// passes or with one_pass one, bf16), the forward with FlashAttention-3's intra-warpgroup overlap
// in the form wg_forward names (fused.h, WgmmaForward: warp-specialised, HZ_ATTN_MMA=wgmma, as the
// launcher runs it: the general variant's calls overlapped without a producer; overlapped; serial).
struct Kernels {
  bool fox_grad = true, one_pass = false, atomic = false, wgmma = false;
  WgmmaForward wg_forward = WgmmaForward::WarpSpecialized;
};

// The forward, the dO . O pre-pass (on the host, in f32) and both backward kernels, emulated.
// kSplit: the split kernels, inputs taken as f32 and split into bf16 pairs, outputs in f32.
template <int D, bool kGen = false, bool kSplit = false>
Emulated run_emulated(const Problem& p, const Inputs& in, const Kernels& kn = {}) {
  const bool fox_grad = kn.fox_grad, one_pass = kn.one_pass, atomic = kn.atomic;
  const AttnConfig cfg = config_of(p);  // P points into its documents' bounds: keep it alive
  AttnKernelParams P = make_kernel_params(cfg, p.B, p.H, p.Hkv, p.Tq, p.Tk, p.D);
  // GRAPE's rates in f64, as fused.cpp hands them to the kernels (general variant)
  P.dist_q = in.rq.empty() ? nullptr : in.rq.data();
  P.dist_k = in.rk.empty() ? nullptr : in.rk.data();
  P.dist = p.dist > 0;
  auto input = [&](const std::vector<double>& x) { return kSplit ? split_bits(x, D) : to_bits(x); };
  const std::vector<uint16_t> q = input(in.q), k = input(in.k), v = input(in.v), g = input(in.g);
  std::vector<float> c(in.c.begin(), in.c.end());
  const int64_t nq = p.B * p.H * p.Tq, nk = p.B * p.Hkv * p.Tk;
  OutBuf<kSplit> out(nq * D), dq(nq * D), dk(nk * D), dv(nk * D);
  std::vector<float> lse(nq, NAN), Dvec(nq), dc_rows(nq, NAN);
  // FoX: c = cumsum(log f) in f32, as fused.cpp hands it to the kernels; the kernels' dc parts
  std::vector<float> fc, dfox_q(nq, NAN), dfox_k(p.fox ? p.B * p.H * p.Tk : 0, 0.0f);
  // sinks: z in f32, folded by the forward's epilogue; the dQ pass's per-row gradient
  std::vector<float> z(in.z.begin(), in.z.end()), dz_rows(nq, NAN);
  // GRAPE: the dQ pass writes every row's sum, the dK/dV pass the key sums per query head (zeroed here)
  std::vector<float> ddist_q(nq, NAN), ddist_k(p.B * p.H * p.Tk, 0.0f);
  for (size_t r0 = 0; r0 < in.f.size(); r0 += static_cast<size_t>(p.Tk)) {
    double acc = 0;
    for (int64_t m = 0; m < p.Tk; ++m) fc.push_back(static_cast<float>(acc += in.f[r0 + m]));
  }
  mma::Counter counters[3] = {0, 0, 0};
  mma::Args a;
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.c = p.logit == LogitKind::LogN ? c.data() : nullptr;
  a.out = out.data();
  a.lse = lse.data();
  a.gout = g.data();
  a.Dvec = Dvec.data();
  a.dq = dq.data();
  a.dk = dk.data();
  a.dv = dv.data();
  a.dc_rows = p.logit == LogitKind::LogN ? dc_rows.data() : nullptr;
  a.fc = p.fox ? fc.data() : nullptr;
  a.dfox_q = p.fox && fox_grad ? dfox_q.data() : nullptr;
  a.dfox_k = p.fox && fox_grad ? dfox_k.data() : nullptr;
  a.sink = p.sink ? z.data() : nullptr;
  a.dz_rows = p.sink ? dz_rows.data() : nullptr;
  a.ddist_q = p.dist & 2 ? ddist_q.data() : nullptr;
  a.ddist_k = p.dist & 1 ? ddist_k.data() : nullptr;
  a.counters = counters;
  using C = mma::Config<D, kSplit>;
  using F = mma::FwdShape<D, C::kFwdMT, kSplit>;
  if (kn.wgmma) {
    if constexpr (kSplit) {
      throw std::logic_error("the wgmma kernels: bf16");
    } else {
      auto forward = [&](auto mt, auto overlap, auto wgs, auto ws) {
        constexpr int kMT = decltype(mt)::value, kWG = decltype(wgs)::value;
        constexpr bool kWs = decltype(ws)::value;
        constexpr int kKeys = kWs ? C::kFwdBkWs : 64;
        using G = mma::FwdShape<D, kMT, false, true, kWG, kWs, kKeys>;
        mma::Args am = a;  // the tile maps of the bulk tensor copies, as the launcher encodes them
        hzt::emu::encode_tile_map(&am.q_map, q.data(), D, p.Tq, p.B * p.H, 64);
        hzt::emu::encode_tile_map(&am.k_map, k.data(), D, p.Tk, p.B * p.Hkv, 64);
        hzt::emu::encode_tile_map(&am.v_map, v.data(), D, p.Tk, p.B * p.Hkv, 64);
        each_cta(
            p.B * p.H * num_blocks(p.Tq, G::kBq), G::kSmem,
            [&](hzt::emu::Thread& t, int64_t cta, unsigned char* s) {
              mma::fwd_cta<D, kMT, kGen, false, true, decltype(overlap)::value, kWG, kWs, kKeys>(t, P, am, cta, s);
            },
            G::kCta);
      };
      using Overlapped = std::integral_constant<int, C::kFwdMTOverlap>;
      using Groups = std::integral_constant<int, C::kFwdWGOverlap>;
      if (kn.wg_forward == WgmmaForward::Serial)
        forward(std::integral_constant<int, C::kFwdMT>{}, std::false_type{}, std::integral_constant<int, 1>{},
                std::false_type{});
      else if (kn.wg_forward == WgmmaForward::Overlap || kGen)
        forward(Overlapped{}, std::true_type{}, Groups{}, std::false_type{});
      else
        forward(Overlapped{}, std::true_type{}, Groups{}, std::true_type{});
    }
  } else {
    each_cta(p.B * p.H * num_blocks(p.Tq, F::kBq), F::kSmem, [&](hzt::emu::Thread& t, int64_t cta, unsigned char* s) {
      mma::fwd_cta<D, C::kFwdMT, kGen, kSplit>(t, P, a, cta, s);
    });
  }
  for (int64_t row = 0; row < nq; ++row) {  // out and dO as stored (the split kernels: f32)
    float acc = 0;
    for (int d = 0; d < D; ++d)
      acc += static_cast<float>(out.at(row * D + d)) *
             (kSplit ? static_cast<float>(in.g[row * D + d]) : bf16_bits_to_f32(g[row * D + d]));
    Dvec[row] = acc;
  }
  if (one_pass) {
    constexpr int kBq = C::kDkvBq;
    using K1 = mma::DkvShape<D, kBq, kSplit>;
    // the general variant: the map of the key blocks that visit each query block (visit_map)
    const int64_t nkb = num_blocks(p.Tk, K1::kBk);
    std::vector<unsigned> map(kGen ? p.B * p.H * num_blocks(p.Tq, kBq) * ((nkb + 31) / 32) : 0, 0u);
    if constexpr (kGen)
      for (int64_t b = 0; b < p.B; ++b)
        for (int64_t h = 0; h < p.H; ++h)
          for (int64_t kb = 0; kb < nkb; ++kb)
            mma::visit_map<kBq, K1::kBk>(P, b, h, kb, [&](int64_t w, unsigned bit) { map[w] |= bit; });
    a.dq_visit = map.data();
    std::fill(dq.v.begin(), dq.v.end(), 0);
    // bf16: the f32 accumulator (every add after a store; zeroed for the atomic version)
    std::vector<float> acc(kSplit ? 0 : nq * D, atomic ? 0.0f : NAN);
    std::vector<unsigned> turn(p.B * p.H * num_blocks(p.Tq, kBq), 0);
    a.dq_acc = kSplit ? static_cast<float*>(dq.data()) : acc.data();
    a.dq_turn = turn.data();
    // LogN's dc parts per key (zeroed: keys no query sees), FoX's rows' parts (zeroed), the sinks' rows
    dc_rows.assign(p.B * p.H * p.Tk, 0.0f);
    a.dc_rows = p.logit == LogitKind::LogN ? dc_rows.data() : nullptr;
    std::fill(dfox_q.begin(), dfox_q.end(), 0.0f);
    std::fill(ddist_q.begin(), ddist_q.end(), 0.0f);
    // the kernel with those sums (kDq 2)
    const bool rows = a.fc != nullptr || a.dc_rows != nullptr || a.ddist_q != nullptr;
    struct Host {
      float exp2(float v) { return std::exp2(v); }
    } host;
    if (p.sink)
      for (int64_t row = 0; row < nq; ++row)
        dz_rows[row] = mma::sink_row_grad(host, z[(row / p.Tq) % p.H], lse[row] == -INFINITY ? INFINITY : lse[row] * mma::kLog2e,
                                          Dvec[row]);
    if constexpr (!kSplit) {
      if (kn.wgmma) {
        if (atomic) throw std::logic_error("the atomic one-pass backward: mma.sync");
        using KW = mma::DkvShape<D, kBq, false, true>;
        each_cta(p.B * p.Hkv * num_blocks(p.Tk, KW::kBk), KW::kSmem,
                 [&](hzt::emu::Thread& t, int64_t cta, unsigned char* s) {
                   if (rows) mma::dkv_cta<D, kBq, false, kGen, false, 2, false, true>(t, P, a, cta, s);
                   else mma::dkv_cta<D, kBq, false, kGen, false, 1, false, true>(t, P, a, cta, s);
                 });
      }
    }
    if (!kn.wgmma)
      each_cta(p.B * p.Hkv * num_blocks(p.Tk, K1::kBk), K1::kSmem,
               [&](hzt::emu::Thread& t, int64_t cta, unsigned char* s) {
                 if (atomic && rows) mma::dkv_cta<D, kBq, false, kGen, kSplit, 2, true>(t, P, a, cta, s);
                 else if (atomic) mma::dkv_cta<D, kBq, false, kGen, kSplit, 1, true>(t, P, a, cta, s);
                 else if (rows) mma::dkv_cta<D, kBq, false, kGen, kSplit, 2>(t, P, a, cta, s);
                 else mma::dkv_cta<D, kBq, false, kGen, kSplit, 1>(t, P, a, cta, s);
               });
    if (atomic && !kSplit)  // the conversion after the kernel
      for (int64_t e = 0; e < nq * D; ++e) static_cast<uint16_t*>(dq.data())[e] = f32_to_bf16_bits(acc[e]);
  }
  using Q = mma::DqShape<D, kSplit>;
  using K = mma::DkvShape<D, C::kDkvBq, kSplit>;
  bool two_pass_mma = !one_pass;  // the mma.sync dQ and dK/dV kernels
  if constexpr (!kSplit) {
    if (kn.wgmma && !one_pass) {
      using QW = mma::DqShape<D, false, true>;
      using KW = mma::DkvShape<D, C::kDkvBq, false, true>;
      each_cta(p.B * p.H * num_blocks(p.Tq, QW::kBq), QW::kSmem, [&](hzt::emu::Thread& t, int64_t cta, unsigned char* s) {
        mma::dq_cta<D, kGen, false, true>(t, P, a, cta, s);
      });
      each_cta(p.B * p.Hkv * num_blocks(p.Tk, KW::kBk), KW::kSmem, [&](hzt::emu::Thread& t, int64_t cta, unsigned char* s) {
        if (kGen)  // FoX read at run time
          mma::dkv_cta<D, C::kDkvBq, false, true, false, false, false, true>(t, P, a, cta, s);
        else if (a.fc != nullptr)
          mma::dkv_cta<D, C::kDkvBq, true, false, false, false, false, true>(t, P, a, cta, s);
        else
          mma::dkv_cta<D, C::kDkvBq, false, false, false, false, false, true>(t, P, a, cta, s);
      });
      two_pass_mma = false;
    }
  }
  if (two_pass_mma)
    each_cta(p.B * p.H * num_blocks(p.Tq, Q::kBq), Q::kSmem, [&](hzt::emu::Thread& t, int64_t cta, unsigned char* s) {
      mma::dq_cta<D, kGen, kSplit>(t, P, a, cta, s);
    });
  if (two_pass_mma)
    each_cta(p.B * p.Hkv * num_blocks(p.Tk, K::kBk), K::kSmem,
           [&](hzt::emu::Thread& t, int64_t cta, unsigned char* s) {
             if (kGen)  // FoX read at run time
               mma::dkv_cta<D, C::kDkvBq, false, true, kSplit>(t, P, a, cta, s);
             else if (a.fc != nullptr)
               mma::dkv_cta<D, C::kDkvBq, true, false, kSplit>(t, P, a, cta, s);
             else
               mma::dkv_cta<D, C::kDkvBq, false, false, kSplit>(t, P, a, cta, s);
           });
  Emulated e;
  e.r.out = out.values();
  e.r.lse.assign(lse.begin(), lse.end());
  e.r.dq = dq.values();
  e.r.dk = dk.values();
  e.r.dv = dv.values();
  if (p.logit == LogitKind::LogN) {
    e.r.dc.assign(p.H, 0.0);
    // per row (B, H, Tq), or per key from the one pass (B, H, Tk)
    const int64_t n = one_pass ? p.Tk : p.Tq;
    for (size_t e2 = 0; e2 < dc_rows.size(); ++e2) e.r.dc[(static_cast<int64_t>(e2) / n) % p.H] += dc_rows[e2];
  }
  if (p.sink) {  // the dQ kernel's per-row parts, summed per head
    e.r.dz.assign(p.H, 0.0);
    for (int64_t row = 0; row < nq; ++row) e.r.dz[(row / p.Tq) % p.H] += dz_rows[row];
  }
  if (p.fox && fox_grad) {  // dLoss/dc: the key sums, plus each row's sum at its query's position
    std::vector<double> dc(dfox_k.begin(), dfox_k.end());
    for (int64_t row = 0; row < nq; ++row) dc[(row / p.Tq) * p.Tk + P.q_offset + row % p.Tq] += dfox_q[row];
    e.r.df = reverse_cumsum_rows(dc, p.Tk);
  }
  if (p.dist & 2) e.r.ddq.assign(ddist_q.begin(), ddist_q.end());
  if (p.dist & 1) e.r.ddk.assign(ddist_k.begin(), ddist_k.end());
  e.stats = {static_cast<int64_t>(counters[0]), static_cast<int64_t>(counters[1]), static_cast<int64_t>(counters[2])};
  return e;
}

// The CPU op's block counts at the tensor-core tiles.
AttnStats cpu_counts(const Problem& p, const AttnTiles& tiles) {
  AttnStats s;
  for (bool fwd : {true, false}) {
    AttnConfig cfg = config_of(p);
    cfg.block_q = fwd ? tiles.fwd_q : tiles.bwd_q;
    cfg.block_k = fwd ? tiles.fwd_k : tiles.bwd_k;
    Generator g(3);
    ag::Variable q(g.normal({p.B, p.H, p.Tq, 8}), true), k(g.normal({p.B, p.Hkv, p.Tk, 8}), true),
        v(g.normal({p.B, p.Hkv, p.Tk, 8}), true), c(Tensor::ones({p.H}));
    reset_attn_stats();
    const ag::Variable f = p.fox ? ag::Variable(Tensor::full({p.B, p.H, p.Tk}, -0.1)) : ag::Variable();
    const ag::Variable z = p.sink ? ag::Variable(Tensor::zeros({p.H})) : ag::Variable();
    const AttnOutput o = fused_attention(q, k, v, cfg, {p.logit == LogitKind::LogN ? c : ag::Variable(), z, f});
    ag::sum_all(o.out).backward();
    const AttnStats x = attn_stats();
    if (fwd) {
      s.fwd_blocks = x.fwd_blocks;
      s.fwd_boundary_blocks = x.fwd_boundary_blocks;
    } else {
      s.bwd_blocks = x.bwd_blocks;
    }
  }
  return s;
}

template <int D, bool kGen = false, bool kSplit = false>
void check(const Problem& p) {
  SCOPED_TRACE(p.tag() + (kSplit ? " split f32" : ""));
  const Inputs in = kSplit ? f32_inputs(p, 71) : bf16_inputs(p, 71);
  const Result ref = run_op(p, in, DType::F64, Device::cpu(), AttnImpl::Auto, false);
  const Result low = kSplit ? naive(p, split_rounded(in), Rounding::Split) : naive(p, in, true);
  // the floor below is only as good as the twin: unrounded, it is the op to double rounding
  expect_same(naive(p, in, false), ref, 1e-9);
  const Emulated e = run_emulated<D, kGen, kSplit>(p, in);
  if (kSplit) expect_results(e.r, low, ref, 3.0, kSplitAtol, kSplitAtolSums);
  else expect_results(e.r, low, ref, 3.0, 1e-3);
  using C = mma::Config<D, kSplit>;
  const AttnTiles tiles{mma::FwdShape<D, C::kFwdMT, kSplit>::kBq, 64, C::kDkvBq, 64, true};
  const AttnStats want = cpu_counts(p, tiles);
  EXPECT_EQ(e.stats.fwd_blocks, want.fwd_blocks);
  EXPECT_EQ(e.stats.fwd_boundary_blocks, want.fwd_boundary_blocks);
  EXPECT_EQ(e.stats.bwd_blocks, want.bwd_blocks);
}

// A cover of the combinations (every mask, position encoding and logit transform at least twice,
// each with GQA and ragged lengths) rather than the full cross product: emulation costs about a
// second per problem.
std::vector<Problem> emu_problems(int64_t D) {
  std::vector<Problem> v;
  const MaskKind masks[] = {MaskKind::Causal, MaskKind::Window, MaskKind::Scope};
  const PosKind pos[] = {PosKind::None, PosKind::Rope, PosKind::PRope, PosKind::Alibi};
  const LogitKind logits[] = {LogitKind::Identity, LogitKind::ScaleInvariant, LogitKind::LogN, LogitKind::SwanRow,
                              LogitKind::Temperature};
  for (int n = 0; n < 6; ++n) {
    Problem p;
    p.D = D;
    p.H = 2;
    p.Hkv = 1;
    p.Tq = p.Tk = 70 + 37 * (n % 2);
    p.mask = masks[n % 3];
    p.pos = pos[n % 4];
    p.logit = logits[n % 5];
    v.push_back(p);
  }
  return v;
}

// The general variant's problems: chunks, sink tokens, a prefix, token positions and documents, with
// the masks, position encodings, logit transforms, FoX and sinks around them.
std::vector<Problem> general_problems() {
  std::vector<Problem> ps;
  Problem p;
  p.H = 4, p.Hkv = 2, p.Tq = p.Tk = 150, p.chunk = 48, p.logit = LogitKind::LogN;  // Llama 4's chunks
  ps.push_back(p);
  p = Problem{};
  p.H = 4, p.Hkv = 2, p.Tq = p.Tk = 200, p.mask = MaskKind::Window, p.sink_tokens = 4, p.pos = PosKind::Alibi;
  ps.push_back(p);  // sinks beside a window of 24: blocks 0 and 2-3 for the last rows
  p = Problem{};
  p.H = 2, p.Hkv = 1, p.Tq = p.Tk = 170, p.mask = MaskKind::Scope, p.sink_tokens = 3, p.fox = p.sink = true,
  p.logit = LogitKind::ScaleInvariant;
  ps.push_back(p);
  p = Problem{};
  p.H = 2, p.Hkv = 1, p.Tq = p.Tk = 150, p.prefix = 70, p.pos = PosKind::Alibi, p.logit = LogitKind::ScaleInvariant;
  ps.push_back(p);  // the prefix reads distances both ways
  p = Problem{};
  p.H = 4, p.Hkv = 2, p.Tq = p.Tk = 160, p.mask = MaskKind::Window, p.prefix = 40, p.sink_tokens = 2,
  p.logit = LogitKind::LogN, p.pos = PosKind::Rope;
  ps.push_back(p);
  p = Problem{};
  p.H = 2, p.Hkv = 1, p.Tq = 40, p.Tk = 150, p.drawn = true, p.pos = PosKind::Alibi,
  p.logit = LogitKind::ScaleInvariant;  // token positions, queries last
  ps.push_back(p);
  p = Problem{};
  p.H = 4, p.Hkv = 2, p.Tq = p.Tk = 180, p.drawn = true, p.mask = MaskKind::Window, p.sink_tokens = 2, p.chunk = 64,
  p.logit = LogitKind::SwanRow, p.fox = true;
  ps.push_back(p);
  p = Problem{};
  p.B = 2, p.H = 2, p.Hkv = 1, p.Tq = p.Tk = 150, p.docs = {{60, 90}, {150}}, p.chunk = 32, p.sink_tokens = 3,
  p.mask = MaskKind::Window;  // documents: chunks and sink tokens per document
  ps.push_back(p);
  return ps;
}
// GRAPE's rates (general variant): key rates, query rates and both, beside ALiBi, FoX, sinks, a
// window, a prefix and token positions, with GQA and Tq != Tk.
std::vector<Problem> grape_problems() {
  std::vector<Problem> ps;
  Problem p;
  p.H = 4, p.Hkv = 2, p.Tq = p.Tk = 150, p.dist = 1;
  ps.push_back(p);
  p = Problem{};
  p.H = 4, p.Hkv = 2, p.Tq = p.Tk = 170, p.dist = 3, p.mask = MaskKind::Window, p.pos = PosKind::Alibi,
  p.fox = p.sink = true, p.logit = LogitKind::ScaleInvariant;
  ps.push_back(p);
  p = Problem{};
  p.H = 2, p.Hkv = 1, p.Tq = p.Tk = 150, p.dist = 2, p.prefix = 70, p.logit = LogitKind::LogN;
  ps.push_back(p);
  p = Problem{};
  p.H = 2, p.Hkv = 1, p.Tq = 40, p.Tk = 150, p.dist = 3, p.drawn = true, p.sink_tokens = 2, p.mask = MaskKind::Scope;
  ps.push_back(p);
  return ps;
}

}  // namespace

TEST(MmaEmulator, RejectsDivergentCollectivesAndDeadlocks) {
  // the emulator must be able to fail: half a warp at an mma, half at a shuffle; a barrier skipped
  {
    hzt::emu::Cta c(32, 64);
    EXPECT_THROW(c.run([](hzt::emu::Thread& t) {
      float d[4] = {0, 0, 0, 0};
      const uint32_t a[4] = {0, 0, 0, 0};
      if (t.tid() < 16) t.mma(d, a, 0, 0);
      else t.shfl_xor(1.0f, 1);
    }),
                 std::runtime_error);
  }
  {
    hzt::emu::Cta c(64, 64);
    EXPECT_THROW(c.run([](hzt::emu::Thread& t) {
      if (t.tid() < 32) t.sync();
    }),
                 std::runtime_error);
  }
  {
    hzt::emu::Cta c(32, 64);
    uint32_t r[4];
    EXPECT_THROW(c.run([&](hzt::emu::Thread& t) { t.ldsm_x4(r, reinterpret_cast<const uint16_t*>(c.smem()) + 1); }),
                 std::runtime_error);
  }
}

TEST(MmaEmulator, MmaAndLdmatrixFollowThePtxLayouts) {
  // one 16x16 A tile times a 16x8 B tile through ldmatrix + mma, against a plain product
  hzt::emu::Cta c(32, 16 * 16 * 2 + 16 * 8 * 2);
  uint16_t* sA = reinterpret_cast<uint16_t*>(c.smem());  // A (16, 16) row-major
  uint16_t* sB = sA + 256;                               // B^T (8, 16): row n holds B[:, n]
  double A[16][16], B[16][8];
  for (int i = 0; i < 16; ++i)
    for (int k = 0; k < 16; ++k) {
      A[i][k] = bf16_bits_to_f32(f64_to_bf16_bits((i * 16 + k) % 13 - 6.0));
      sA[i * 16 + k] = f64_to_bf16_bits(A[i][k]);
    }
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 8; ++n) {
      B[k][n] = bf16_bits_to_f32(f64_to_bf16_bits((k * 8 + n) % 7 - 3.0));
      sB[n * 16 + k] = f64_to_bf16_bits(B[k][n]);
    }
  float D[32][4];
  c.run([&](hzt::emu::Thread& t) {
    const int lane = t.tid(), g = lane / 4, q = lane % 4;
    uint32_t a[4], b[4];
    t.ldsm_x4(a, sA + (lane % 16) * 16 + 8 * (lane / 16));  // matrices (rows 0-7|8-15) x (k 0-7|8-15)
    // B as two 8x8 matrices of B^T rows (n), k 0-7 and 8-15 (x4 with the last two repeated)
    t.ldsm_x4(b, sB + (lane % 8) * 16 + 8 * ((lane / 8) % 2));
    float d[4] = {0, 0, 0, 0};
    t.mma(d, a, b[0], b[1]);
    for (int e = 0; e < 4; ++e) D[lane][e] = d[e];
    (void)g;
    (void)q;
  });
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, q = lane % 4;
    for (int e = 0; e < 4; ++e) {
      const int i = g + 8 * (e / 2), n = 2 * q + e % 2;
      double want = 0;
      for (int k = 0; k < 16; ++k) want += A[i][k] * B[k][n];
      EXPECT_EQ(D[lane][e], static_cast<float>(want)) << "lane " << lane << " element " << e;
    }
  }
}

TEST(MmaEmulator, TensorCoreKernelsD64MatchTheCpuOp) {
  for (const Problem& p : emu_problems(64)) check<64>(p);
}

TEST(MmaEmulator, TensorCoreKernelsD128MatchTheCpuOp) {
  std::vector<Problem> ps = emu_problems(128);
  ps.resize(3);
  for (const Problem& p : ps) check<128>(p);
}

// f32 attention on the tensor cores (the split kernels): every mask, position encoding and logit
// transform of the cover, FoX, sinks and GQA, at D 64 and 128, plain and general variant (chunks,
// sink tokens, a prefix, token positions, GRAPE's rates), against the CPU op in float64 at the
// split twin's floor plus 2e-5 of max |ref| (2e-4 for the sums over all pairs; the bf16 kernels'
// bound is 1e-3: a split kernel that lost its lo halves fails by two orders of magnitude).
TEST(MmaEmulator, SplitKernelsForF32MatchTheCpuOpAtTheSplitFloor) {
  std::vector<Problem> ps = emu_problems(64);
  ps.resize(4);
  Problem p;
  p.fox = p.sink = true, p.H = 4, p.Hkv = 2, p.Tq = p.Tk = 107, p.mask = MaskKind::Window,
  p.logit = LogitKind::LogN;
  ps.push_back(p);
  for (const Problem& x : ps) check<64, false, true>(x);
  for (const size_t i : {size_t{1}, size_t{4}}) {
    p = ps[i];
    p.D = 128;
    check<128, false, true>(p);
  }
  p = Problem{};
  p.H = 4, p.Hkv = 2, p.Tq = p.Tk = 180, p.drawn = true, p.mask = MaskKind::Window, p.sink_tokens = 2, p.chunk = 64,
  p.logit = LogitKind::SwanRow, p.fox = true, p.dist = 3;
  check<64, true, true>(p);
  p = Problem{};
  p.H = 2, p.Hkv = 1, p.Tq = p.Tk = 150, p.prefix = 70, p.pos = PosKind::Alibi, p.logit = LogitKind::ScaleInvariant,
  p.sink = true, p.D = 128;
  check<128, true, true>(p);
}

// Every output, gradient and block count of two emulated runs, the same bits (fwd_counts false:
// forwards of different query blocks, whose block counts differ).
void expect_same_bits(const Emulated& a, const Emulated& b, bool fwd_counts = true) {
  const std::pair<const char*, std::pair<const std::vector<double>*, const std::vector<double>*>> parts[] = {
      {"out", {&a.r.out, &b.r.out}}, {"lse", {&a.r.lse, &b.r.lse}}, {"dq", {&a.r.dq, &b.r.dq}},
      {"dk", {&a.r.dk, &b.r.dk}},    {"dv", {&a.r.dv, &b.r.dv}},    {"dc", {&a.r.dc, &b.r.dc}},
      {"dlog f", {&a.r.df, &b.r.df}}, {"dz", {&a.r.dz, &b.r.dz}},  {"ddist_q", {&a.r.ddq, &b.r.ddq}},
      {"ddist_k", {&a.r.ddk, &b.r.ddk}}};
  for (const auto& [what, v] : parts) {
    ASSERT_EQ(v.first->size(), v.second->size()) << what;
    for (size_t i = 0; i < v.first->size(); ++i) ASSERT_EQ((*v.first)[i], (*v.second)[i]) << what << " " << i;
  }
  if (fwd_counts) {
    EXPECT_EQ(a.stats.fwd_blocks, b.stats.fwd_blocks);
    EXPECT_EQ(a.stats.fwd_boundary_blocks, b.stats.fwd_boundary_blocks);
  }
  EXPECT_EQ(a.stats.bwd_blocks, b.stats.bwd_blocks);
}

// The one-pass backward (dK/dV with dQ in the same loop, dQ added to each query block in a fixed
// order; mma_body.h dq_step) against the CPU op at the two-pass kernels' floors, with the two-pass
// kernels' dK, dV and sink gradients bit for bit (the same arithmetic in the same order) and their
// block counts: causal, window and SCOPE masks, packed documents, ALiBi, RoPE, scale-invariant and
// temperature logits, sinks, GQA, a batch of 2, queries last (Tq < Tk), ragged lengths and chains
// of up to 4 key blocks per query block; bf16 at D 64 and 128, split f32 at D 64 and at D 128 (32-row
// steps: two warps per m-tile, each half of D); FoX's and LogN's gradients (the CPU op's floors
// only: their sums run in other orders, LogN's dc over each key's queries), with sinks, SCOPE, packed
// documents and queries last. A block that takes its turn out of order fails in
// the emulator, where blocks run in grid order (on a GPU it would hang). The kernel lab's atomic
// version (variant 5) once, at the same floor. Every bf16 problem once more on Hopper's wgmma (the
// forward, in its serial form, and the one-pass backward), the same bits as on mma.sync: the emulator forms both
// instructions' products in the same k-steps.
template <int D, bool kSplit, bool kGen = false>
void check_one_pass(const Problem& p, bool atomic = false) {
  SCOPED_TRACE(p.tag() + (kSplit ? " split f32" : "") + (atomic ? " one pass, atomic dQ" : " one pass"));
  const Inputs in = kSplit ? f32_inputs(p, 71) : bf16_inputs(p, 71);
  const Result ref = run_op(p, in, DType::F64, Device::cpu(), AttnImpl::Auto, false);
  const Result low = kSplit ? naive(p, split_rounded(in), Rounding::Split) : naive(p, in, true);
  const Emulated one = run_emulated<D, kGen, kSplit>(p, in, {true, true, atomic});
  if (kSplit) expect_results(one.r, low, ref, 3.0, kSplitAtol, kSplitAtolSums);
  else expect_results(one.r, low, ref, 3.0, 1e-3);
  const Emulated two = run_emulated<D, kGen, kSplit>(p, in);
  EXPECT_EQ(one.r.dk, two.r.dk);
  EXPECT_EQ(one.r.dv, two.r.dv);
  EXPECT_EQ(one.r.dz, two.r.dz);
  EXPECT_EQ(one.stats.bwd_blocks, two.stats.bwd_blocks);
  if (!kSplit && !atomic) {
    SCOPED_TRACE("on wgmma");
    Kernels wg;
    wg.one_pass = wg.wgmma = true;
    wg.wg_forward = WgmmaForward::Serial;  // mma.sync's tiles and steps (the forms: WgmmaKernelsMatch...)
    expect_same_bits(run_emulated<D, kGen, kSplit>(p, in, wg), one);
  }
}

// The general variant's one-pass backward (chunks, sink tokens, a prefix, token positions; not
// GRAPE): the key blocks that visit a query block are not consecutive there, so each block finds
// its successor in the map built from the dK/dV loop's own visits (mma_body.h, visit_map); a wrong
// successor is a turn out of order, which the emulator reports. GRAPE's rows' sums come in dQ's turns
// as FoX's do. Every general problem of the variant's own tests, GRAPE's too, at D 64; sink tokens
// beside a window at D 128; split f32 with documents, chunks and sink tokens.
TEST(MmaEmulator, OnePassBackwardInTheGeneralVariant) {
  for (const Problem& p : general_problems()) check_one_pass<64, false, true>(p);
  for (const Problem& p : grape_problems()) check_one_pass<64, false, true>(p);
  Problem p = general_problems()[1];
  p.D = 128, p.sink = true;
  check_one_pass<128, false, true>(p);
  check_one_pass<64, true, true>(general_problems()[7]);
}

TEST(MmaEmulator, OnePassBackwardMatchesTheCpuOpAndTheTwoPassKernels) {
  Problem p;
  p.H = 2, p.Hkv = 1, p.B = 2, p.Tq = p.Tk = 230;  // 4 key blocks, ragged
  check_one_pass<64, false>(p);
  check_one_pass<64, false>(p, true);  // the lab's atomic version
  p = Problem{};
  p.H = 4, p.Hkv = 2, p.Tq = p.Tk = 107, p.mask = MaskKind::Window, p.pos = PosKind::Alibi,
  p.logit = LogitKind::ScaleInvariant, p.sink = true;
  check_one_pass<64, false>(p);
  p = Problem{};
  p.H = 2, p.Hkv = 1, p.Tq = p.Tk = 150, p.mask = MaskKind::Scope, p.docs = {{40, 110}}, p.pos = PosKind::Rope;
  check_one_pass<64, false>(p);
  p = Problem{};
  p.H = 2, p.Hkv = 1, p.Tq = 30, p.Tk = 150, p.logit = LogitKind::Temperature;  // queries last, 3 key blocks
  check_one_pass<64, false>(p);
  p = Problem{};
  p.H = 2, p.Hkv = 1, p.Tq = p.Tk = 140, p.sink = true, p.D = 128;
  check_one_pass<128, false>(p);
  p = Problem{};
  p.H = 2, p.Hkv = 1, p.Tq = p.Tk = 140, p.mask = MaskKind::Window, p.pos = PosKind::Rope;
  check_one_pass<64, true>(p);
  p = Problem{};
  p.H = 2, p.Hkv = 1, p.Tq = p.Tk = 150, p.docs = {{60, 90}}, p.sink = true, p.D = 128;
  check_one_pass<128, true>(p);
  // FoX (dLoss/dc: its keys' and its rows' sums) and LogN (dLoss/dc_h), alone and together
  p = Problem{};
  p.fox = true, p.H = 4, p.Hkv = 2, p.B = 2, p.Tq = p.Tk = 200, p.mask = MaskKind::Window, p.pos = PosKind::Rope;
  check_one_pass<64, false>(p);
  check_one_pass<64, false>(p, true);
  {  // FoX's gates without a gradient (no dfox buffers): the same dQ, dK and dV
    SCOPED_TRACE("FoX without its gradient");
    const Inputs in = bf16_inputs(p, 71);
    Kernels kn;
    kn.one_pass = true;
    const Emulated with = run_emulated<64>(p, in, kn);
    kn.fox_grad = false;
    const Emulated without = run_emulated<64>(p, in, kn);
    EXPECT_EQ(with.r.dq, without.r.dq);
    EXPECT_EQ(with.r.dk, without.r.dk);
    EXPECT_EQ(with.r.dv, without.r.dv);
    EXPECT_TRUE(without.r.df.empty());
  }
  p = Problem{};
  p.H = 2, p.Hkv = 1, p.Tq = 30, p.Tk = 150, p.logit = LogitKind::LogN, p.pos = PosKind::Alibi;  // queries last
  check_one_pass<64, false>(p);
  p = Problem{};
  p.fox = p.sink = true, p.H = 2, p.Hkv = 1, p.Tq = p.Tk = 140, p.logit = LogitKind::LogN, p.mask = MaskKind::Scope,
  p.D = 128;
  check_one_pass<128, false>(p);
  p.D = 64, p.docs = {{50, 90}};
  check_one_pass<64, true>(p);
  p = Problem{};
  p.H = 2, p.Hkv = 1, p.Tq = p.Tk = 100, p.logit = LogitKind::LogN, p.D = 128;
  check_one_pass<128, true>(p);
}

// Hopper's wgmma as the emulator models it (PTX's fragment layouts, descriptors and 128-byte
// swizzle) against mma_body.h's tile and descriptor helpers: S = A B^T from two K-major swizzled
// tiles (four k-steps along the 128-byte row), then O = S V with S packed to bf16 as a register A operand and V an N-major
// tile of 128 columns (two column blocks: the leading byte offset), and E = X V with X stored
// transposed (the one-pass backward's dQ part: A M-major, B N-major, 64 columns per product),
// against plain products.
TEST(MmaEmulator, WgmmaFollowsThePtxLayouts) {
  constexpr int K = 64, N = 64, DV = 128;
  hzt::emu::Cta c(128, 1024 + (64 * K + N * K + N * DV + N * 64) * 2);
  double A[64][K], B[N][K], V[N][DV], X[64][N];
  auto val = [](int i, int m) { return bf16_bits_to_f32(f64_to_bf16_bits(i % m - (m - 1) / 2.0)); };
  for (int m = 0; m < 64; ++m)
    for (int j = 0; j < N; ++j) X[m][j] = val(m * 3 + j * 5, 7);
  float S[128][N / 2], O[128][DV / 2], E[128][DV / 2];
  c.run([&](hzt::emu::Thread& t) {
    uint16_t* sA = reinterpret_cast<uint16_t*>(mma::align_1k(t, c.smem()));
    uint16_t* sB = sA + 64 * K;
    uint16_t* sV = sB + N * K;
    uint16_t* sXt = sV + N * DV;
    // X^T, by every thread through st.shared: row j (the reduction), columns m; fenced
    for (int e = t.tid(); e < N * 32; e += 128) {
      const int j = e / 32, m = 2 * (e % 32);
      t.store_shared(reinterpret_cast<uint32_t*>(sXt + mma::sw_offset(j, m, N)),
                     f64_to_bf16_bits(X[m][j]) | static_cast<uint32_t>(f64_to_bf16_bits(X[m + 1][j])) << 16);
    }
    t.fence_proxy_async();
    if (t.tid() == 0) {  // plain stores: no cp.async, nothing to fence into the async proxy
      for (int r = 0; r < 64; ++r)
        for (int k = 0; k < K; ++k) sA[mma::sw_offset(r, k, 64)] = f64_to_bf16_bits(A[r][k] = val(r * K + k, 13));
      for (int n = 0; n < N; ++n)
        for (int k = 0; k < K; ++k) sB[mma::sw_offset(n, k, N)] = f64_to_bf16_bits(B[n][k] = val(n * 7 + k * 3, 11));
      for (int j = 0; j < N; ++j)
        for (int d = 0; d < DV; ++d) sV[mma::sw_offset(j, d, N)] = f64_to_bf16_bits(V[j][d] = val(j * 5 + d, 9));
    }
    t.sync();
    float s[N / 8][4], o[DV / 8][4];
    t.wg_fence();
    mma::wg_issue_nt<K, N>(t, s, t.smem_u32(sA), 64, 0, t.smem_u32(sB), N, false);
    t.wg_commit();
    t.wg_wait<0>();
    uint32_t pa[N / 16][4];
    for (int kk = 0; kk < N / 16; ++kk) mma::pack_a(t, pa[kk], s[2 * kk], s[2 * kk + 1]);
    for (auto& x : o)
      for (float& e : x) e = 0.0f;
    t.wg_fence();
    mma::wg_issue_rn<DV, N>(t, o, pa, t.smem_u32(sV), N);
    t.wg_commit();
    t.wg_wait<0>();
    for (int i = 0; i < N / 2; ++i) S[t.tid()][i] = s[i / 4][i % 4];
    for (int i = 0; i < DV / 2; ++i) O[t.tid()][i] = o[i / 4][i % 4];
    for (int cb = 0; cb < DV / 64; ++cb) {
      float e[8][4];
      t.wg_fence();
      for (int kk = 0; kk < N / 16; ++kk)
        t.wgmma_ss<64, 1, 1>(e, mma::desc_mn(t.smem_u32(sXt), N, kk), mma::desc_mn(t.smem_u32(sV) + cb * N * 128, N, kk),
                             kk > 0);
      t.wg_commit();
      t.wg_wait<0>();
      for (int i = 0; i < 32; ++i) E[t.tid()][cb * 32 + i] = e[i / 4][i % 4];
    }
  });
  double Sr[64][N];
  for (int r = 0; r < 64; ++r)
    for (int n = 0; n < N; ++n) {
      double acc = 0;
      for (int k = 0; k < K; ++k) acc += A[r][k] * B[n][k];
      Sr[r][n] = acc;
    }
  for (int th = 0; th < 128; ++th) {
    const int w = th / 32, g = (th % 32) / 4, q = th % 4;
    for (int i = 0; i < N / 2; ++i) {
      const int r = 16 * w + g + 8 * (i % 4 / 2), n = 8 * (i / 4) + 2 * q + i % 2;
      ASSERT_EQ(S[th][i], static_cast<float>(Sr[r][n])) << "S, thread " << th << " element " << i;
    }
    for (int i = 0; i < DV / 2; ++i) {
      const int r = 16 * w + g + 8 * (i % 4 / 2), d = 8 * (i / 4) + 2 * q + i % 2;
      double acc = 0;
      for (int j = 0; j < N; ++j) acc += bf16_bits_to_f32(f64_to_bf16_bits(static_cast<float>(Sr[r][j]))) * V[j][d];
      ASSERT_NEAR(O[th][i], acc, 1e-6 * std::max(1.0, std::fabs(acc))) << "O, thread " << th << " element " << i;
      const int cb = i / 32, ii = i % 32, d2 = 64 * cb + 8 * (ii / 4) + 2 * q + ii % 2;
      double ex = 0;
      for (int j = 0; j < N; ++j) ex += X[r][j] * V[j][d2];
      ASSERT_EQ(E[th][i], static_cast<float>(ex)) << "E, thread " << th << " element " << i;
    }
  }
}

// The wgmma model's own checks: a batch without wgmma.fence, a tile cp.async wrote read without the
// writer's fence.proxy.async, an accumulator read before the wait (NaN), an operand overwritten
// before the wait, a word st.shared wrote read without the writer's fence (and with it; and fenced
// with no barrier since), the A registers of a register-operand wgmma changed before its wait.
TEST(MmaEmulator, RejectsWgmmaMisuse) {
  auto run = [](int mode) {
    hzt::emu::Cta c(128, 1024 + 2 * 64 * 64 * 2);  // two swizzled tiles of 64 rows (128 bytes each)
    float seen = 0;
    c.run([&](hzt::emu::Thread& t) {
      uint16_t* sA = reinterpret_cast<uint16_t*>(mma::align_1k(t, c.smem()));
      uint16_t* sB = sA + 64 * 64;
      const uint16_t* src = reinterpret_cast<const uint16_t*>(c.smem());  // any 16 readable bytes
      for (int ch = t.tid(); ch < 2 * 64 * 8; ch += 128) t.cp_async16(sA + 8 * ch, src, false);  // zeros
      t.cp_commit();
      t.cp_wait<0>();
      if (mode != 1) t.fence_proxy_async();
      t.sync();
      const bool st = mode == 5 || mode == 6 || mode == 8;
      if (st && t.tid() == 7) {  // a word of B that the product reads, by st.shared, fenced (6) or not (5)
        t.store_shared(reinterpret_cast<uint32_t*>(sB + mma::sw_offset(2, 6, 64)), 0x3f803f80u);
        if (mode == 6 || mode == 8) t.fence_proxy_async();
      }
      if (st && mode != 8) t.sync();
      float s[8][4];
      if (mode != 0) t.wg_fence();
      mma::wg_issue_nt<16, 64>(t, s, t.smem_u32(sA), 64, 0, t.smem_u32(sB), 64, false);
      t.wg_commit();
      if (mode == 2 && t.tid() == 5) seen = s[3][1];
      if (mode == 3 && t.tid() == 0) sB[0] = 0x3f80;
      t.wg_wait<0>();
      if (mode == 4 && t.tid() == 5) seen = s[3][1];
      if (mode == 7) {  // a register-A product whose A thread 9 changes while it is in flight
        uint32_t a[4] = {0x3f803f80u, 0, 0, 0};
        float o[8][4] = {};
        t.wg_fence();
        t.wgmma_rs<64>(o, a, mma::desc_mn(t.smem_u32(sB), 64, 0), 1);
        t.wg_commit();
        if (t.tid() == 9) a[2] = 1;
        t.wg_wait<0>();
      }
    });
    return seen;
  };
  EXPECT_THROW(run(0), std::runtime_error);
  EXPECT_THROW(run(1), std::runtime_error);
  EXPECT_TRUE(std::isnan(run(2)));
  EXPECT_THROW(run(3), std::runtime_error);
  EXPECT_EQ(run(4), 0.0f);
  try {
    run(5);
    ADD_FAILURE() << "an unfenced st.shared word was read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("thread 7 wrote"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(run(6));
  try {
    run(7);
    ADD_FAILURE() << "A registers changed in flight";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("thread 9 changed its A registers"), std::string::npos) << e.what();
  }
  try {
    run(8);
    ADD_FAILURE() << "a fenced st.shared word was read with no barrier since";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("thread 7 wrote and fenced, with no block barrier since"), std::string::npos)
        << e.what();
  }
}

// Hopper's asynchronous pipeline as the emulator models it (mma_emulator.h): a producer warp whose
// lane 0 fills two stages by bulk tensor copies (64 x 128 boxes as two 64-column boxes, rows past
// the tensor's end and before its start zero) completing on "full" mbarriers with their byte
// counts, a warpgroup that waits on them, copies each tile out through sw_offset and frees the stage
// on an "empty" mbarrier; six tiles, so each stage's barriers go through three phases. The boxes
// equal load_tile_sw's tiles (cp.async into the same swizzle) byte for byte. Misuse: a consumer
// that does not wait, a producer that does not wait for the stage to be free, the wrong parity, too
// few expected bytes (the phase never completes: a deadlock), a barrier used before a block barrier
// followed its init.
TEST(MmaEmulator, MbarriersAndBulkCopiesOrderAPipeline) {
  constexpr int kCols = 128, kRows = 100, kMats = 2, kTiles = 6;
  std::vector<uint16_t> g(static_cast<size_t>(kMats) * kRows * kCols);
  for (size_t i = 0; i < g.size(); ++i) g[i] = f32_to_bf16_bits(static_cast<float>(i % 251) - 125.0f);
  mma::TileMap map;
  hzt::emu::encode_tile_map(&map, g.data(), kCols, kRows, kMats, 64);
  const int row0s[3] = {0, 64, -8};
  auto want = [&](int t, int r, int c) -> uint16_t {
    const int gr = row0s[t / 2] + r;
    return gr < 0 || gr >= kRows ? 0 : g[(static_cast<size_t>(t % 2) * kRows + gr) * kCols + c];
  };
  // mode 0: right; 1: a consumer skips the full wait; 2: the producer skips the empty wait; 3: the
  // full wait's parity flipped; 4: half the bytes expected; 5: no block barrier after the inits
  auto run = [&](int mode, uint64_t seed) {
    std::vector<uint16_t> out(static_cast<size_t>(kTiles) * 64 * kCols, 0x7fff);
    hzt::emu::Cta c(160, 1024 + 2 * 64 * kCols * 2 + 64, seed);
    c.run([&](hzt::emu::Thread& t) {
      uint16_t* st = reinterpret_cast<uint16_t*>(mma::align_1k(t, c.smem()));
      uint64_t* full = reinterpret_cast<uint64_t*>(st + 2 * 64 * kCols);
      uint64_t* empty = full + 2;
      if (t.tid() == 0) {
        for (int s = 0; s < 2; ++s) {
          t.mbar_init(full + s, 1);
          t.mbar_init(empty + s, 128);
        }
        t.mbar_fence_init();
      }
      if (mode != 5) t.sync();
      if (t.tid() >= 128) {  // the producer warp: lane 0 issues
        if (t.tid() != 128) return;
        for (int k = 0; k < kTiles; ++k) {
          const int s = k % 2;
          if (mode != 2) t.mbar_wait(empty + s, ((k / 2) & 1) ^ 1);
          t.mbar_arrive_expect_tx(full + s, (mode == 4 ? 1 : 2) * 64 * 64 * 2);
          for (int cb = 0; cb < 2; ++cb) t.tma_load(st + s * 64 * kCols + cb * 64 * 64, &map, 64 * cb, row0s[k / 2], k % 2, full + s);
        }
        return;
      }
      for (int k = 0; k < kTiles; ++k) {
        const int s = k % 2;
        if (mode != 1 || t.tid() != 5) t.mbar_wait(full + s, ((k / 2) & 1) ^ (mode == 3 ? 1 : 0));
        for (int e = t.tid(); e < 64 * kCols; e += 128)
          out[static_cast<size_t>(k) * 64 * kCols + e] = st[s * 64 * kCols + mma::sw_offset(e / kCols, e % kCols, 64)];
        t.mbar_arrive(empty + s);
      }
    });
    for (int k = 0; k < kTiles; ++k)
      for (int r = 0; r < 64; ++r)
        for (int cc = 0; cc < kCols; ++cc)
          if (out[(static_cast<size_t>(k) * 64 + r) * kCols + cc] != want(k, r, cc)) return false;
    return true;
  };
  for (uint64_t seed : {1, 2, 3}) EXPECT_TRUE(run(0, seed)) << "seed " << seed;
  auto caught = [&](int mode, uint64_t seed) {  // a wrong tile or a reported error (a deadlock)
    try {
      return !run(mode, seed);
    } catch (const std::runtime_error&) {
      return true;
    }
  };
  EXPECT_TRUE(caught(1, 1));
  EXPECT_TRUE(caught(2, 1) || caught(2, 2) || caught(2, 3));
  EXPECT_TRUE(caught(3, 1));
  try {
    run(4, 1);
    ADD_FAILURE() << "a phase with bytes still expected completed";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
  }
  try {
    run(5, 3);  // greedy: warp 0 runs first, its thread 0 initialises, thread 1 uses the barrier
    ADD_FAILURE() << "an mbarrier was used before a block barrier followed its init";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("initialised, with no block barrier since"), std::string::npos) << e.what();
  }
  // the boxes against load_tile_sw (cp.async, every thread) of the same tiles
  for (int k = 0; k < kTiles; ++k) {
    SCOPED_TRACE("tile " + std::to_string(k));
    hzt::emu::Cta c(128, 1024 + 2 * 64 * kCols * 2 + 64);
    bool same = false;
    c.run([&](hzt::emu::Thread& t) {
      uint16_t* a = reinterpret_cast<uint16_t*>(mma::align_1k(t, c.smem()));
      uint16_t* b = a + 64 * kCols;
      uint64_t* bar = reinterpret_cast<uint64_t*>(b + 64 * kCols);
      if (t.tid() == 0) {
        t.mbar_init(bar, 1);
        t.mbar_arrive_expect_tx(bar, 64 * kCols * 2);
        for (int cb = 0; cb < 2; ++cb) t.tma_load(a + cb * 64 * 64, &map, 64 * cb, row0s[k / 2], k % 2, bar);
      }
      mma::load_tile_sw<kCols>(t, b, g.data() + static_cast<size_t>(k % 2) * kRows * kCols, row0s[k / 2], 64, kRows);
      t.cp_commit();
      t.cp_wait<0>();
      t.sync();
      t.mbar_wait(bar, 0);
      if (t.tid() == 0) same = std::memcmp(a, b, 64 * kCols * 2) == 0;
    });
    EXPECT_TRUE(same);
  }
}

// Named barriers (bar.sync / bar.arrive with a thread count): two warpgroups take turns, each
// waiting on its own barrier for the other's arrival (FlashAttention-3's ping-pong between
// warpgroups); the turns come out alternating. Counts that differ on one barrier are reported.
TEST(MmaEmulator, NamedBarriersAlternateTwoWarpgroups) {
  for (uint64_t seed : {1, 2, 3}) {
    std::vector<int> log;
    hzt::emu::Cta c(256, 64, seed);
    c.run([&](hzt::emu::Thread& t) {
      const int w = t.tid() / 128;
      if (w == 1) t.bar_arrive(1, 256);  // the first turn is warpgroup 0's
      for (int i = 0; i < 4; ++i) {
        t.bar_sync(1 + w, 256);
        if (t.tid() % 128 == 0) log.push_back(w);
        if (w == 0 || i < 3) t.bar_arrive(2 - w, 256);
      }
    });
    EXPECT_EQ(log, (std::vector<int>{0, 1, 0, 1, 0, 1, 0, 1})) << "seed " << seed;
  }
  hzt::emu::Cta c(256, 64);
  EXPECT_THROW(c.run([&](hzt::emu::Thread& t) { t.bar_sync(1, t.tid() < 128 ? 256 : 128); }), std::runtime_error);
}

// The kernels on Hopper's wgmma (attn_wgmma*.cu: the forward, dQ and dK/dV bodies with their
// products as warpgroup MMAs from swizzled tiles), both variants, against the CPU op at the bf16
// floor, and against the mma.sync kernels: the emulator forms both instructions' products in the same k-steps, so every
// output and gradient must be the same bits (on a GPU the two may round apart). The forward with
// FlashAttention-3's intra-warpgroup overlap (the next block's S and the previous block's P V in
// flight during the softmax; two warpgroups of one m-tile each per CTA) against the one without:
// the same bits again, and its own query blocks' counts against the CPU op's at those tiles.
TEST(MmaEmulator, WgmmaKernelsMatchTheCpuOpAndTheMmaKernels) {
  std::vector<Problem> ps = emu_problems(64);
  Problem p;
  p.fox = p.sink = true, p.H = 4, p.Hkv = 2, p.B = 2, p.Tq = p.Tk = 107, p.mask = MaskKind::Window;
  ps.push_back(p);
  p = Problem{};
  p.H = 2, p.Hkv = 1, p.Tq = 30, p.Tk = 150;  // queries last
  ps.push_back(p);
  p = Problem{};
  p.H = 2, p.Hkv = 1, p.Tq = p.Tk = 150, p.docs = {{40, 110}}, p.pos = PosKind::Rope;  // packed documents
  ps.push_back(p);
  p = Problem{};
  p.H = 2, p.Hkv = 1, p.Tq = p.Tk = 140, p.D = 128, p.pos = PosKind::Alibi, p.logit = LogitKind::ScaleInvariant;
  ps.push_back(p);
  p.mask = MaskKind::Scope, p.pos = PosKind::Rope, p.logit = LogitKind::LogN, p.sink = true;
  ps.push_back(p);
  // up to five key blocks per query block (of 128 keys in the warp-specialised forward at D 64)
  // with every per-block table of the plain variant (the scale-invariant coefficients, FoX's c_j):
  // the stages are refilled while their tables matter
  p = Problem{};
  p.H = 2, p.Hkv = 1, p.Tq = p.Tk = 540, p.logit = LogitKind::ScaleInvariant, p.fox = true, p.pos = PosKind::Alibi;
  ps.push_back(p);
  // the general variant: token positions, sink tokens and chunks with FoX; GRAPE's rates with sink
  // tokens; a prefix beside sink tokens and a window at D 128, with sinks
  ps.push_back(general_problems()[6]);
  ps.push_back(grape_problems()[3]);
  p = general_problems()[4];
  p.D = 128, p.sink = true;
  ps.push_back(p);
  for (const Problem& x : ps) {
    SCOPED_TRACE(x.tag());
    const Inputs in = bf16_inputs(x, 71);
    const Result ref = run_op(x, in, DType::F64, Device::cpu(), AttnImpl::Auto, false);
    const Result low = naive(x, in, true);
    Kernels kn;
    kn.wgmma = true;
    kn.wg_forward = WgmmaForward::Serial;
    const bool gen = x.chunk > 0 || x.sink_tokens > 0 || x.prefix > 0 || x.drawn || x.dist > 0;
    auto run = [&](const Kernels& k) {
      if (gen) return x.D == 64 ? run_emulated<64, true>(x, in, k) : run_emulated<128, true>(x, in, k);
      return x.D == 64 ? run_emulated<64>(x, in, k) : run_emulated<128>(x, in, k);
    };
    const Emulated wg = run(kn), mm = run(Kernels{});
    expect_results(wg.r, low, ref, 3.0, 1e-3);
    expect_same_bits(wg, mm);
    using C64 = mma::Config<64>;
    using C128 = mma::Config<128>;
    const int rows = x.D == 64 ? 64 * C64::kFwdMTOverlap * C64::kFwdWGOverlap : 64 * C128::kFwdMTOverlap * C128::kFwdWGOverlap;
    const AttnStats want = cpu_counts(x, AttnTiles{rows, 64, 64, 64, true});
    for (WgmmaForward f : {WgmmaForward::Overlap, WgmmaForward::WarpSpecialized}) {
      SCOPED_TRACE(f == WgmmaForward::Overlap ? "the overlapped forward" : "the warp-specialised forward");
      kn.wg_forward = f;
      const Emulated ov = run(kn);
      // 64-key steps: the same bits; the warp-specialised forward's 128-key steps (D 64, plain
      // variant) take each row's maximum over 128 keys at once, so P rounds apart: the floors
      const bool keys128 = f == WgmmaForward::WarpSpecialized && !gen && x.D == 64 && C64::kFwdBkWs == 128;
      if (keys128) {
        expect_results(ov.r, low, ref, 3.0, 1e-3);
      } else {
        expect_same_bits(ov, wg, false);
      }
      EXPECT_EQ(ov.stats.fwd_blocks, want.fwd_blocks);  // counted in blocks of 64 keys
      EXPECT_EQ(ov.stats.fwd_boundary_blocks, want.fwd_boundary_blocks);
    }
  }
}

// FoX's forget gates in the tensor-core kernels: the block's c_j in shared memory (forward, dQ), the
// rows' and keys' c in the dK/dV kernel's per-pair data, dLoss/dc as row sums (dQ) and key sums
// written per query head (dK/dV, GQA: two heads per key block), with every mask, the transforms
// that read t or n, packed documents, Tq != Tk and ragged lengths.
TEST(MmaEmulator, ForgetGatesMatchTheCpuOp) {
  std::vector<Problem> ps;
  Problem p;
  p.fox = true;
  p.H = 4, p.Hkv = 2, p.Tq = p.Tk = 107;
  ps.push_back(p);
  p.mask = MaskKind::Window, p.pos = PosKind::Rope, p.logit = LogitKind::LogN;
  ps.push_back(p);
  p.mask = MaskKind::Scope, p.pos = PosKind::Alibi, p.logit = LogitKind::ScaleInvariant, p.Tq = p.Tk = 140;
  ps.push_back(p);
  p = Problem{};
  p.fox = true, p.H = 2, p.Hkv = 1, p.Tq = 30, p.Tk = 150, p.logit = LogitKind::SwanRow;  // queries last, 3 key blocks
  ps.push_back(p);
  p = Problem{};
  p.fox = true, p.B = 2, p.H = 2, p.Hkv = 1, p.Tq = p.Tk = 90, p.docs = {{20, 70}, {90}};
  ps.push_back(p);
  // with sinks (folded in the forward's epilogue, their gradient from the dQ pass) the rows' sums
  // of dS are not 0, so the dQ pass's part of dLoss/dc matters
  p = Problem{};
  p.fox = p.sink = true, p.H = 4, p.Hkv = 2, p.Tq = p.Tk = 107, p.mask = MaskKind::Window;
  ps.push_back(p);
  for (const Problem& x : ps) check<64>(x);
  p = ps[1];
  p.D = 128;
  check<128>(p);
}

// FoX gates that need no gradient (frozen gates, gradients of the inputs only): the kernels get
// no dfox buffers, write nothing there, and give the same out, lse, dq, dk and dv, bit for bit.
TEST(MmaEmulator, ForgetGatesWithoutTheirGradient) {
  Problem p;
  p.fox = p.sink = true;
  p.H = 4, p.Hkv = 2, p.Tq = p.Tk = 107, p.mask = MaskKind::Window;
  const Inputs in = bf16_inputs(p, 23);
  const Emulated with = run_emulated<64>(p, in), without = run_emulated<64>(p, in, {false});
  EXPECT_TRUE(without.r.df.empty());
  for (auto [a, b] : {std::pair{&with.r.out, &without.r.out}, {&with.r.lse, &without.r.lse}, {&with.r.dq, &without.r.dq},
                      {&with.r.dk, &without.r.dk}, {&with.r.dv, &without.r.dv}}) {
    ASSERT_EQ(a->size(), b->size());
    for (size_t i = 0; i < a->size(); ++i) ASSERT_EQ((*a)[i], (*b)[i]) << i;
  }
}

// Sinks in the tensor-core kernels: folded into the forward's epilogue (rows without keys: out 0,
// lse z_h; a sink far above or below the logits), their gradient from the dQ pass.
TEST(MmaEmulator, SinksMatchTheCpuOp) {
  std::vector<Problem> ps;
  Problem p;
  p.sink = true, p.H = 4, p.Hkv = 2, p.Tq = p.Tk = 100, p.mask = MaskKind::Scope, p.logit = LogitKind::LogN;
  ps.push_back(p);
  p = Problem{};
  // rows 0..199 see nothing: the first forward CTA (128 rows) returns early, the second is mixed
  p.sink = true, p.H = 2, p.Hkv = 1, p.Tq = p.Tk = 300, p.key_end = 40, p.min_distance = 200;
  ps.push_back(p);
  p = Problem{};
  p.sink = true, p.H = 2, p.Hkv = 1, p.Tq = 20, p.Tk = 150, p.pos = PosKind::Alibi, p.logit = LogitKind::ScaleInvariant;
  ps.push_back(p);
  for (const Problem& x : ps) check<64>(x);
  p.D = 128;
  check<128>(p);
}

TEST(MmaEmulator, EdgeShapes) {
  // Tq != Tk (queries last, and an explicit offset), rows without keys, GQA 4:1 with batch 2
  std::vector<Problem> ps;
  Problem p;
  p.B = 2, p.H = 4, p.Hkv = 1, p.Tq = p.Tk = 65, p.mask = MaskKind::Scope, p.logit = LogitKind::LogN;
  ps.push_back(p);
  p = Problem{};
  p.H = 2, p.Hkv = 2, p.Tq = 20, p.Tk = 150, p.mask = MaskKind::Window, p.pos = PosKind::Alibi,
  p.logit = LogitKind::ScaleInvariant;
  ps.push_back(p);
  p = Problem{};
  p.H = 2, p.Hkv = 1, p.Tq = 90, p.Tk = 70, p.q_offset = 10, p.logit = LogitKind::Temperature;
  ps.push_back(p);
  p = Problem{};
  p.H = 2, p.Hkv = 1, p.Tq = p.Tk = 140, p.key_end = 40, p.min_distance = 70;  // rows 0..69 see nothing
  ps.push_back(p);
  // every key block Full, the last one ragged: the kernels must still mask the keys beyond Tk
  p = Problem{};
  p.H = 2, p.Hkv = 1, p.Tq = 1, p.Tk = 70;  // decoding one token
  ps.push_back(p);
  p = Problem{};
  p.H = 2, p.Hkv = 1, p.Tq = 20, p.Tk = 70, p.q_offset = 100, p.logit = LogitKind::ScaleInvariant;
  ps.push_back(p);
  // four key blocks per query block: the double buffer is reused (a missing barrier races)
  p = Problem{};
  p.H = 2, p.Hkv = 1, p.Tq = p.Tk = 230, p.logit = LogitKind::ScaleInvariant, p.pos = PosKind::Alibi;
  ps.push_back(p);
  for (const Problem& x : ps) check<64>(x);
  p.D = 128;
  check<128>(p);
}

// The general variant (chunked attention, sink tokens, a prefix, token positions: a second interval
// per row, blocks visited out of order, distances read both ways or from positions) against the CPU
// op in float64 and the naive twin's precision floor, with the same block counts. T 150-200 with
// 64-key blocks: chunks and the prefix straddle blocks, the sink tokens' block lies far from the
// window's, the double buffer skips blocks between the intervals.
TEST(MmaEmulator, GeneralVariantMatchesTheCpuOp) {
  const std::vector<Problem> ps = general_problems();
  Problem p;
  for (const Problem& x : ps) check<64, true>(x);
  for (const size_t i : {size_t{1}, size_t{5}}) {
    p = ps[i];
    p.D = 128;
    check<128, true>(p);
  }
}

// GRAPE's additive term -|t| (dist_q_i + dist_k_j) in the general variant (the rows' and the keys'
// rates in shared memory, their gradients as the dQ pass's row sums and the dK/dV pass's key sums per
// query head) against the CPU op in float64 at the naive twin's bf16 floor, the rates' gradients
// included: key rates alone, query rates alone and both, beside ALiBi, FoX, sinks, a window, a prefix
// (distances both ways) and token positions, with GQA and Tq != Tk.
TEST(MmaEmulator, GrapeRatesInTheGeneralVariantMatchTheCpuOp) {
  const std::vector<Problem> ps = grape_problems();
  Problem p;
  for (const Problem& x : ps) check<64, true>(x);
  for (const size_t i : {size_t{1}, size_t{3}}) {
    p = ps[i];
    p.D = 128;
    check<128, true>(p);
  }
}

// The general variant on plain problems gives the plain variant's results bit for bit: its extra
// terms vanish when there is no second interval and no token positions.
TEST(MmaEmulator, GeneralVariantEqualsThePlainOneOnPlainProblems) {
  std::vector<Problem> ps;
  Problem p;
  p.H = 4, p.Hkv = 2, p.Tq = p.Tk = 107, p.mask = MaskKind::Scope, p.pos = PosKind::Alibi,
  p.logit = LogitKind::ScaleInvariant, p.fox = p.sink = true;
  ps.push_back(p);
  p = Problem{};
  p.B = 2, p.H = 2, p.Hkv = 1, p.Tq = p.Tk = 90, p.docs = {{20, 70}, {90}}, p.logit = LogitKind::LogN;
  ps.push_back(p);
  for (const Problem& x : ps) {
    SCOPED_TRACE(x.tag());
    const Inputs in = bf16_inputs(x, 29);
    const Emulated plain = run_emulated<64, false>(x, in), general = run_emulated<64, true>(x, in);
    for (auto [a, b] : {std::pair{&plain.r.out, &general.r.out}, {&plain.r.lse, &general.r.lse},
                        {&plain.r.dq, &general.r.dq}, {&plain.r.dk, &general.r.dk}, {&plain.r.dv, &general.r.dv},
                        {&plain.r.dc, &general.r.dc}, {&plain.r.df, &general.r.df}, {&plain.r.dz, &general.r.dz}}) {
      ASSERT_EQ(a->size(), b->size());
      for (size_t i = 0; i < a->size(); ++i) ASSERT_EQ((*a)[i], (*b)[i]) << i;
    }
    EXPECT_EQ(plain.stats.fwd_blocks, general.stats.fwd_blocks);
    EXPECT_EQ(plain.stats.bwd_blocks, general.stats.bwd_blocks);
  }
}
