// Horizon CUDA kernel: (batched) GEMM through cuBLASLt.
//
// Shapes: A (batch..., r_a, c_a), B (batch..., r_b, c_b) with batch dims already broadcast;
// op(A) (M, K), op(B) (K, N), C (batch..., M, N) row-major contiguous.
// Row-major C = op(A) op(B) is computed as column-major C^T = op(B)^T op(A)^T, so B is cuBLASLt's
// first operand. A view whose rows or columns are unit-stride (including a transpose() view) is
// passed with the matching operation and leading dimension instead of being copied; batch dims
// that flatten to one stride (0 for a broadcast operand) become a strided batch.
// dtypes: f32 (CUBLAS_COMPUTE_32F: exact f32 unless set_allow_tf32(true)), f64, bf16 inputs and
// output with f32 accumulation. Plans (descriptors + the heuristic's algorithm) are cached per
// shape, layout, dtype and pointer alignment.
#include <map>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include "core/cuda/common.cuh"
#include "core/cuda/kernels.cuh"

namespace hz::cuda {

namespace {

constexpr size_t kWorkspace = 32u << 20;

// One stride for all batch dims (ignoring size-1 dims), or false.
bool batch_stride(const Tensor& t, int64_t nb, int64_t& stride) {
  stride = 0;
  int64_t expect = -1;
  for (int64_t d = nb - 1; d >= 0; --d) {
    const int64_t sz = t.size(d), st = t.stride(d);
    if (sz == 1) continue;
    if (expect < 0) {
      stride = st;
      expect = st * sz;
    } else if (st != expect) {
      return false;
    } else {
      expect = st * sz;
    }
  }
  return true;
}

uint32_t alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 1;
  while (a < 256 && v % (2 * a) == 0) a *= 2;
  return a;
}

using PlanKey = std::tuple<int, int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                           int64_t, int64_t, int64_t, int64_t, int, int, int, int, bool>;

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

std::mutex g_mu;
std::map<PlanKey, Plan> g_plans;

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::F64: return CUDA_R_64F;
    case DType::BF16: return CUDA_R_16BF;
    default: throw DTypeError(std::string("CUDA matmul supports f32, f64 and bf16, got ") + dtype_name(t));
  }
}

void set_batch(cublasLtMatrixLayout_t l, int64_t count, int64_t stride) {
  const int32_t c = static_cast<int32_t>(count);
  HZ_CUBLAS_CHECK(cublaslt().MatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &c, sizeof(c)));
  HZ_CUBLAS_CHECK(cublaslt().MatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in, bool ta, bool tb, double alpha, const Shape& batch_shape) {
  const int64_t nb = static_cast<int64_t>(batch_shape.size());
  Tensor a = a_in, b = b_in;
  const int64_t ra = a.size(-2), ca = a.size(-1), rb = b.size(-2), cb = b.size(-1);
  const int64_t M = ta ? ca : ra, K = ta ? ra : ca, N = tb ? rb : cb;
  Shape os = batch_shape;
  os.push_back(M);
  os.push_back(N);
  Tensor out = Tensor::empty(os, a.dtype(), a.device());
  const int64_t batch = shape_numel(batch_shape);
  if (M == 0 || N == 0 || batch == 0) return out;
  if (K == 0) {
    out.zero_();
    return out;
  }
  const int dev = a.device().index;
  use_device(dev);
  bool la_t = false, lb_t = false;
  int64_t lda = 0, ldb = 0, sa = 0, sb = 0;
  if (!mat_layout(ra, ca, a.stride(-2), a.stride(-1), la_t, lda) || !batch_stride(a, nb, sa)) {
    a = a.clone();
    mat_layout(ra, ca, a.stride(-2), a.stride(-1), la_t, lda);
    batch_stride(a, nb, sa);
  }
  if (!mat_layout(rb, cb, b.stride(-2), b.stride(-1), lb_t, ldb) || !batch_stride(b, nb, sb)) {
    b = b.clone();
    mat_layout(rb, cb, b.stride(-2), b.stride(-1), lb_t, ldb);
    batch_stride(b, nb, sb);
  }
  // cuBLASLt operand 1 = B (stored column-major as (cb, rb) or, when lb_t, (rb, cb)), operand 2 = A
  const bool op1_t = tb != lb_t, op2_t = ta != la_t;
  const int64_t r1 = lb_t ? rb : cb, c1 = lb_t ? cb : rb, r2 = la_t ? ra : ca, c2 = la_t ? ca : ra;
  const DType dt = a.dtype();
  const bool tf32 = dt == DType::F32 && allow_tf32();
  // operand alignments in bytes (cuBLASLt's A = our B, its B = our A, C = D = out): the heuristic must
  // be told, or it assumes 256 and may pick a vectorised kernel that faults on a view at an offset
  const uint32_t al1 = alignment(b.raw_data()), al2 = alignment(a.raw_data()), alc = alignment(out.raw_data());
  const PlanKey key{static_cast<int>(dt), dev, tf32, r1, c1, ldb, sb, r2, c2, lda, sa, N, M, batch, 0,
                    static_cast<int>(al1), static_cast<int>(al2), static_cast<int>(alc), op1_t, op2_t};
  cublasLtHandle_t h = lt_handle(dev);
  void* ws = lt_workspace(dev, kWorkspace);
  Plan plan;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_plans.find(key);
    if (it != g_plans.end()) {
      plan = it->second;
    } else {
      const cudaDataType_t ct = cuda_type(dt);
      const cublasComputeType_t comp = dt == DType::F64 ? CUBLAS_COMPUTE_64F
                                       : tf32           ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                        : CUBLAS_COMPUTE_32F;
      const cudaDataType_t scale_t = dt == DType::F64 ? CUDA_R_64F : CUDA_R_32F;
      HZ_CUBLAS_CHECK(cublaslt().MatmulDescCreate(&plan.op, comp, scale_t));
      const cublasOperation_t o1 = op1_t ? CUBLAS_OP_T : CUBLAS_OP_N, o2 = op2_t ? CUBLAS_OP_T : CUBLAS_OP_N;
      HZ_CUBLAS_CHECK(cublaslt().MatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &o1, sizeof(o1)));
      HZ_CUBLAS_CHECK(cublaslt().MatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &o2, sizeof(o2)));
      HZ_CUBLAS_CHECK(cublaslt().MatrixLayoutCreate(&plan.la, ct, r1, c1, ldb));
      HZ_CUBLAS_CHECK(cublaslt().MatrixLayoutCreate(&plan.lb, ct, r2, c2, lda));
      HZ_CUBLAS_CHECK(cublaslt().MatrixLayoutCreate(&plan.lc, ct, N, M, N));
      if (batch > 1) {
        set_batch(plan.la, batch, sb);
        set_batch(plan.lb, batch, sa);
        set_batch(plan.lc, batch, M * N);
      }
      cublasLtMatmulPreference_t pref;
      HZ_CUBLAS_CHECK(cublaslt().MatmulPreferenceCreate(&pref));
      size_t wsb = kWorkspace;
      HZ_CUBLAS_CHECK(cublaslt().MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb)));
      const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
          {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, al1},
          {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, al2},
          {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alc},
          {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alc}};
      for (const auto& [attr, bytes] : aligns)
        HZ_CUBLAS_CHECK(cublaslt().MatmulPreferenceSetAttribute(pref, attr, &bytes, sizeof(bytes)));
      cublasLtMatmulHeuristicResult_t res{};
      int found = 0;
      HZ_CUBLAS_CHECK(cublaslt().MatmulAlgoGetHeuristic(h, plan.op, plan.la, plan.lb, plan.lc, plan.lc, pref, 1, &res, &found));
      cublaslt().MatmulPreferenceDestroy(pref);
      HZ_CHECK(found > 0, DeviceError, "cuBLASLt has no algorithm for a ", dtype_name(dt), " GEMM (", M, " x ", K, ") x (", K,
               " x ", N, "), batch ", batch, "; report the shapes");
      plan.algo = res.algo;
      g_plans.emplace(key, plan);
    }
  }
  const float af = static_cast<float>(alpha), bf = 0.0f;
  const double ad = alpha, bd = 0.0;
  const void* al = dt == DType::F64 ? static_cast<const void*>(&ad) : static_cast<const void*>(&af);
  const void* be = dt == DType::F64 ? static_cast<const void*>(&bd) : static_cast<const void*>(&bf);
  HZ_CUBLAS_CHECK(cublaslt().Matmul(h, plan.op, al, b.raw_data(), plan.la, a.raw_data(), plan.lb, be, out.raw_data(), plan.lc,
                                 out.raw_data(), plan.lc, &plan.algo, ws, kWorkspace, stream(dev)));
  return out;
}

}  // namespace hz::cuda
