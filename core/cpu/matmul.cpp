// Horizon CPU kernel: (batched) GEMM. Strided views whose rows or columns are unit-stride
// (including transposes) are passed with the matching transpose flag and leading dimension
// instead of being copied.
//
// Which library multiplies f32 matrices is decided once per process (gemm_setup()): oneDNN's
// sgemm when the build has oneDNN, since its kernels are generated at run time for the CPU found;
// OpenBLAS picks its kernel from a table of CPUs known at its release, and a CPU newer than the
// table silently gets the SSE3 "Prescott" fallback at a quarter of the speed (Debian 12's 0.3.21
// on an Emerald Rapids Xeon). Measured on a 2-core Sapphire-Rapids-class Xeon, oneDNN's sgemm ran
// 1.0-1.6x OpenBLAS's own SkylakeX kernel at the model's shapes but one (0.8x; docs/performance.md,
// "The CPU runtime"), so it is the default even where OpenBLAS chose right.
// HZ_CPU_GEMM=onednn|openblas|portable overrides. Whatever is chosen first multiplies a few
// matrices (every transpose, alpha, beta) and is compared against a double-precision reference; a
// library that computes wrong results is passed over with a warning. f64 products (gradient checks) use OpenBLAS's dgemm.
// bf16 products go to oneDNN's bf16 matmul where the CPU has AMX; without AMX its bf16 kernels
// (AVX512-BF16 dot products) run slower than the f32 ones, so bf16 operands are widened and
// multiplied in f32 (the same arithmetic: bf16 inputs are exact in f32, f32 accumulation, one
// rounding). HZ_CPU_BF16_GEMM=native|f32 overrides.
//
// Shapes: A (batch..., r_a, c_a), B (batch..., r_b, c_b); op(A) is (M, K), op(B) is (K, N),
// C (batch..., M, N) contiguous.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/cpu/dnnl_matmul.h"
#include "core/cpu/kernels.h"
#include "core/cpu/loops.h"

#ifdef HZ_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace hz::cpu {

namespace {

// Portable GEMM: C (M, N) = alpha * op(A) op(B); A/B given as row-major X with flags.
template <class T>
void gemm_portable(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
                   int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  auto a = [&](int64_t i, int64_t k) { return ta ? A[k * lda + i] : A[i * lda + k]; };
  auto b = [&](int64_t k, int64_t j) { return tb ? B[j * ldb + k] : B[k * ldb + j]; };
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
  constexpr int64_t bk = 64;
  for (int64_t k0 = 0; k0 < K; k0 += bk) {
    const int64_t k1 = std::min(K, k0 + bk);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t k = k0; k < k1; ++k) {
        const T av = alpha * a(i, k);
        T* c = C + i * ldc;
        for (int64_t j = 0; j < N; ++j) c[j] += av * b(k, j);
      }
  }
}

enum class F32Gemm { Portable, OpenBLAS, OneDNN };

void gemm_f32_with(F32Gemm g, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  switch (g) {
    case F32Gemm::OneDNN:
      dnnl_sgemm_rm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      return;
    case F32Gemm::OpenBLAS:
#ifdef HZ_HAVE_OPENBLAS
      cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A,
                  lda, B, ldb, beta, C, ldc);
      return;
#endif
    case F32Gemm::Portable:
      gemm_portable<float>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      return;
  }
}

// The largest |error| of g against a double-precision reference, relative to the sum of
// |a_ik b_kj| (the scale of the rounding error of a K-term dot product), over every transpose
// combination with alpha and beta in play, at shapes that reach the libraries' blocked kernels.
double gemm_check(F32Gemm g) {
  double worst = 0;
  const int64_t shapes[][3] = {{67, 45, 259}, {160, 96, 384}};
  for (const auto& s : shapes) {
    const int64_t M = s[0], N = s[1], K = s[2];
    std::vector<float> A(M * K), B(K * N), C0(M * N);
    uint32_t x = 12345;
    auto rnd = [&] { x = x * 1664525u + 1013904223u; return static_cast<float>(static_cast<int32_t>(x >> 8) % 2001 - 1000) / 1000.0f; };
    for (auto& v : A) v = rnd();
    for (auto& v : B) v = rnd();
    for (auto& v : C0) v = rnd();
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const int64_t lda = ta ? M : K, ldb = tb ? K : N;  // A stored (K, M) when transposed
      std::vector<float> C = C0;
      gemm_f32_with(g, ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 0.25f, C.data(), N);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double ref = 0, mag = 0;
          for (int64_t k = 0; k < K; ++k) {
            const double a = ta ? A[k * lda + i] : A[i * lda + k], b = tb ? B[j * ldb + k] : B[k * ldb + j];
            ref += a * b;
            mag += std::abs(a * b);
          }
          ref = 0.5 * ref + 0.25 * C0[i * N + j];
          const double err = std::abs(C[i * N + j] - ref) / (0.5 * mag + 0.25 * std::abs(C0[i * N + j]) + 1e-30);
          worst = std::max(worst, std::isfinite(err) ? err : 1e30);
        }
    }
  }
  return worst;
}

std::string openblas_core() {
#ifdef HZ_HAVE_OPENBLAS
  return openblas_get_corename();
#else
  return "";
#endif
}

// The widest vector ISA the CPU reports, and the one an OpenBLAS kernel (by its core name) uses.
int cpu_level() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return 3;
  if (__builtin_cpu_supports("avx2")) return 2;
  if (__builtin_cpu_supports("avx")) return 1;
  return 0;
}
int openblas_level(const std::string& core) {
  for (const char* c : {"SkylakeX", "Cooperlake", "SapphireRapids"})
    if (core == c) return 3;
  for (const char* c : {"Haswell", "Zen"})
    if (core == c) return 2;
  if (core == "Sandybridge") return 1;
  return 0;
}
const char* level_name(int l) { return l == 3 ? "AVX-512" : l == 2 ? "AVX2" : l == 1 ? "AVX" : "SSE"; }

struct Chosen {
  F32Gemm f32 = F32Gemm::Portable;
  bool bf16_native = false;
  GemmSetup setup;
};

const Chosen& chosen() {
  static const Chosen c = [] {
    Chosen r;
    const char* env = std::getenv("HZ_CPU_GEMM");
    const std::string want = env ? env : "auto";
    // the libraries to try, in order (Portable always last: it cannot fail its check)
    F32Gemm order[3] = {F32Gemm::OneDNN, F32Gemm::OpenBLAS, F32Gemm::Portable};
    if (want == "openblas") order[0] = F32Gemm::OpenBLAS, order[1] = F32Gemm::OneDNN;
    else if (want == "portable") order[0] = order[1] = F32Gemm::Portable;
    if (want != "auto" && want != "onednn" && want != "openblas" && want != "portable")
      std::fprintf(stderr, "horizon: warning: HZ_CPU_GEMM=%s is not auto, onednn, openblas or portable; using auto\n",
                   want.c_str());
    const std::string core = openblas_core();
    auto describe = [&](F32Gemm g) -> std::string {
      if (g == F32Gemm::OneDNN) return "oneDNN " + dnnl_version_string() + " sgemm (" + dnnl_isa() + ")";
      if (g == F32Gemm::OpenBLAS) return "OpenBLAS (kernel " + core + ")";
      return "portable";
    };
    for (F32Gemm g : order) {
      if (g == F32Gemm::OneDNN && !dnnl_available()) continue;
      if (g == F32Gemm::OpenBLAS && core.empty()) continue;
      const double err = gemm_check(g);
      if (err > 1e-5) {  // f32 rounding gives ~1e-7 relative to the |a||b| sum; a wrong kernel gives O(1)
        r.setup.warning += describe(g) + " failed the reference check (error " + std::to_string(err) + "); ";
        continue;
      }
      r.f32 = g;
      r.setup.f32 = describe(g) + ", checked";
      break;
    }
    if (!core.empty()) {
      const int cl = cpu_level(), ol = openblas_level(core);
      r.setup.openblas = "kernel " + core + " (" + level_name(ol) + ") on an " + level_name(cl) + " CPU";
      if (const char* forced = std::getenv("OPENBLAS_CORETYPE"); forced && *forced) {
        r.setup.openblas += std::string(": OPENBLAS_CORETYPE=") + forced;  // chosen by the user, not by the table
      } else if (ol < cl) {
        r.setup.openblas += ": OpenBLAS's CPU table predates this CPU";
        if (r.f32 == F32Gemm::OpenBLAS)
          r.setup.warning += "OpenBLAS runs its " + core + " kernel on this " + std::string(level_name(cl)) +
                             " CPU (about 4x slower; set OPENBLAS_CORETYPE=SkylakeX or Haswell, or HZ_CPU_GEMM=onednn); ";
      }
    }
    const char* benv = std::getenv("HZ_CPU_BF16_GEMM");
    const std::string bwant = benv ? benv : "auto";
    r.bf16_native = dnnl_available() && (bwant == "native" || (bwant != "f32" && dnnl_has_amx()));
    r.setup.bf16 = r.bf16_native ? "oneDNN " + dnnl_version_string() + " bf16 matmul (" + dnnl_isa() + ")"
                   : !dnnl_available() ? "widened to f32 (no oneDNN in this build)"
                   : bwant == "f32" ? "widened to f32 (HZ_CPU_BF16_GEMM=f32)"
                                    : "widened to f32: no AMX on this CPU, where oneDNN's bf16 kernels run slower than f32";
    while (!r.setup.warning.empty() && (r.setup.warning.back() == ' ' || r.setup.warning.back() == ';'))
      r.setup.warning.pop_back();
    if (!r.setup.warning.empty()) std::fprintf(stderr, "horizon: warning: %s\n", r.setup.warning.c_str());
    return r;
  }();
  return c;
}

}  // namespace

const GemmSetup& gemm_setup() { return chosen().setup; }

namespace {
thread_local int t_row_blocked = 0;
// the rows a widened bf16 product converts at a time: whole row blocks
constexpr int64_t kWidenRows = 4 * kGemmRowBlock;
}  // namespace
RowBlockedProducts::RowBlockedProducts() { ++t_row_blocked; }
RowBlockedProducts::~RowBlockedProducts() { --t_row_blocked; }
bool row_blocked_products() { return t_row_blocked > 0; }

template <class T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
          const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
    return;
  }
  if (M * N * K <= 4096) {  // tiny products: a library call costs more than the arithmetic
    gemm_portable<T>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    gemm_f32_with(chosen().f32, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  } else {
#ifdef HZ_HAVE_OPENBLAS
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda,
                B, ldb, beta, C, ldc);
#else
    gemm_portable<T>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
  }
}
template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                           const double*, int64_t, double, double*, int64_t);

Tensor matmul(const Tensor& a_in, const Tensor& b_in, bool ta, bool tb, double alpha,
              const Shape& batch_shape) {
  if (a_in.dtype() == DType::BF16) {  // bf16 inputs, f32 accumulation, one rounding of the result
    if (chosen().bf16_native) return dnnl_matmul_bf16(a_in, b_in, ta, tb, alpha, batch_shape);
    // Widened: B once, A's rows and C's a block at a time, so that the f32 copies of a long
    // activation never exist whole (the blocks are whole row blocks: the same bits inside a
    // RowBlockedProducts scope)
    const int64_t M = ta ? a_in.size(-1) : a_in.size(-2), N = tb ? b_in.size(-2) : b_in.size(-1);
    const Tensor b32 = b_in.to(DType::F32);
    if (M <= kWidenRows) return matmul(a_in.to(DType::F32), b32, ta, tb, alpha, batch_shape).to(DType::BF16);
    Shape os = batch_shape;
    os.push_back(M);
    os.push_back(N);
    Tensor out = Tensor::empty(os, DType::BF16);
    for (int64_t r0 = 0; r0 < M; r0 += kWidenRows) {
      const int64_t m = std::min(kWidenRows, M - r0);
      const Tensor a32 = a_in.narrow(ta ? -1 : -2, r0, m).to(DType::F32);
      out.narrow(-2, r0, m).copy_(matmul(a32, b32, ta, tb, alpha, batch_shape));
    }
    return out;
  }
  const int64_t nb = static_cast<int64_t>(batch_shape.size());
  Tensor a = a_in, b = b_in;
  const int64_t ra = a.size(-2), ca = a.size(-1), rb = b.size(-2), cb = b.size(-1);
  const int64_t M = ta ? ca : ra, K = ta ? ra : ca, N = tb ? rb : cb;
  bool la, lb;
  int64_t lda, ldb;
  // A layout BLAS cannot take is copied; clone() (not contiguous()) so that views that merely
  // look contiguous (size-1 dims with odd strides) get canonical strides.
  if (!mat_layout(ra, ca, a.stride(-2), a.stride(-1), la, lda)) {
    a = a.clone();
    HZ_CHECK(mat_layout(ra, ca, a.stride(-2), a.stride(-1), la, lda), Error, "internal: matmul layout");
  }
  if (!mat_layout(rb, cb, b.stride(-2), b.stride(-1), lb, ldb)) {
    b = b.clone();
    HZ_CHECK(mat_layout(rb, cb, b.stride(-2), b.stride(-1), lb, ldb), Error, "internal: matmul layout");
  }
  Shape out_shape = batch_shape;
  out_shape.push_back(M);
  out_shape.push_back(N);
  Tensor out = Tensor::empty(out_shape, a.dtype());
  const int64_t batch = shape_numel(batch_shape);
  // per-batch element offsets of a and b (their batch dims are expanded to batch_shape)
  std::vector<int64_t> offa(batch, 0), offb(batch, 0);
  for (int64_t i = 0; i < batch; ++i) {
    int64_t rem = i;
    for (int64_t d = nb - 1; d >= 0; --d) {
      const int64_t idx = rem % batch_shape[d];
      rem /= batch_shape[d];
      offa[i] += idx * a.stride(d);
      offb[i] += idx * b.stride(d);
    }
  }
  dispatch_float(a.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_);
    const T* ap = a.data<T>();
    const T* bp = b.data<T>();
    T* cp = out.data<T>();
    const T al = static_cast<T>(alpha);
    const bool fa = ta != la, fb = tb != lb;
    // Small matrices: parallel over the batch, the library single-threaded inside (oneDNN and the
    // OpenMP build of OpenBLAS run one thread inside a parallel region). Large: the library
    // threads each product. Note: never wrap the call in an `omp parallel if(false)` region: an
    // inactive region makes OpenBLAS open a *nested* team, creating and destroying threads on
    // every call.
    // C's rows in blocks from the first row inside a RowBlockedProducts scope (core/device.h)
    const int64_t blk = row_blocked_products() ? std::min(M, kGemmRowBlock) : M;
    auto one = [&](int64_t i) {
      for (int64_t r0 = 0; r0 < M; r0 += blk)
        gemm<T>(fa, fb, std::min(blk, M - r0), N, K, al, ap + offa[i] + (fa ? r0 : r0 * lda), lda, bp + offb[i], ldb,
                T(0), cp + i * M * N + r0 * N, N);
    };
    const bool par_batch = batch > 1 && blk * N * K < (1 << 21);
    if (par_batch) {
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < batch; ++i) one(i);
    } else {
      for (int64_t i = 0; i < batch; ++i) one(i);
    }
  });
  return out;
}

}  // namespace hz::cpu
