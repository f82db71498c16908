// Horizon: the fused attention op — argument checks, planning (AttnKernelParams), dispatch by
// device and the autograd node. The kernels: fused_cpu.cpp (CPU) and attention/cuda/ (CUDA); the
// arithmetic they share: tiling.h.
#include "attention/fused.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "attention/fused_kernels.h"
#include "attention/partial.h"
#include "autograd/functions.h"
#include "core/device.h"
#include "core/ops.h"

namespace hz::attn {

int64_t head_reach(const AttnConfig& cfg, size_t h) {
  return terms_reach(LowerTerms{}, cfg, static_cast<int64_t>(h));  // the nearest of the terms' reaches (tiling.h)
}

int64_t max_reach(const AttnConfig& cfg) {
  int64_t r = 0;
  for (size_t h = 0; h < cfg.window.size(); ++h) {
    const int64_t x = head_reach(cfg, h);
    if (x <= 0) return 0;  // an unbounded head
    r = std::max(r, x);
  }
  return r;
}

bool sinks_pinnable(const AttnConfig& cfg, bool forget) {
  return cfg.sink_tokens > 0 && cfg.chunk == 0 && cfg.prefix == 0 && !cfg.documents && !forget;
}

AttnConfig make_attn_config(const AttentionSpec& spec, int64_t n_heads, int64_t T, int64_t train_len) {
  AttnConfig cfg;
  cfg.window = spec.windows(n_heads, T);
  cfg.chunk = spec.mask.chunk;
  cfg.sink_tokens = spec.mask.sink_tokens;
  cfg.prefix = spec.mask.prefix;
  // ALiBi as the position encoding, or beside another one (additive: alibi): the same fixed slopes
  if (spec.pos.kind == PosKind::Alibi || spec.additive == AdditiveKind::Alibi) cfg.alibi_slope = alibi_slopes(n_heads);
  if (spec.diff) {  // DIFF V2: attention heads 2h and 2h+1 share output head h's window and slope
    auto pairs = [](const auto& v) {
      std::decay_t<decltype(v)> out;
      for (const auto& x : v) out.insert(out.end(), {x, x});
      return out;
    };
    cfg.window = pairs(cfg.window);
    cfg.alibi_slope = pairs(cfg.alibi_slope);
  }
  cfg.logit = spec.logit.kind;
  cfg.tau = spec.logit.tau;
  cfg.swan_a = spec.logit.swan_a;
  const double s = train_len > 0 ? static_cast<double>(T) / static_cast<double>(train_len) : 1.0;
  cfg.beta = spec.logit.temp_c != 0.0 ? temperature_beta(spec.logit.temp_c, s) : spec.logit.beta;
  cfg.temp_c = spec.logit.temp_c;
  cfg.train_len = train_len;
  cfg.logn_position = spec.logit.logn_position;
  cfg.qtemp_alpha = spec.logit.qtemp_alpha;
  cfg.qtemp_beta = spec.logit.qtemp_beta;
  return cfg;
}

AttnKernelParams make_kernel_params(const AttnConfig& cfg, int64_t B, int64_t H, int64_t Hkv, int64_t Tq,
                                    int64_t Tk, int64_t D) {
  HZ_CHECK(H > 0 && Hkv > 0 && H % Hkv == 0, ShapeError, "attention: n_heads (", H,
           ") must be a positive multiple of n_kv_heads (", Hkv, ")");
  HZ_CHECK(H <= kMaxAttnHeads, ShapeError, "attention: ", H, " query heads; the fused op takes at most ",
           kMaxAttnHeads, " (attention/tiling.h kMaxAttnHeads)");
  HZ_CHECK(cfg.min_distance >= 0, ValueError,
           "attention: min_distance must be >= 0 (keys after the query are never visible)");
  HZ_CHECK(cfg.q_offset >= 0 || Tq <= Tk, ShapeError, "attention: Tq (", Tq, ") > Tk (", Tk,
           ") needs an explicit q_offset (the absolute position of query 0)");
  HZ_CHECK(cfg.window.empty() || static_cast<int64_t>(cfg.window.size()) == H, ShapeError, "attention: ",
           cfg.window.size(), " windows for ", H, " query heads");
  HZ_CHECK(cfg.alibi_slope.empty() || static_cast<int64_t>(cfg.alibi_slope.size()) == H, ShapeError,
           "attention: ", cfg.alibi_slope.size(), " ALiBi slopes for ", H, " query heads");
  AttnKernelParams p;
  p.B = B;
  p.H = H;
  p.Hkv = Hkv;
  p.G = H / Hkv;
  p.Tq = Tq;
  p.Tk = Tk;
  p.D = D;
  p.q_offset = cfg.q_offset < 0 ? Tk - Tq : cfg.q_offset;
  p.key_begin = std::max<int64_t>(0, cfg.key_begin);
  p.key_end = cfg.key_end < 0 ? Tk : std::min(cfg.key_end, Tk);
  p.min_distance = cfg.min_distance;
  HZ_CHECK(cfg.chunk >= 0, ValueError, "attention: chunk ", cfg.chunk, " is negative; 0 turns it off");
  HZ_CHECK(cfg.chunk == 0 || cfg.min_distance == 0, ValueError, "attention: chunked attention needs min_distance 0");
  p.chunk = cfg.chunk;
  HZ_CHECK(cfg.sink_tokens >= 0, ValueError, "attention: sink_tokens ", cfg.sink_tokens, " is negative; 0 turns them off");
  p.sink_tokens = cfg.sink_tokens;
  HZ_CHECK(cfg.prefix >= 0, ValueError, "attention: prefix ", cfg.prefix, " is negative; 0 turns it off");
  if (cfg.prefix > 0)  // tiling.h's prefix arithmetic assumes the call's queries are its last keys
    HZ_CHECK(cfg.min_distance == 0 && p.key_begin == 0 && p.q_offset + Tq == p.key_end, ValueError,
             "attention: a prefix-LM call needs min_distance 0, the keys from 0 and the queries last among them (got "
             "min_distance ", cfg.min_distance, ", keys [", p.key_begin, ", ", p.key_end, "), queries at ", p.q_offset,
             "..", p.q_offset + Tq - 1, "); context parallelism and LaMPE regions do not take it");
  p.prefix = cfg.prefix;
  p.block_q = cfg.block_q > 0 ? cfg.block_q : 64;  // the CUDA reference kernels' (call_params: the CPU's)
  p.block_k = cfg.block_k > 0 ? cfg.block_k : 64;
  p.logit = cfg.logit;
  p.alibi = !cfg.alibi_slope.empty();
  p.scale = cfg.scale > 0 ? cfg.scale : 1.0 / std::sqrt(static_cast<double>(D));
  p.tau = cfg.tau;
  p.swan_a = cfg.swan_a;
  p.beta = cfg.beta;
  for (int64_t h = 0; h < H; ++h) {
    p.window[h] = cfg.window.empty() ? 0 : cfg.window[h];
    HZ_CHECK(p.window[h] >= 0, ValueError, "attention: window of head ", h, " is ", p.window[h],
             "; use 0 for unbounded");
    p.slope[h] = p.alibi ? cfg.alibi_slope[h] : 0.0;
  }
  if (cfg.logit == LogitKind::ScaleInvariant)
    HZ_CHECK(cfg.tau > 0, ValueError, "attention: scale_invariant tau must be positive");
  if (cfg.logit == LogitKind::SwanRow)
    HZ_CHECK(cfg.swan_a > 1, ValueError, "attention: swan_row a must be > 1");
  HZ_CHECK(cfg.key_position >= 0, ValueError, "attention: key_position ", cfg.key_position, " is negative");
  p.key_position = cfg.key_position;
  p.fox_T = Tk;
  p.logn_whole_row = cfg.logn_whole_row;
  HZ_CHECK(cfg.qtemp_alpha >= 0 && cfg.qtemp_beta > 0, ValueError, "attention: qtemp_alpha must be >= 0 and qtemp_beta > 0");
  p.logn_position = cfg.logn_position;
  p.qtemp_alpha = cfg.qtemp_alpha;
  p.qtemp_beta = cfg.qtemp_beta;
  p.temp_c = cfg.temp_c;
  p.temp_train_len = cfg.train_len;
  if (cfg.positions.defined()) {
    const Tensor& t = cfg.positions;
    HZ_CHECK(!cfg.documents, ValueError, "attention: token positions and packed documents do not combine (the "
             "documents define the positions)");
    HZ_CHECK(t.dim() == 2 && t.size(0) == B && t.dtype() == DType::F64, ShapeError,
             "attention: token positions must be (B, N) f64 with B = ", B, ", got ", shape_str(t.shape()), " ",
             dtype_name(t.dtype()));
    HZ_CHECK(cfg.key_position + std::max(Tk, p.q_offset + Tq) <= t.size(1), ShapeError, "attention: ", t.size(1),
             " token positions per sequence; the keys and queries reach index ",
             cfg.key_position + std::max(Tk, p.q_offset + Tq) - 1);
    p.positions_T = t.size(1);
    // host pointers (planning, tests); call_params points the kernels at the device's contiguous copy
    if (t.device().is_cpu() && t.is_contiguous()) p.positions = t.data<double>();
  }
  if (cfg.documents) {
    const Documents& d = *cfg.documents;
    HZ_CHECK(d.batch() == B && cfg.key_position + Tk <= d.seq_len(), ShapeError, "attention: documents of ",
             d.batch(), " x ", d.seq_len(), " tokens for a batch of ", B, " x ", Tk, " keys at key_position ",
             cfg.key_position);
    HZ_CHECK(cfg.key_position + p.q_offset + Tq <= d.seq_len(), ShapeError, "attention: documents of ", d.seq_len(),
             " positions, the queries reach position ", cfg.key_position + p.q_offset + Tq);
    HZ_CHECK(p.min_distance == 0, ValueError, "attention: documents need min_distance 0");
    const Tensor& bounds = d.bounds(Device::cpu());  // host pointers; fused_attention swaps in the device's
    p.doc_start = bounds.data<int32_t>();
    p.doc_end = p.doc_start + B * d.seq_len();
    p.doc_T = d.seq_len();
    p.pos_reset = d.position_reset();
  }
  return p;
}

std::string detail::env_choice(const char* name, std::initializer_list<const char*> choices) {
  const char* e = std::getenv(name);
  const std::string v = e != nullptr ? e : "";
  if (v.empty()) return v;
  for (const char* c : choices)
    if (v == c) return v;
  std::string expected;
  size_t i = 0;
  for (const char* c : choices) {
    if (i > 0) expected += i + 1 == choices.size() ? " or " : ", ";
    expected += c;
    ++i;
  }
  throw ValueError(std::string(name) + "='" + v + "': expected " + expected);
}

std::string detail::mma_choice() {
  return env_choice("HZ_ATTN_MMA", {"mma", "wgmma", "wgmma_overlap", "wgmma_serial"});
}

namespace {

AttnImpl env_impl() {
  const std::string s = detail::env_choice("HZ_ATTN_IMPL", {"auto", "reference", "tensor_core"});
  return s == "reference" ? AttnImpl::Reference : s == "tensor_core" ? AttnImpl::TensorCore : AttnImpl::Auto;
}

std::atomic<bool> g_exact_f32{false};

// Whether a call on CUDA device `dev` runs the tensor-core kernels.
bool use_tensor_core(const AttnConfig& cfg, DType dt, int64_t D, Device dev) {
  const AttnImpl impl = cfg.impl == AttnImpl::Auto ? env_impl() : cfg.impl;
  if (impl == AttnImpl::Auto && dt == DType::F32 && g_exact_f32) return false;  // run.exact_f32_attention
  const bool ok = detail::tensor_core_supported(dt, D, dev.index);
  HZ_CHECK(ok || impl != AttnImpl::TensorCore, NotImplementedError,
           "attention: the tensor-core kernels take bf16 or f32 q/k/v with head_dim 64 or 128 on an sm_80+ GPU "
           "(f32 at head_dim 128 needs 200 KB of shared memory per block: sm_90), got ",
           dtype_name(dt), " with head_dim ", D,
           "; use the reference kernels (AttnImpl::Reference or HZ_ATTN_IMPL=reference)");
  return impl != AttnImpl::Reference && ok;
}

Tensor as_f32(const Tensor& t) { return t.dtype() == DType::BF16 ? t.to(DType::F32) : t; }

std::atomic<int> g_backend{static_cast<int>(AttnBackend::Auto)};

// The kernels a call runs (CPU: the CPU kernel): cuDNN's where the backend allows and its plan
// takes the call (attention/backend.h), else Horizon's tensor-core or reference kernels.
struct Kernels {
  bool tc = false;
  bool cudnn = false;
  CudnnGraphDesc graph;
};
Kernels choose_kernels(const AttnConfig& cfg, const AttnKernelParams& P, DType dt, Device dev) {
  Kernels k;
  if (!dev.is_cuda()) return k;
  AttnBackend want = cfg.backend == AttnBackend::Auto ? attention_backend() : cfg.backend;
  // a config or HZ_ATTN_IMPL that names one of Horizon's kernel families asks for Horizon's kernels
  if (want == AttnBackend::Auto && (cfg.impl != AttnImpl::Auto || env_impl() != AttnImpl::Auto))
    want = AttnBackend::Horizon;
  if (want != AttnBackend::Horizon) {
    const CudnnPlan plan = cudnn_plan(P, dt);
    if (plan.ok && detail::cudnn_compiled()) {
      k.cudnn = true;
      k.graph = plan.graph;
      return k;
    }
    HZ_CHECK(want != AttnBackend::CuDNN, NotImplementedError, "attention: run.attention_backend is cudnn, but ",
             plan.ok ? std::string("this build has no cudnn-frontend (scripts/setup.sh installs its headers where "
                                   "nvcc is found; configure with -DHZ_CUDNN=ON)")
                     : "cuDNN cannot run this call: " + plan.why,
             "; use auto or horizon");
  }
  k.tc = use_tensor_core(cfg, dt, P.D, dev);
  return k;
}

}  // namespace

void set_attention_backend(AttnBackend b) { g_backend = static_cast<int>(b); }
bool one_pass_backward() { return detail::one_pass_backward(); }
bool use_wgmma(const AttnKernelParams& P, DType dt, Device dev) {
  return dev.is_cuda() && detail::use_wgmma(P, dt, dev.index);
}
WgmmaForward wgmma_forward() {
  const std::string m = detail::mma_choice();
  return m == "wgmma_serial" ? WgmmaForward::Serial : m == "wgmma_overlap" ? WgmmaForward::Overlap
                                                                           : WgmmaForward::WarpSpecialized;
}
std::string tensor_core_options(Device dev, DType dt, int64_t D) {
  if (!attn_tiles(AttnConfig{}, dev, dt, D).tensor_core) return "";
  AttnConfig cfg;
  cfg.window = {0};  // causal
  const AttnKernelParams P = make_kernel_params(cfg, 1, 1, 1, 128, 128, D);
  const WgmmaForward f = wgmma_forward();
  std::string s = !use_wgmma(P, dt, dev)                ? ""
                  : f == WgmmaForward::WarpSpecialized ? "wgmma (HZ_ATTN_MMA)"
                  : f == WgmmaForward::Overlap         ? "wgmma, forward overlapped without a producer (HZ_ATTN_MMA)"
                                                       : "wgmma, forward without overlap (HZ_ATTN_MMA)";
  if (one_pass_backward()) s += std::string(s.empty() ? "" : ", ") + "one-pass backward (HZ_ATTN_BACKWARD)";
  return s;
}
void set_exact_f32_attention(bool on) { g_exact_f32 = on; }
AttnBackend attention_backend() { return static_cast<AttnBackend>(g_backend.load()); }

// The CPU tiles follow the narrowest band the call has: a query tile of Bq rows under a window W
// touches Bq + W - 1 keys in blocks of Bk, so wide tiles waste most of their columns on a narrow
// window. Measured on a 2-core Xeon (horizon bench attention, T 8192, H 8, D 64, f32): a window of
// 128 ran in 70 ms with 64 x 64 tiles, 113 with 128 x 128, 146 with 128 x 256; windows of 512 to
// 2048 and SCOPE's mix ran fastest with 128 x 128; causal attention with 128 x 256 (6% over 128).
namespace {
enum class CpuBand { Narrow, Mixed, Wide };  // every head <= 256 | some head <= 2048 | none
CpuBand cpu_band(const AttnConfig& cfg) {
  bool all_narrow = !cfg.window.empty(), some_mid = false;
  for (int64_t w : cfg.window) {
    all_narrow = all_narrow && w > 0 && w <= 256;
    some_mid = some_mid || (w > 0 && w <= 2048);
  }
  return all_narrow ? CpuBand::Narrow : some_mid ? CpuBand::Mixed : CpuBand::Wide;
}
}  // namespace
int64_t cpu_block_q(const AttnConfig& cfg) {
  return cfg.block_q > 0 ? cfg.block_q : cpu_band(cfg) == CpuBand::Narrow ? 64 : 128;
}
int64_t cpu_block_k(const AttnConfig& cfg, int64_t Tk) {
  if (cfg.block_k > 0) return cfg.block_k;
  switch (cpu_band(cfg)) {
    case CpuBand::Narrow: return 64;
    case CpuBand::Mixed: return 128;
    default: return Tk >= 4096 ? 256 : 128;
  }
}

Tensor pinned_sink_positions(const Tensor& seq, int64_t B, int64_t S, int64_t first, int64_t n, Device dev) {
  HZ_CHECK(S >= 0 && n >= 0 && first >= S, ValueError, "attention: pinned sinks [0, ", S, ") and keys from ", first);
  Tensor out = Tensor::empty({B, S + n}, DType::F64, dev);
  Tensor sinks = out.narrow(1, 0, S), rest = out.narrow(1, S, n);
  if (seq.defined()) {
    sinks.copy_(seq.narrow(1, 0, S));
    rest.copy_(seq.narrow(1, first, n));
  } else {
    sinks.copy_(Tensor::arange(0, S, 1, DType::F64, dev).view({1, S}));
    rest.copy_(Tensor::arange(first, first + n, 1, DType::F64, dev).view({1, n}));
  }
  return out;
}

AttnTiles attn_tiles(const AttnConfig& cfg, Device dev, DType dt, int64_t D, int64_t Tk) {
  if (dev.is_cuda() && use_tensor_core(cfg, dt, D, dev)) return detail::tensor_core_tiles(dt, D, dev.index);
  const int64_t bq = dev.is_cpu() ? cpu_block_q(cfg) : cfg.block_q > 0 ? cfg.block_q : 64;
  const int64_t bk = dev.is_cpu() ? cpu_block_k(cfg, Tk) : cfg.block_k > 0 ? cfg.block_k : 64;
  return {bq, bk, bq, bk, false};
}

AttnStats attn_stats() {
  AttnStats s = detail::cpu_stats();
  if (cuda::compiled()) {
    const AttnStats c = detail::cuda_stats();
    s.fwd_blocks += c.fwd_blocks;
    s.fwd_boundary_blocks += c.fwd_boundary_blocks;
    s.bwd_blocks += c.bwd_blocks;
  }
  return s;
}
void reset_attn_stats() {
  detail::cpu_reset_stats();
  if (cuda::compiled()) detail::cuda_reset_stats();
}

namespace {

// What one call hands the kernels besides q, k, v: the CPU kernel's host terms, or on CUDA LogN's c
// and the sink as device tensors in the accumulation dtype; FoX's c (ct.fox_c) in f64 for the CPU
// kernel, in the accumulation dtype for the CUDA kernels.
struct KernelTerms {
  detail::CpuTerms ct;
  Tensor c_dev, z_dev;
};

// The kernel's dtype on a device: f32 for bf16 on the CPU (the CPU kernel computes in f32), else
// the storage dtype.
DType kernel_dtype(DType dt, Device dev) { return dev.is_cpu() && dt == DType::BF16 ? DType::F32 : dt; }

// The forward kernels of one nonempty call (q/k/v contiguous, in their storage dtype): returns out
// in the kernel dtype, with the sink folded in; lse (B, H, Tq) in the accumulation dtype.
Tensor run_forward(const AttnKernelParams& P, const Kernels& kn, const Tensor& qc, const Tensor& kc, const Tensor& vc,
                   const KernelTerms& t, Tensor& lse) {
  const Device dev = qc.device();
  const bool use_tc = kn.tc;
  ProfileScope profile(dev.is_cpu() ? "attention forward" : kn.cudnn ? "attention forward (cuDNN)"
                                                          : use_tc   ? "attention forward (tensor cores)"
                                                                     : "attention forward (reference kernels)",
                       dev);
  Tensor out = Tensor::empty(qc.shape(), kernel_dtype(qc.dtype(), dev), dev);
  lse = Tensor::empty({P.B, P.H, P.Tq}, acc_dtype(qc.dtype()), dev);
  if (dev.is_cpu()) {
    detail::cpu_forward(P, as_f32(qc), as_f32(kc), as_f32(vc), t.ct, out, lse);
  } else if (kn.cudnn) {  // the sinks inside cuDNN's softmax, lse included
    detail::cudnn_forward(P, kn.graph, qc, kc, vc, P.sink ? t.z_dev : Tensor(), out, lse);
  } else {
    // sinks: the tensor-core epilogue folds them; around the reference kernels fold_sink does
    detail::cuda_forward(P, use_tc, qc, kc, vc, t.c_dev, t.ct.fox_c, P.sink && use_tc ? t.z_dev : Tensor(), out, lse);
    if (P.sink && !use_tc) fold_sink(t.z_dev, out, lse);
  }
  return out;
}

// Gradients of one call: dq, dk, dv in the kernel dtype; dc (LogN's c) and dz (the sinks), (H),
// df (FoX's dLoss/dc, (B, H, fox_T) in ct.fox_c's dtype) and GRAPE's rates' ddq (B, H, Tq) and ddk
// (B, H, Tk) (f64 on the CPU, the accumulation dtype on CUDA), each only where asked.
struct KernelGrads {
  Tensor dq, dk, dv, dc, dz, df, ddq, ddk;
};

// The backward kernels of one nonempty call given its rows' out (kernel dtype) and lse; dc and dz
// come back on the op's device in the accumulation dtype (CPU: f64).
KernelGrads run_backward(const AttnKernelParams& P, const Kernels& kn, const Tensor& qc, const Tensor& kc,
                         const Tensor& vc, const Tensor& out, const Tensor& lse, const Tensor& gc, const KernelTerms& t,
                         bool need_c, bool need_z, bool need_f, bool need_dq = false, bool need_dk = false) {
  const Device dev = qc.device();
  const bool use_tc = kn.tc;
  ProfileScope profile(dev.is_cpu() ? "attention backward" : kn.cudnn ? "attention backward (cuDNN)"
                                                           : use_tc   ? "attention backward (tensor cores)"
                                                                      : "attention backward (reference kernels)",
                       dev);
  const DType kdt = kernel_dtype(qc.dtype(), dev);
  KernelGrads g;
  g.dq = Tensor::empty(qc.shape(), kdt, dev);
  g.dk = Tensor::empty(kc.shape(), kdt, dev);
  g.dv = Tensor::empty(kc.shape(), kdt, dev);
  if (kn.cudnn) {  // cudnn_plan took no LogN c and no FoX gates
    Tensor dz = P.sink ? Tensor::empty({P.H}, DType::F32, dev) : Tensor();
    detail::cudnn_backward(P, kn.graph, qc, kc, vc, out, lse, gc, P.sink ? t.z_dev : Tensor(), g.dq, g.dk, g.dv,
                           P.sink ? &dz : nullptr);
    if (need_z) g.dz = dz;
    return g;
  }
  if (dev.is_cpu()) {
    std::vector<double> dcv, dzv;
    if (need_f) g.df = Tensor::empty({P.B, P.H, P.fox_T}, DType::F64);
    if (need_dq) g.ddq = Tensor::empty({P.B, P.H, P.Tq}, DType::F64);
    if (need_dk) g.ddk = Tensor::empty({P.B, P.H, P.Tk}, DType::F64);
    detail::CpuTermGrads tg;
    tg.dist_q = need_dq ? &g.ddq : nullptr;
    tg.dist_k = need_dk ? &g.ddk : nullptr;
    tg.logn_c = need_c ? &dcv : nullptr;
    tg.sink = need_z ? &dzv : nullptr;
    tg.fox_c = need_f ? &g.df : nullptr;
    detail::cpu_backward(P, as_f32(qc), as_f32(kc), as_f32(vc), out, lse, as_f32(gc), t.ct, g.dq, g.dk, g.dv, tg);
    if (need_c) g.dc = Tensor::from_vector(dcv, {P.H}, DType::F64);
    if (need_z) g.dz = Tensor::from_vector(dzv, {P.H}, DType::F64);
    return g;
  }
  Tensor dc_rows, dfq, dfk, dz_rows;
  const bool tc_z = need_z && use_tc;  // the tensor-core dQ pass gives the sinks' per-row gradient
  detail::cuda_backward(P, use_tc, qc, kc, vc, out, lse, gc, t.c_dev, t.ct.fox_c, tc_z ? t.z_dev : Tensor(), g.dq, g.dk,
                        g.dv, need_c ? &dc_rows : nullptr, need_f ? &dfq : nullptr, need_f ? &dfk : nullptr,
                        tc_z ? &dz_rows : nullptr, need_dq ? &g.ddq : nullptr, need_dk ? &g.ddk : nullptr);
  if (need_f) {  // dLoss/dc_m = sum_j dL_mj (m a query's position) - sum_i dL_im
    g.df = Tensor::zeros({P.B, P.H, P.fox_T}, dfk.dtype(), dev);
    Tensor keys = g.df.narrow(2, 0, P.Tk), rows = g.df.narrow(2, P.q_offset, P.Tq);
    keys.copy_(dfk);
    rows.copy_(ops::add(rows, dfq));
  }
  // per-row partials summed over rows, then over the batch, in a fixed order
  if (need_c) g.dc = ops::sum(ops::sum(dc_rows, 2, false), 0, false);
  if (need_z) g.dz = tc_z ? ops::sum(ops::sum(dz_rows, 2, false), 0, false) : sink_grad(t.z_dev, lse, out, gc);
  return g;
}

// Checks shared by fused_attention and the piece API: shapes, dtypes, devices.
void check_qkv(const Tensor& qv, const Tensor& kv, const Tensor& vv) {
  HZ_CHECK(qv.dim() == 4 && kv.dim() == 4 && vv.dim() == 4, ShapeError,
           "attention: q, k, v must be (B, H, T, D); got ", shape_str(qv.shape()), ", ",
           shape_str(kv.shape()), ", ", shape_str(vv.shape()));
  HZ_CHECK(kv.shape() == vv.shape(), ShapeError, "attention: k ", shape_str(kv.shape()),
           " and v ", shape_str(vv.shape()), " must match");
  HZ_CHECK(qv.size(0) == kv.size(0) && qv.size(3) == kv.size(3), ShapeError,
           "attention: q ", shape_str(qv.shape()), " and k ", shape_str(kv.shape()),
           " differ in batch or head_dim");
  HZ_CHECK(qv.size(1) % kv.size(1) == 0, ShapeError, "attention: n_heads (", qv.size(1),
           ") must be divisible by n_kv_heads (", kv.size(1), ")");
  HZ_CHECK(qv.dtype() == kv.dtype() && kv.dtype() == vv.dtype(), DTypeError,
           "attention: q, k, v dtypes differ (", dtype_name(qv.dtype()), ", ", dtype_name(kv.dtype()), ", ",
           dtype_name(vv.dtype()), "); cast them to one dtype");
  HZ_CHECK(is_floating(qv.dtype()), DTypeError, "attention: q, k, v must be f32, f64 or bf16, got ",
           dtype_name(qv.dtype()));
  HZ_CHECK(qv.device() == kv.device() && kv.device() == vv.device(), DeviceError,
           "attention: q, k, v live on different devices; move them to one with .to(device)");
}

// The tables a call's parameters point into on its device: the documents' bounds and the token
// positions (keep them alive while the parameters are used).
struct HeldTables {
  Tensor doc_bounds, positions, dist_q, dist_k;
};

// GRAPE's rates (AttnTerms::dist_q / dist_k) for the kernels: checked against the call's shapes, held
// in f64 on the call's device (the parameters point into them). Either may be undefined (0).
void set_dist(AttnKernelParams& P, HeldTables& held, const Tensor& dq, const Tensor& dk, Device dev) {
  auto one = [&](const Tensor& x, int64_t T, const char* what, Tensor& keep) -> const double* {
    if (!x.defined()) return nullptr;
    HZ_CHECK(x.shape() == Shape({P.B, P.H, T}) && is_floating(x.dtype()), ShapeError, "attention: ", what,
             " (GRAPE's additive rates) must be floating (B, H, ", what[5] == 'q' ? "Tq" : "Tk", ") = (", P.B, ", ",
             P.H, ", ", T, "), got ", shape_str(x.shape()), " ", dtype_name(x.dtype()));
    HZ_CHECK(x.device() == dev, DeviceError, "attention: ", what, " is on ", x.device().str(), ", the queries on ",
             dev.str());
    keep = x.to(DType::F64).contiguous();
    return keep.data<double>();
  };
  P.dist_q = one(dq, P.Tq, "dist_q", held.dist_q);
  P.dist_k = one(dk, P.Tk, "dist_k", held.dist_k);
  P.dist = P.dist_q != nullptr || P.dist_k != nullptr;
}

// The kernel parameters of a call with its tables on the call's device.
AttnKernelParams call_params(const AttnConfig& cfg, const Tensor& qc, const Tensor& kc, HeldTables& held) {
  AttnKernelParams P = make_kernel_params(cfg, qc.size(0), qc.size(1), kc.size(1), qc.size(2), kc.size(2),
                                          qc.size(3));
  if (qc.device().is_cpu()) {  // measured on a 2-core Xeon: 128 x 256 tiles ran causal attention at 8K
    P.block_q = cpu_block_q(cfg);  // keys 1.3x faster than 64 x 64 (scripts/bench/bench_terms.sh); narrow
    P.block_k = cpu_block_k(cfg, P.Tk);  // windows take smaller ones (cpu_block_k)
  }
  if (cfg.documents) {
    held.doc_bounds = cfg.documents->bounds(qc.device());
    P.doc_start = held.doc_bounds.data<int32_t>();
    P.doc_end = P.doc_start + P.B * P.doc_T;
  }
  if (cfg.positions.defined()) {
    held.positions = cfg.positions.to(qc.device()).contiguous();
    P.positions = held.positions.data<double>();
  }
  return P;
}

// LogN's c for the kernels of this device (a host vector on the CPU, a device tensor on CUDA).
void set_logn_c(KernelTerms& t, const Tensor& c, Device dev, DType adt) {
  if (dev.is_cpu()) t.ct.logn_c = c.to_vector();
  else t.c_dev = c.to(dev).to(adt).contiguous();
}

// FoX's c for a part (P.fox, P.fox_T, the kernels' copy in their dtype).
void set_part_fox(AttnKernelParams& P, KernelTerms& t, const Tensor& fox_c, Device dev, DType adt) {
  P.fox = fox_c.defined();
  if (!P.fox) return;
  HZ_CHECK(fox_c.dim() == 3 && fox_c.size(0) == P.B && fox_c.size(1) == P.H && fox_c.size(2) >= P.Tk &&
               fox_c.size(2) >= P.q_offset + P.Tq,
           ShapeError, "attention: FoX's c ", shape_str(fox_c.shape()), " does not cover the keys and the queries");
  HZ_CHECK(fox_c.device() == dev, DeviceError, "attention: FoX's c is on ", fox_c.device().str(), ", the queries on ",
           dev.str());
  P.fox_T = fox_c.size(2);
  t.ct.fox_c = fox_c.to(dev.is_cpu() ? DType::F64 : adt).contiguous();
}

}  // namespace

namespace {

// A part's inputs as the kernels take them (partial_attention and its backward share it).
struct PartCall {
  Tensor qc, kc, vc;
  HeldTables held;  // P points into them
  AttnKernelParams P;
  KernelTerms t;
  Device dev;
  DType dt, adt, kdt;
  Kernels kn;
  bool empty;
};
PartCall part_call(const AttnConfig& cfg, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& logn_c,
                     const Tensor& fox_c, const Tensor& dist_q, const Tensor& dist_k) {
  check_qkv(q, k, v);
  PartCall c;
  c.qc = q.contiguous();
  c.kc = k.contiguous();
  c.vc = v.contiguous();
  c.P = call_params(cfg, c.qc, c.kc, c.held);
  c.dev = c.qc.device();
  c.dt = c.qc.dtype();
  c.adt = acc_dtype(c.dt);
  c.kdt = kernel_dtype(c.dt, c.dev);
  if (cfg.logit == LogitKind::LogN) {
    HZ_CHECK(logn_c.defined() && logn_c.numel() == c.P.H, ShapeError, "attention: logit 'logn' needs one c per query head");
    set_logn_c(c.t, logn_c, c.dev, c.adt);
  }
  set_part_fox(c.P, c.t, fox_c, c.dev, c.adt);
  set_dist(c.P, c.held, dist_q, dist_k, c.dev);
  c.kn = choose_kernels(cfg, c.P, c.dt, c.dev);
  c.empty = c.qc.numel() == 0 || c.kc.numel() == 0;
  return c;
}

}  // namespace

Partial partial_attention(const AttnConfig& cfg, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& logn_c,
                          const Tensor& fox_c, const Tensor& dist_q, const Tensor& dist_k) {
  const PartCall c = part_call(cfg, q, k, v, logn_c, fox_c, dist_q, dist_k);
  Partial p;
  if (c.empty) {
    p.lse = Tensor::full({c.P.B, c.P.H, c.P.Tq}, -std::numeric_limits<double>::infinity(), c.adt, c.dev);
    p.out = Tensor::zeros(c.qc.shape(), c.adt, c.dev);
    return p;
  }
  const Tensor out = run_forward(c.P, c.kn, c.qc, c.kc, c.vc, c.t, p.lse);
  p.out = out.dtype() == c.adt ? out : out.to(c.adt);
  return p;
}

PartialGrads partial_attention_backward(const AttnConfig& cfg, const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor& out, const Tensor& lse, const Tensor& gout, const Tensor& logn_c,
                                        const Tensor& fox_c, bool want_c, const Tensor& dist_q,
                                        const Tensor& dist_k) {
  const PartCall c = part_call(cfg, q, k, v, logn_c, fox_c, dist_q, dist_k);
  const bool need_dq = dist_q.defined(), need_dk = dist_k.defined();
  const bool need_c = cfg.logit == LogitKind::LogN && want_c;
  PartialGrads g;
  if (c.empty) {
    g.dq = Tensor::zeros(c.qc.shape(), c.adt, c.dev);
    g.dk = Tensor::zeros(c.kc.shape(), c.adt, c.dev);
    g.dv = Tensor::zeros(c.kc.shape(), c.adt, c.dev);
    if (need_c) g.dc = Tensor::zeros({c.P.H}, DType::F64);
    if (c.P.fox) g.dfox = Tensor::zeros(fox_c.shape(), c.adt, c.dev);
    if (need_dq) g.ddist_q = Tensor::zeros(dist_q.shape(), c.adt, c.dev);
    if (need_dk) g.ddist_k = Tensor::zeros(dist_k.shape(), c.adt, c.dev);
    return g;
  }
  const KernelGrads kg = run_backward(c.P, c.kn, c.qc, c.kc, c.vc, out.to(c.kdt).contiguous(), lse.contiguous(),
                                      gout.to(c.kdt).contiguous(), c.t, need_c, false, c.P.fox, need_dq, need_dk);
  if (need_dq) g.ddist_q = kg.ddq.to(c.adt);
  if (need_dk) g.ddist_k = kg.ddk.to(c.adt);
  g.dq = kg.dq.to(c.adt);
  g.dk = kg.dk.to(c.adt);
  g.dv = kg.dv.to(c.adt);
  if (need_c) g.dc = kg.dc.to(DType::F64).to(Device::cpu());
  if (c.P.fox) g.dfox = kg.df.to(c.adt);
  return g;
}

AttnOutput fused_attention(const ag::Variable& q, const ag::Variable& k, const ag::Variable& v,
                           const AttnConfig& cfg, const AttnTerms& terms) {
  const Tensor& qv = q.value();
  const Tensor& kv = k.value();
  const Tensor& vv = v.value();
  check_qkv(qv, kv, vv);
  const Device dev = qv.device();
  const DType dt = qv.dtype(), adt = acc_dtype(dt);
  const Tensor qc = qv.contiguous(), kc = kv.contiguous(), vc = vv.contiguous();
  HeldTables held;  // kept alive with the backward: P points into them
  AttnKernelParams P = call_params(cfg, qc, kc, held);
  const bool logn = cfg.logit == LogitKind::LogN;
  const ag::Variable& logn_c = terms.logn_c;
  if (logn)
    HZ_CHECK(logn_c.defined() && logn_c.numel() == P.H && is_floating(logn_c.dtype()), ShapeError,
             "attention: logit 'logn' needs one floating c per query head (", P.H, " values)");
  P.sink = terms.sink.defined();
  if (P.sink)
    HZ_CHECK(terms.sink.numel() == P.H && is_floating(terms.sink.dtype()), ShapeError,
             "attention: sinks need one floating logit per query head (", P.H, " values), got ",
             shape_str(terms.sink.shape()));
  P.fox = terms.forget.defined();
  if (P.fox) {
    HZ_CHECK(terms.forget.value().shape() == Shape({P.B, P.H, P.Tk}) && is_floating(terms.forget.dtype()), ShapeError,
             "attention: FoX's log forget gates must be (B, H, Tk) = (", P.B, ", ", P.H, ", ", P.Tk, "), got ",
             shape_str(terms.forget.shape()));
    HZ_CHECK(P.q_offset + P.Tq <= P.Tk, ShapeError, "attention: FoX needs the queries among the keys (q_offset ",
             P.q_offset, " + Tq ", P.Tq, " > Tk ", P.Tk, ")");
    HZ_CHECK(terms.forget.value().device() == dev, DeviceError, "attention: FoX's log forget gates are on ",
             terms.forget.value().device().str(), ", the queries on ", dev.str());
  }
  set_dist(P, held, terms.dist_q.defined() ? terms.dist_q.value() : Tensor(),
           terms.dist_k.defined() ? terms.dist_k.value() : Tensor(), dev);
  const bool empty = qc.numel() == 0 || kc.numel() == 0;
  const Kernels kn = choose_kernels(cfg, P, dt, dev);
  // LogN's c: a host vector for the CPU kernel, a device tensor in the accumulation dtype on CUDA;
  // the sink likewise; FoX's c = cumsum(log f), differentiable (its node is an input of this op, so
  // dLoss/dc flows back through the prefix sum to log f), in f64 for the CPU kernel: the decay
  // c_(p_i) - c_j is a difference of two long prefix sums, and in float32 their rounding (|c| eps,
  // hundreds of nats after a thousand tokens) reached 2e-5 of the logits at T 1024; the CUDA kernels
  // take it in the accumulation dtype
  KernelTerms kt;
  if (logn) set_logn_c(kt, logn_c.value(), dev, adt);
  if (P.sink && dev.is_cpu()) kt.ct.sink = terms.sink.value().to_vector();
  if (P.sink && dev.is_cuda()) kt.z_dev = terms.sink.value().to(dev).to(adt).contiguous();
  ag::Variable fox_c;
  if (P.fox) {
    const DType fdt = dev.is_cpu() ? DType::F64 : adt;
    fox_c = ag::cumsum(terms.forget.dtype() == fdt ? terms.forget : ag::cast(terms.forget, fdt), 2);
    kt.ct.fox_c = fox_c.value().contiguous();
  }

  Tensor out, lse;
  Tensor out_saved;  // the output backward reads, in the kernel dtype (f32 for bf16 on CPU)
  if (empty) {
    out = Tensor::zeros(qc.shape(), dt, dev);
    out_saved = out;
    lse = Tensor::full({P.B, P.H, P.Tq}, -std::numeric_limits<double>::infinity(), adt, dev);
    if (P.sink)  // no key anywhere: every row's denominator is the sink alone
      lse = ops::add(Tensor::zeros({P.B, P.H, P.Tq}, adt, dev), terms.sink.value().to(dev).to(adt).view({1, P.H, 1}));
  } else {
    out_saved = run_forward(P, kn, qc, kc, vc, kt, lse);
    out = out_saved.dtype() == dt ? out_saved : out_saved.to(dt);  // bf16 on CPU: rounded once
  }

  std::vector<ag::Variable> inputs{q, k, v};
  const bool with_c = logn && logn_c.defined();
  const int ic = with_c ? static_cast<int>(inputs.size()) : -1;
  if (with_c) inputs.push_back(logn_c);
  const int iz = P.sink ? static_cast<int>(inputs.size()) : -1;
  if (P.sink) inputs.push_back(terms.sink);
  const int ifx = P.fox ? static_cast<int>(inputs.size()) : -1;
  if (P.fox) inputs.push_back(fox_c);
  const int idq = terms.dist_q.defined() ? static_cast<int>(inputs.size()) : -1;
  if (idq >= 0) inputs.push_back(terms.dist_q);
  const int idk = terms.dist_k.defined() ? static_cast<int>(inputs.size()) : -1;
  if (idk >= 0) inputs.push_back(terms.dist_k);
  const DType dq_dtype = idq >= 0 ? terms.dist_q.dtype() : adt, dk_dtype = idk >= 0 ? terms.dist_k.dtype() : adt;
  const DType c_dtype = with_c ? logn_c.dtype() : adt, z_dtype = P.sink ? terms.sink.dtype() : adt;
  const Device c_device = with_c ? logn_c.value().device() : dev, z_device = P.sink ? terms.sink.value().device() : dev;
  AttnOutput res;
  res.lse = lse;
  res.out = ag::make_result(out, inputs, "fused_attention", [&] {
    return [P, held, kn, empty, qc, kc, vc, out = out_saved, lse, kt, ic, iz, ifx, idq, idk, c_dtype, c_device,
            z_dtype, z_device, dq_dtype, dk_dtype](const Tensor& g, ag::Grads& gr) {
      const Device dev = qc.device();
      const DType dt = qc.dtype();
      const Tensor gc = (g.dtype() == dt ? g : g.to(dt)).contiguous();
      const bool need_c = ic >= 0 && gr.needs(ic), need_z = iz >= 0 && gr.needs(iz), need_f = ifx >= 0 && gr.needs(ifx);
      const bool need_dq = idq >= 0 && gr.needs(idq), need_dk = idk >= 0 && gr.needs(idk);
      KernelGrads kg;
      if (empty) {
        kg.dq = Tensor::zeros(qc.shape(), dt, dev);
        kg.dk = Tensor::zeros(kc.shape(), dt, dev);
        kg.dv = Tensor::zeros(kc.shape(), dt, dev);
        if (need_c) kg.dc = Tensor::zeros({P.H}, c_dtype, c_device);
        if (need_z) kg.dz = Tensor::zeros({P.H}, z_dtype, z_device);
        if (need_f) kg.df = Tensor::zeros({P.B, P.H, P.Tk}, kt.ct.fox_c.dtype(), dev);
        if (need_dq) kg.ddq = Tensor::zeros({P.B, P.H, P.Tq}, dq_dtype, dev);
        if (need_dk) kg.ddk = Tensor::zeros({P.B, P.H, P.Tk}, dk_dtype, dev);
      } else {
        kg = run_backward(P, kn, qc, kc, vc, out, lse, gc, kt, need_c, need_z, need_f, need_dq, need_dk);
      }
      if (gr.needs(0)) gr.set(0, kg.dq.dtype() == dt ? kg.dq : kg.dq.to(dt));
      if (gr.needs(1)) gr.set(1, kg.dk.dtype() == dt ? kg.dk : kg.dk.to(dt));
      if (gr.needs(2)) gr.set(2, kg.dv.dtype() == dt ? kg.dv : kg.dv.to(dt));
      if (need_c) gr.set(ic, kg.dc.to(c_dtype).to(c_device));
      if (need_z) gr.set(iz, kg.dz.to(z_dtype).to(z_device));
      if (need_f) gr.set(ifx, kg.df);
      if (need_dq) gr.set(idq, kg.ddq.to(dq_dtype));
      if (need_dk) gr.set(idk, kg.ddk.to(dk_dtype));
    };
  });
  return res;
}

}  // namespace hz::attn
