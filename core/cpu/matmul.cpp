// Horizon CPU kernel: (batched) GEMM. With HZ_OPENBLAS the matrices go to cblas_sgemm /
// cblas_dgemm; strided views whose rows or columns are unit-stride (including transposes) are
// passed with the matching transpose flag and leading dimension instead of being copied.
// Without OpenBLAS a portable blocked GEMM does the same job.
//
// Shapes: A (batch..., r_a, c_a), B (batch..., r_b, c_b); op(A) is (M, K), op(B) is (K, N),
// C (batch..., M, N) contiguous.
#include <algorithm>
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

}  // namespace

template <class T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
          const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
    return;
  }
#ifdef HZ_HAVE_OPENBLAS
  if (M * N * K <= 4096) {  // tiny products: a BLAS call costs more than the arithmetic
    gemm_portable<T>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const auto fa = ta ? CblasTrans : CblasNoTrans, fb = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, fa, fb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  else
    cblas_dgemm(CblasRowMajor, fa, fb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#else
  gemm_portable<T>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
}
template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                           const double*, int64_t, double, double*, int64_t);

Tensor matmul(const Tensor& a_in, const Tensor& b_in, bool ta, bool tb, double alpha,
              const Shape& batch_shape) {
  if (a_in.dtype() == DType::BF16) {  // bf16 inputs, f32 accumulation, one rounding of the result
    if (dnnl_available()) return dnnl_matmul_bf16(a_in, b_in, ta, tb, alpha, batch_shape);
    return matmul(a_in.to(DType::F32), b_in.to(DType::F32), ta, tb, alpha, batch_shape).to(DType::BF16);
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
    // Small matrices: parallel over the batch, BLAS single-threaded inside (the OpenMP build of
    // OpenBLAS runs one thread inside a parallel region). Large: BLAS threads each product.
    // Note: never wrap the BLAS call in an `omp parallel if(false)` region: an inactive region
    // makes OpenBLAS open a *nested* team, creating and destroying threads on every call.
    const bool par_batch = batch > 1 && M * N * K < (1 << 21);
    if (par_batch) {
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < batch; ++i)
        gemm<T>(fa, fb, M, N, K, al, ap + offa[i], lda, bp + offb[i], ldb, T(0), cp + i * M * N, N);
    } else {
      for (int64_t i = 0; i < batch; ++i)
        gemm<T>(fa, fb, M, N, K, al, ap + offa[i], lda, bp + offb[i], ldb, T(0), cp + i * M * N, N);
    }
  });
  return out;
}

}  // namespace hz::cpu
