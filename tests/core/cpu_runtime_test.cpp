// The CPU runtime (core/device.h): denormal flushing reaches every OpenMP thread and the GEMM
// libraries' threads, and the chosen f32 GEMM agrees with a double-precision product at the
// model's shapes (tests/nn/denormal_test.cpp: a model whose values underflow).
#include <gtest/gtest.h>

#include <cfloat>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/ops.h"
#include "core/rng.h"
#include "tests/core/test_util.h"

using namespace hz;

using hzt::FlushGuard;

TEST(CpuRuntime, FlushReachesEveryThreadOfElementwiseKernels) {
  FlushGuard guard;
  // 1e-20 * 1e-20 = 1e-40 is below FLT_MIN (1.18e-38): subnormal under IEEE, 0 flushed; the
  // tensor is large enough that every OpenMP thread computes a part of it
  const Tensor a = Tensor::full({1 << 18}, 1e-20), b = Tensor::full({1 << 18}, 1e-20);
  cpu::set_flush_denormals(false);
  EXPECT_FALSE(cpu::flush_denormals());
  EXPECT_EQ(hzt::count_subnormals(ops::mul(a, b)), 1 << 18);
  cpu::set_flush_denormals(true);
  EXPECT_TRUE(cpu::flush_denormals());
  const Tensor c = ops::mul(a, b);
  EXPECT_EQ(hzt::count_subnormals(c), 0);
  EXPECT_EQ(ops::max_all(c).item(), 0.0);
  // DAZ: a subnormal input reads as zero (made while not flushing: the conversion would flush it)
  cpu::set_flush_denormals(false);
  const Tensor d = Tensor::full({1 << 18}, 1e-40), big = Tensor::full({1 << 18}, 1e30);
  EXPECT_EQ(hzt::count_subnormals(d), 1 << 18);
  EXPECT_GT(ops::sum_all(ops::mul(d, big)).item(), 0.0);
  cpu::set_flush_denormals(true);
  EXPECT_EQ(ops::sum_all(ops::mul(d, big)).item(), 0.0);
}

TEST(CpuRuntime, FlushReachesTheGemmLibrary) {
  FlushGuard guard;
  const Tensor a = Tensor::full({256, 384}, 1e-21), b = Tensor::full({384, 512}, 1e-21);  // sums ~4e-40
  cpu::set_flush_denormals(false);
  EXPECT_EQ(hzt::count_subnormals(ops::matmul(a, b)), 256 * 512);
  cpu::set_flush_denormals(true);
  EXPECT_EQ(hzt::count_subnormals(ops::matmul(a, b)), 0);
}

TEST(CpuRuntime, ChosenF32GemmMatchesDoublePrecision) {
  const cpu::GemmSetup& s = cpu::gemm_setup();
  EXPECT_NE(s.f32.find("checked"), std::string::npos) << s.f32;
  EXPECT_FALSE(s.bf16.empty());
  Generator g(5);
  for (const auto& mnk : std::vector<std::array<int64_t, 3>>{{2048, 384, 128}, {256, 2304, 768}, {64, 64, 64}, {7, 300, 5}}) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const int64_t M = mnk[0], N = mnk[1], K = mnk[2];
      const Tensor a = g.normal(ta ? Shape{K, M} : Shape{M, K}), b = g.normal(tb ? Shape{N, K} : Shape{K, N});
      const Tensor c = ops::matmul(a, b, ta, tb);
      const Tensor ref = ops::matmul(a.to(DType::F64), b.to(DType::F64), ta, tb);
      double err = 0;
      const std::vector<double> cv = c.to_vector(), rv = ref.to_vector();
      for (size_t i = 0; i < cv.size(); ++i) err = std::max(err, std::abs(cv[i] - rv[i]));
      EXPECT_LT(err, 2e-6 * std::sqrt(static_cast<double>(K)) * 4) << M << "x" << N << "x" << K << " t" << t;
    }
  }
}

// Inside cpu::RowBlockedProducts a row of a product has the same bits whether the GEMM is given
// every row, only whole blocks of kGemmRowBlock rows, or the rows from a block's start to the end
// (the chunks of the head's loss), in every dtype and transpose, where BLAS kernels on AVX2 would
// round a row differently for each row count. (Except bf16 with a transposed A, below.)
TEST(CpuRuntime, ProductRowsDoNotDependOnTheRowsThatFollow) {
  cpu::RowBlockedProducts blocked;
  Generator g(7);
  const int64_t R = cpu::kGemmRowBlock, M = 2 * R + 188, N = 96, K = 72;
  for (DType dt : {DType::F32, DType::BF16, DType::F64})
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const Tensor a = g.normal(ta ? Shape{K, M} : Shape{M, K}).to(dt), b = g.normal(tb ? Shape{N, K} : Shape{K, N}).to(dt);
      const Tensor all = ops::matmul(a, b, ta, tb).to(DType::F64);
      // bf16 with A transposed: without AMX the part's A (K, rows) is widened to a compact f32 copy, so its
      // GEMM runs with lda = rows where the whole product's has lda = M: another library call, whose f32
      // sums may round otherwise (by <= 2 K u_f32 sum|a b|, u = 2^-24), then one bf16 rounding (<= 1 ulp)
      const bool other_call = dt == DType::BF16 && ta;
      std::vector<double> mag;
      if (other_call) hzt::ref_matmul(a.to_vector(), a.shape(), b.to_vector(), b.shape(), ta, tb, 1.0, nullptr, &mag);
      for (int64_t r0 : {int64_t(0), R, 2 * R})
        for (int64_t rows : {R, 2 * R, M - r0}) {
          if (r0 + rows > M) continue;
          const Tensor part = ops::matmul(a.narrow(ta ? 1 : 0, r0, rows), b, ta, tb).to(DType::F64);
          const std::vector<double> got = part.to_vector(), want = all.narrow(0, r0, rows).contiguous().to_vector();
          if (!other_call) {
            EXPECT_EQ(got, want) << dtype_name(dt) << " t" << t << " rows [" << r0 << ", " << r0 + rows << ")";
            continue;
          }
          int64_t bad = 0;
          for (size_t i = 0; i < got.size(); ++i) {
            const double big = std::max(std::abs(got[i]), std::abs(want[i]));
            const double ulp = big > 0 ? std::ldexp(1.0, std::ilogb(big) - 7) : 0.0;  // bf16: 8 significant bits
            bad += std::abs(got[i] - want[i]) > ulp + 2 * K * std::ldexp(1.0, -24) * mag[r0 * N + i];
          }
          EXPECT_EQ(bad, 0) << "bf16 t" << t << " rows [" << r0 << ", " << r0 + rows << "): " << bad
                            << " values differ by more than the f32 sums' round-off and a bf16 ulp";
        }
    }
}

TEST(CpuRuntime, ReportNamesTheLibrariesAndMeasuresThem) {
  const auto lines = cpu::runtime_report(true);
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  EXPECT_NE(all.find("cpu gemm f32: "), std::string::npos) << all;
  EXPECT_NE(all.find("GFLOP/s measured"), std::string::npos) << all;
  EXPECT_NE(all.find("denormals: "), std::string::npos) << all;
  EXPECT_GT(cpu::gemm_gflops(DType::F32, 256), 0.1);
}

// tests/isa_below.sh holds oneDNN and OpenBLAS below this CPU's instruction set and says which kernels
// it asked for: the libraries must have taken them, or the capped run of the suites tests nothing new.
TEST(CpuRuntime, LibrariesHeldWhereAsked) {
  const char* isa = std::getenv("HZ_EXPECT_DNNL_ISA");
  const char* core = std::getenv("HZ_EXPECT_OPENBLAS_CORE");
  if (!isa && !core) GTEST_SKIP() << "not run under tests/isa_below.sh";
  const cpu::GemmSetup& s = cpu::gemm_setup();
  if (isa) {
    EXPECT_NE(s.f32.find("(" + std::string(isa) + ")"), std::string::npos) << s.f32;
  }
  if (core) {
    EXPECT_EQ(s.openblas.rfind("kernel " + std::string(core) + " ", 0), 0u) << s.openblas;
  }
}
