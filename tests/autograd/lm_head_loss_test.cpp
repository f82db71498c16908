// The chunked LM head + loss (ag::lm_head_loss): the loss and dh are bitwise those of the
// materialised path cross_entropy(matmul(h, W^T)) (its products row-blocked, as the model's); dW
// matches it to round-off; and loss, dh and dW are bitwise the same for every chunk in every dtype
// (the head's CPU products take rows in fixed blocks, core/device.h, so a BLAS whose rows depend
// on the row count changes nothing), with weights and ignored rows.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/functions.h"
#include "core/device.h"
#include "core/rng.h"

using namespace hz;

namespace {

struct Out {
  double loss;
  std::vector<double> dh, dw;
};

Out run(DType dt, int64_t chunk, bool materialised, Device dev = Device::cpu()) {
  const int64_t N = 700, C = 48, V = 301;  // N not a multiple of the slice
  Generator g(3);
  ag::Variable h(g.normal({N, C}, 0, 1, DType::F32).to(dt).to(dev), true),
      w(g.normal({V, C}, 0, 0.2, DType::F32).to(dt).to(dev), true);
  std::vector<double> tv(N), wv(N);
  for (int64_t i = 0; i < N; ++i) {
    tv[i] = static_cast<double>((i * 37) % V);
    wv[i] = i % 11 == 0 ? 0.0 : 1.0 + (i % 3);
  }
  tv[5] = -100;  // ignored
  cpu::RowBlockedProducts blocked;  // the materialised head's products as the model computes them
  const Tensor targets = Tensor::from_vector(tv, {N}, DType::I64), weights = Tensor::from_vector(wv, {N}, DType::F32);
  ag::Variable loss = materialised ? ag::cross_entropy(ag::matmul(h, w, false, true), targets, weights)
                                   : ag::lm_head_loss(h, w, targets, weights, chunk);
  loss.backward();
  return {loss.value().item(), h.grad().to_vector(), w.grad().to_vector()};
}

}  // namespace

TEST(LmHeadLoss, BitwiseForEveryChunkAndAgreesWithTheMaterialisedHead) {
  for (DType dt : {DType::F32, DType::BF16, DType::F64}) {
    SCOPED_TRACE(dtype_name(dt));
    const Out all = run(dt, 0, false), ref = run(dt, 0, true);
    EXPECT_EQ(all.loss, ref.loss) << "the loss sums the same rows in the same order";
    EXPECT_EQ(all.dh, ref.dh) << "dh rows are the same products";
    double scale = 0, err = 0;
    for (size_t i = 0; i < ref.dw.size(); ++i) {
      scale = std::max(scale, std::abs(ref.dw[i]));
      err = std::max(err, std::abs(all.dw[i] - ref.dw[i]));
    }
    const double tol = dt == DType::F64 ? 1e-14 : dt == DType::F32 ? 1e-6 : 2e-2;  // the dtype's round-off
    EXPECT_LE(err, tol * scale) << "dW differs from one GEMM over all rows by more than round-off";
    for (int64_t chunk : {int64_t(1), int64_t(256), int64_t(300), int64_t(512), int64_t(100000)}) {
      const Out c = run(dt, chunk, false);
      EXPECT_EQ(c.loss, all.loss) << "chunk " << chunk;
      EXPECT_EQ(c.dh, all.dh) << "chunk " << chunk;
      EXPECT_EQ(c.dw, all.dw) << "chunk " << chunk;
    }
  }
}

// On a GPU each chunk's dW is one GEMM (not the CPU's fixed 256-row slices): the chunks agree with
// the CPU in float64 to the dtype's round-off, and each setting repeats bitwise.
TEST(LmHeadLoss, CudaAgreesWithTheCpuForEveryChunk) {
  if (!cuda::available()) GTEST_SKIP() << "no usable CUDA device (no GPU/driver visible)";
  const Out ref = run(DType::F64, 0, false);
  double scale = 0;
  for (double x : ref.dw) scale = std::max(scale, std::abs(x));
  for (DType dt : {DType::F32, DType::BF16})
    for (int64_t chunk : {int64_t(0), int64_t(256), int64_t(512)}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " chunk " + std::to_string(chunk));
      const Out c = run(dt, chunk, false, Device::cuda(0)), again = run(dt, chunk, false, Device::cuda(0));
      EXPECT_EQ(c.dw, again.dw);
      EXPECT_EQ(c.loss, again.loss);
      const double tol = dt == DType::F32 ? 1e-5 : 3e-2;
      EXPECT_NEAR(c.loss, ref.loss, tol * std::abs(ref.loss));
      double err = 0;
      for (size_t i = 0; i < c.dw.size(); ++i) err = std::max(err, std::abs(c.dw[i] - ref.dw[i]));
      EXPECT_LE(err, tol * scale);
    }
}
