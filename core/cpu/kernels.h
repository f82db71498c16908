// Horizon: CPU kernels, the entries of the CPU backend table (core/cpu/backend.cpp). Called by
// core/ops.cpp after argument checks; inputs are CPU tensors of a floating dtype (f32, f64, bf16
// computing in f32) unless stated. Outputs are freshly allocated contiguous tensors.
#pragma once
#include "core/backend.h"
#include "core/device.h"
#include "core/ops.h"

namespace hz::cpu {

void copy_strided(const Tensor& src, Tensor& dst);  // same shape, any dtypes, any strides
void fill(Tensor& dst, double v);
Tensor unary(UnaryOp op, const Tensor& x);
Tensor unary_backward(UnaryOp op, const Tensor& x, const Tensor& gout);
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b, const Shape& out_shape);
Tensor scalar_op(const Tensor& x, double mul, double add, double pow);  // (x^pow)*mul + add
void add_inplace(Tensor& dst, const Tensor& src, double alpha);
void axpby(Tensor& x, const Tensor& y, double alpha, double beta);
Tensor swiglu(const Tensor& a, const Tensor& b);
ops::SwiGluGrads swiglu_backward(const Tensor& a, const Tensor& b, const Tensor& g, bool need_a, bool need_b);
double sum_squares(const std::vector<Tensor>& xs);
Tensor scatter_dim(const Tensor& src, const Tensor& index, int64_t dim, const Shape& out_shape);
void random_fill(Tensor& dst, const RandomFill& r);
Tensor rotary(const Tensor& x, const Tensor& positions, const RotaryParams& p);
Tensor rotate_angles(const Tensor& x, const Tensor& angles, double mscale, bool inverse);
Tensor rotate_angles_grad(const Tensor& y, const Tensor& gy, const Tensor& angles, bool inverse);
void adamw_update(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const math::AdamWCoef& c);
void adamw_multi_update(std::vector<ops::AdamWSlot>& slots, const math::AdamWCoef& c);
void momentum_update(const Tensor& g, Tensor& buf, Tensor& out, double mu, bool nesterov, double gscale);
Tensor reduce_dim(ReduceOp op, const Tensor& x, int64_t dim, bool keepdim, Tensor* argmax);
Tensor cumsum(const Tensor& x, int64_t dim, bool reverse);
Tensor reduce_all(ReduceOp op, const Tensor& x);
// Raw row-major GEMM: C (M, N) = alpha op(A) op(B) + beta C, op(X) = X^T when the flag is set.
// Single-threaded inside an OpenMP parallel region (OpenBLAS's OpenMP build), so fused kernels
// can call it per tile from their own threads.
template <class T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
          const T* B, int64_t ldb, T beta, T* C, int64_t ldc);
Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb, double alpha,
              const Shape& batch_shape);
Tensor softmax(const Tensor& x, int64_t dim, bool log);
Tensor softmax_backward(const Tensor& y, const Tensor& g, int64_t dim, bool log);
Tensor embedding(const Tensor& weight, const Tensor& ids);
Tensor embedding_backward(const Tensor& gout, const Tensor& ids, int64_t vocab);
CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& weights,
                                 int64_t ignore_index);
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& weights,
                              const Tensor& lse, double weight_sum, int64_t ignore_index,
                              double gscale);
Tensor cross_entropy_rows(const Tensor& logits, const Tensor& targets, int64_t ignore_index);
ops::RmsNormResult rms_norm(const Tensor& x, const Tensor& w, double eps, const Tensor& residual);
ops::RmsNormGrads rms_norm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd,
                                    const Tensor& gout, bool need_gx, bool need_gw, const Tensor& gres);

}  // namespace hz::cpu
