// Horizon: the CUDA backend table (core/backend.h). Every entry of the CPU table has a CUDA kernel
// here; the kernels live in runtime.cu (memory), elementwise.cu, reduce.cu, nn.cu and matmul.cu.
#include "core/cuda/common.cuh"
#include "core/cuda/kernels.cuh"

namespace hz::cuda {

namespace {
Backend make_table() {
  Backend b{};
  b.name = "cuda";
  fill_runtime_entries(b);
  b.copy = copy;
  b.fill = fill;
  b.random_fill = random_fill;
  b.unary = unary;
  b.unary_backward = unary_backward;
  b.binary = binary;
  b.scalar_op = scalar_op;
  b.add_inplace = add_inplace;
  b.axpby = axpby;
  b.swiglu = swiglu;
  b.swiglu_backward = swiglu_backward;
  b.reduce_dim = reduce_dim;
  b.cumsum = cumsum;
  b.reduce_all = reduce_all;
  b.sum_squares = sum_squares;
  b.scatter_dim = scatter_dim;
  b.matmul = matmul;
  b.softmax = softmax;
  b.softmax_backward = softmax_backward;
  b.embedding = embedding;
  b.embedding_backward = embedding_backward;
  b.cross_entropy = cross_entropy;
  b.cross_entropy_backward = cross_entropy_backward;
  b.cross_entropy_rows = cross_entropy_rows;
  b.rms_norm = rms_norm;
  b.rms_norm_backward = rms_norm_backward;
  b.rotary = rotary;
  b.rotate_angles = rotate_angles;
  b.rotate_angles_grad = rotate_angles_grad;
  b.adamw_update = adamw_update;
  b.adamw_multi_update = adamw_multi_update;
  b.momentum_update = momentum_update;
  return b;
}
}  // namespace

const Backend* backend_table() {
  static const Backend b = make_table();
  return &b;
}

}  // namespace hz::cuda
