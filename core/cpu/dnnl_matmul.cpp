// Horizon CPU kernel: GEMMs through oneDNN (Debian's libdnnl 2.6). f32: its sgemm, whose kernels
// are generated at run time for the CPU found (core/cpu/matmul.cpp decides when to use it). bf16:
// its matmul primitive, which runs on the cores' bf16 dot-product instructions (AVX512-BF16, or
// AMX where the CPU has it) with f32 accumulation and one rounding of the result to bf16.
//
// Shapes as cpu::matmul: op(A) (M, K), op(B) (K, N), C (batch..., M, N) contiguous. Operands are
// described to oneDNN with their real strides (transposed views are not copied); batch dims that
// flatten to one stride become a 3-D batched primitive, a batch-shared operand a batch dim of 1.
// Primitives are built once per (shape, strides, alpha) and cached; oneDNN runs them on the
// OpenMP threads Horizon uses (the Debian build's runtime is OpenMP), and gives the same bits for
// the same inputs and thread count.
#include "core/cpu/dnnl_matmul.h"

#include "core/device.h"

#ifdef HZ_HAVE_DNNL
#include <dnnl.hpp>
#include <oneapi/dnnl/dnnl_debug.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

namespace hz::cpu {

namespace {

using dims = dnnl::memory::dims;
using dt = dnnl::memory::data_type;

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// One stride for all batch dims (size-1 dims ignored), or false.
bool flat_batch(const Tensor& t, int64_t nb, int64_t& stride) {
  stride = 0;
  int64_t expect = -1;
  for (int64_t d = nb - 1; d >= 0; --d) {
    const int64_t sz = t.size(d), st = t.stride(d);
    if (sz == 1) continue;
    if (expect >= 0 && st != expect) return false;
    if (expect < 0) stride = st;
    expect = st * sz;
  }
  return true;
}

using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                       int64_t, int64_t, float>;
struct Prim {
  dnnl::matmul op;
  dnnl::memory::desc a, b, c;
};
std::mutex g_mu;
std::map<Key, Prim> g_prims;

}  // namespace

bool dnnl_available() { return true; }

std::string dnnl_version_string() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

std::string dnnl_isa() {
  std::string s = dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa());
  return s.rfind("cpu_isa_", 0) == 0 ? s.substr(8) : s;
}

bool dnnl_has_amx() {
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  return (isa & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx;
}

void dnnl_sgemm_rm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                   const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  HZ_CHECK(st == dnnl_success, Error, "internal: oneDNN sgemm failed (status ", static_cast<int>(st), ") for M ", M,
           " N ", N, " K ", K);
}

Tensor dnnl_matmul_bf16(const Tensor& a_in, const Tensor& b_in, bool ta, bool tb, double alpha, const Shape& batch_shape) {
  const int64_t nb = static_cast<int64_t>(batch_shape.size());
  Tensor a = a_in, b = b_in;
  const int64_t ra = a.size(-2), ca = a.size(-1), rb = b.size(-2), cb = b.size(-1);
  const int64_t M = ta ? ca : ra, K = ta ? ra : ca, N = tb ? rb : cb;
  Shape os = batch_shape;
  os.push_back(M);
  os.push_back(N);
  Tensor out = Tensor::empty(os, DType::BF16);
  const int64_t batch = shape_numel(batch_shape);
  if (M == 0 || N == 0 || batch == 0) return out;
  if (K == 0) {
    out.zero_();
    return out;
  }
  int64_t sa, sb;
  if (!flat_batch(a, nb, sa)) a = a.clone(), flat_batch(a, nb, sa);
  if (!flat_batch(b, nb, sb)) b = b.clone(), flat_batch(b, nb, sb);
  // element strides of op(A) (M, K) and op(B) (K, N)
  const int64_t am = ta ? a.stride(-1) : a.stride(-2), ak = ta ? a.stride(-2) : a.stride(-1);
  const int64_t bk = tb ? b.stride(-1) : b.stride(-2), bn = tb ? b.stride(-2) : b.stride(-1);
  const int64_t ba = sa == 0 ? 1 : batch, bb = sb == 0 ? 1 : batch;  // a shared operand broadcasts
  // C's rows in blocks from the first row inside a RowBlockedProducts scope (core/device.h)
  const int64_t blk = row_blocked_products() ? kGemmRowBlock : M;
  dnnl::stream s(engine());
  for (int64_t r0 = 0; r0 < M; r0 += blk) {
    const int64_t m = std::min(blk, M - r0);
    const Key key{m, N, K, ba, bb, sa, sb, am, ak, bk, bn, batch, M, static_cast<float>(alpha)};
    Prim prim;
    {
      std::lock_guard<std::mutex> lock(g_mu);
      auto it = g_prims.find(key);
      if (it != g_prims.end()) {
        prim = it->second;
      } else {
        const dnnl::memory::desc amd({ba, m, K}, dt::bf16, dims{sa == 0 ? m * K : sa, am, ak});
        const dnnl::memory::desc bmd({bb, K, N}, dt::bf16, dims{sb == 0 ? K * N : sb, bk, bn});
        const dnnl::memory::desc cmd({batch, m, N}, dt::bf16, dims{batch == 1 ? m * N : M * N, N, 1});
        dnnl::primitive_attr attr;
        if (alpha != 1.0) attr.set_output_scales(0, {static_cast<float>(alpha)});
        const dnnl::matmul::desc d(amd, bmd, cmd);
        prim = Prim{dnnl::matmul(dnnl::matmul::primitive_desc(d, attr, engine())), amd, bmd, cmd};
        g_prims.emplace(key, prim);
      }
    }
    const size_t es = sizeof(uint16_t);
    dnnl::memory A(prim.a, engine(), static_cast<char*>(a.raw_data()) + r0 * am * es),
        B(prim.b, engine(), b.raw_data()), C(prim.c, engine(), static_cast<char*>(out.raw_data()) + r0 * N * es);
    prim.op.execute(s, {{DNNL_ARG_SRC, A}, {DNNL_ARG_WEIGHTS, B}, {DNNL_ARG_DST, C}});
  }
  s.wait();
  return out;
}

}  // namespace hz::cpu

#else  // no oneDNN: the caller falls back to f32 GEMM

namespace hz::cpu {
bool dnnl_available() { return false; }
std::string dnnl_version_string() { return ""; }
std::string dnnl_isa() { return ""; }
bool dnnl_has_amx() { return false; }
void dnnl_sgemm_rm(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float,
                   float*, int64_t) {
  throw NotImplementedError("this build has no oneDNN (HZ_DNNL=OFF)");
}
Tensor dnnl_matmul_bf16(const Tensor&, const Tensor&, bool, bool, double, const Shape&) {
  throw NotImplementedError("this build has no oneDNN (HZ_DNNL=OFF)");
}
}  // namespace hz::cpu

#endif
