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

constexpr int64_t N = 700, C = 48, V = 301;  // N not a multiple of the slice

// row n's target (row 5 ignored) and weight
int64_t target_of(int64_t n) { return n == 5 ? -100 : (n * 37) % V; }
double weight_of(int64_t n) { return n % 11 == 0 ? 0.0 : 1.0 + (n % 3); }

struct Out {
  double loss;
  std::vector<double> dh, dw, h, w;  // h, w: the inputs
};

Out run(DType dt, int64_t chunk, bool materialised, Device dev = Device::cpu()) {
  Generator g(3);
  ag::Variable h(g.normal({N, C}, 0, 1, DType::F32).to(dt).to(dev), true),
      w(g.normal({V, C}, 0, 0.2, DType::F32).to(dt).to(dev), true);
  std::vector<double> tv(N), wv(N);
  for (int64_t i = 0; i < N; ++i) {
    tv[i] = static_cast<double>(target_of(i));
    wv[i] = weight_of(i);
  }
  cpu::RowBlockedProducts blocked;  // the materialised head's products as the model computes them
  const Tensor targets = Tensor::from_vector(tv, {N}, DType::I64), weights = Tensor::from_vector(wv, {N}, DType::F32);
  ag::Variable loss = materialised ? ag::cross_entropy(ag::matmul(h, w, false, true), targets, weights)
                                   : ag::lm_head_loss(h, w, targets, weights, chunk);
  loss.backward();
  return {loss.value().item(), h.grad().to_vector(), w.grad().to_vector(), h.value().to_vector(),
          w.value().to_vector()};
}

// dW = dlogits^T h in double from run()'s inputs (dlogits[n] = weight_n / sum(weight) (softmax(h_n W^T) -
// onehot(target_n)), 0 for the ignored row), and the magnitude of its terms, sum_n |dlogits[n, v] h[n, c]|.
void reference_dw(const Out& in, std::vector<double>& dw, std::vector<double>& mag) {
  dw.assign(V * C, 0.0);
  mag.assign(V * C, 0.0);
  double total = 0;
  for (int64_t n = 0; n < N; ++n) total += target_of(n) < 0 ? 0.0 : weight_of(n);
  std::vector<double> p(V);
  for (int64_t n = 0; n < N; ++n) {
    const double wt = target_of(n) < 0 ? 0.0 : weight_of(n);
    if (wt == 0) continue;
    double mx = -1e300, z = 0;
    for (int64_t v = 0; v < V; ++v) {
      double acc = 0;
      for (int64_t c = 0; c < C; ++c) acc += in.h[n * C + c] * in.w[v * C + c];
      p[v] = acc;
      mx = std::max(mx, acc);
    }
    for (int64_t v = 0; v < V; ++v) z += p[v] = std::exp(p[v] - mx);
    for (int64_t v = 0; v < V; ++v) {
      const double dl = wt / total * (p[v] / z - (v == target_of(n) ? 1.0 : 0.0));
      for (int64_t c = 0; c < C; ++c) {
        dw[v * C + c] += dl * in.h[n * C + c];
        mag[v * C + c] += std::abs(dl * in.h[n * C + c]);
      }
    }
  }
}

}  // namespace

TEST(LmHeadLoss, BitwiseForEveryChunkAndAgreesWithTheMaterialisedHead) {
  const Out exact = run(DType::F64, 0, false);
  std::vector<double> dw, mag;
  reference_dw(exact, dw, mag);
  double worst = 0;
  for (size_t i = 0; i < dw.size(); ++i) worst = std::max(worst, std::abs(exact.dw[i] - dw[i]) / mag[i]);
  ASSERT_LT(worst, 1e-12) << "the double-precision reference is not the gradient the op computes";
  for (DType dt : {DType::F32, DType::BF16, DType::F64}) {
    SCOPED_TRACE(dtype_name(dt));
    const Out all = run(dt, 0, false), ref = run(dt, 0, true);
    EXPECT_EQ(all.loss, ref.loss) << "the loss sums the same rows in the same order";
    EXPECT_EQ(all.dh, ref.dh) << "dh rows are the same products";
    if (dt == DType::BF16) {  // bf16 inputs (not the reference's): the two against each other, to bf16's round-off
      double scale = 0, err = 0;
      for (size_t i = 0; i < ref.dw.size(); ++i) {
        scale = std::max(scale, std::abs(ref.dw[i]));
        err = std::max(err, std::abs(all.dw[i] - ref.dw[i]));
      }
      EXPECT_LE(err, 2e-2 * scale) << "dW differs from one GEMM over all rows by more than round-off";
    } else {
      // the same inputs as the double reference: the sums over N = 700 rows (three slices, or one GEMM) round
      // to ~u sqrt(N) of their terms' magnitude, dlogits' own round-off included; allow 8 u sqrt(N) (measured:
      // <= 0.5 in f32; 0.9 in f64, where the reference's sums round as much)
      const double u = dt == DType::F32 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -53);
      for (const Out* o : {&all, &ref}) {
        double r = 0;
        for (size_t i = 0; i < dw.size(); ++i)
          r = std::max(r, std::abs(o->dw[i] - dw[i]) / (u * std::sqrt(static_cast<double>(N)) * mag[i]));
        EXPECT_LE(r, 8.0) << (o == &all ? "dW (slices)" : "dW (one GEMM)")
                          << ": error / (u sqrt(N) sum|dlogits h|) above 8, more than round-off";
      }
    }
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
