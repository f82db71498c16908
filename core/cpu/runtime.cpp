// Horizon: the CPU runtime as a user sees it: the GEMM libraries' measured rate, denormal
// flushing across the OpenMP threads, the OpenMP threads' waiting policy, and the report that
// `horizon info` and the training log print (declarations and rationale in core/device.h).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "core/device.h"
#include "core/ops.h"
#include "core/rng.h"
#include "core/tensor.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define HZ_HAVE_MXCSR 1
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

namespace hz::cpu {

namespace {
std::string rate(double gflops) {
  char b[64];
  std::snprintf(b, sizeof b, ", %.0f GFLOP/s measured", gflops);
  return b;
}
#ifdef HZ_HAVE_MXCSR
constexpr unsigned kFtzDaz = 0x8040;  // MXCSR bit 15 flush-to-zero, bit 6 denormals-are-zero
void set_mxcsr(bool on) { _mm_setcsr(on ? (_mm_getcsr() | kFtzDaz) : (_mm_getcsr() & ~kFtzDaz)); }
#endif
}  // namespace

void set_flush_denormals(bool on) {
#ifdef HZ_HAVE_MXCSR
  set_mxcsr(on);  // threads created later by this thread inherit its MXCSR
#ifdef _OPENMP
  // every thread of the pool (the team of a region is the pool's first threads, so a region of
  // the maximal size reaches each of them)
#pragma omp parallel num_threads(omp_get_max_threads())
  set_mxcsr(on);
#endif
#else
  (void)on;
#endif
}

bool flush_denormals() {
#ifdef HZ_HAVE_MXCSR
  return (_mm_getcsr() & kFtzDaz) == kFtzDaz;
#else
  return false;
#endif
}

double gemm_gflops(DType dt, int64_t n) {
  Generator g(7);
  const Tensor a = g.normal({n, n}, 0.0, 1.0, dt), b = g.normal({n, n}, 0.0, 1.0, dt);
  (void)ops::matmul(a, b);  // the first call chooses and checks the library
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    (void)ops::matmul(a, b);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * n * n * n / std::max(s, 1e-9) / 1e9);
  }
  return best;
}

std::string omp_wait() {
  const char* pol = std::getenv("OMP_WAIT_POLICY");
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  const char* dflt = std::getenv("HZ_GOMP_SPINCOUNT_DEFAULTED");  // set by the horizon executable
  if (pol) return std::string("OMP_WAIT_POLICY=") + pol + (spin ? std::string(", GOMP_SPINCOUNT=") + spin : "");
  if (spin) return std::string("GOMP_SPINCOUNT=") + spin + (dflt ? " (Horizon's default: bounded spinning)" : " (environment)");
  return "the OpenMP runtime's default";
}

int64_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && size > 0 ? static_cast<int64_t>(pages) * size : 0;
}

std::vector<std::string> runtime_report(bool measure) {
  const GemmSetup& s = gemm_setup();
  std::vector<std::string> out;
  out.push_back("cpu threads (OpenMP): " + std::to_string(num_threads()) + ", waiting: " + omp_wait());
  const double g32 = measure ? gemm_gflops(DType::F32) : 0, g16 = measure ? gemm_gflops(DType::BF16) : 0;
  out.push_back("cpu gemm f32: " + s.f32 + (measure ? rate(g32) : ""));
  out.push_back("cpu gemm bf16: " + s.bf16 + (measure ? rate(g16) : ""));
  if (measure && g16 < 1.2 * g32)  // bf16 also pays its casts: without a clear GEMM gain it trains slower
    out.push_back("note: bf16 products are not faster than f32 here (the line above says why): run.precision=fp32 "
                  "trains faster on this machine; bf16 still halves the activations' memory");
  if (!s.openblas.empty()) out.push_back("openblas: " + s.openblas + " (f64 products)");
  out.push_back(std::string("denormals: ") + (flush_denormals() ? "flushed to zero (FTZ+DAZ)"
                                                                   : "IEEE in this process (training and bench train flush them "
                                                                     "to zero unless run.flush_denormals is false)"));
  if (!s.warning.empty()) out.push_back("warning: " + s.warning);
  return out;
}

}  // namespace hz::cpu
