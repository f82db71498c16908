// Horizon CUDA backend: the host entry points of the kernels (the CUDA backend table's entries,
// assembled in backend.cu). Contracts: core/backend.h.
#pragma once
#include "core/backend.h"

namespace hz::cuda {

void fill_runtime_entries(Backend& b);  // runtime.cu: memory, transfers, statistics

// elementwise.cu
void copy(const Tensor& src, Tensor& dst);
void fill(Tensor& dst, double v);
void random_fill(Tensor& dst, const RandomFill& r);
Tensor unary(UnaryOp op, const Tensor& x);
Tensor unary_backward(UnaryOp op, const Tensor& x, const Tensor& gout);
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b, const Shape& out_shape);
Tensor scalar_op(const Tensor& x, double mul, double add, double pow);
void add_inplace(Tensor& dst, const Tensor& src, double alpha);
void axpby(Tensor& x, const Tensor& y, double alpha, double beta);
Tensor swiglu(const Tensor& a, const Tensor& b);
ops::SwiGluGrads swiglu_backward(const Tensor& a, const Tensor& b, const Tensor& g, bool need_a, bool need_b);

// reduce.cu
Tensor reduce_dim(ReduceOp op, const Tensor& x, int64_t dim, bool keepdim, Tensor* argmax);
Tensor cumsum(const Tensor& x, int64_t dim, bool reverse);
Tensor reduce_all(ReduceOp op, const Tensor& x);
double sum_squares(const std::vector<Tensor>& xs);
Tensor scatter_dim(const Tensor& src, const Tensor& index, int64_t dim, const Shape& out_shape);
Tensor softmax(const Tensor& x, int64_t dim, bool log);
Tensor softmax_backward(const Tensor& y, const Tensor& g, int64_t dim, bool log);
CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& weights,
                                 int64_t ignore_index);
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& weights, const Tensor& lse,
                              double weight_sum, int64_t ignore_index, double gscale);
Tensor cross_entropy_rows(const Tensor& logits, const Tensor& targets, int64_t ignore_index);

// nn.cu
Tensor embedding(const Tensor& weight, const Tensor& ids);
Tensor embedding_backward(const Tensor& gout, const Tensor& ids, int64_t vocab);
ops::RmsNormResult rms_norm(const Tensor& x, const Tensor& w, double eps, const Tensor& residual);
ops::RmsNormGrads rms_norm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& gout,
                                    bool need_gx, bool need_gw, const Tensor& gres);
Tensor rotary(const Tensor& x, const Tensor& positions, const RotaryParams& p);
Tensor rotate_angles(const Tensor& x, const Tensor& angles, double mscale, bool inverse);
Tensor rotate_angles_grad(const Tensor& y, const Tensor& gy, const Tensor& angles, bool inverse);
void adamw_update(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const math::AdamWCoef& c);
void adamw_multi_update(std::vector<ops::AdamWSlot>& slots, const math::AdamWCoef& c);
void momentum_update(const Tensor& g, Tensor& buf, Tensor& out, double mu, bool nesterov, double gscale);

// matmul.cu
Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb, double alpha, const Shape& batch_shape);

}  // namespace hz::cuda
