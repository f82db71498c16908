// A model whose values underflow: initialised at std 1e-20, most of its gradients are near
// 1e-20 and AdamW's second moments (g^2) near 1e-40, below FLT_MIN (1.18e-38). Under IEEE
// arithmetic those are subnormal, and every operation on one costs a microcode assist on x86 cores
// (PyTorch's default initialisation does the same to its AdamW state). With the training default
// (FTZ+DAZ on every thread, core/device.h) none is left. The speed difference is measured by
// scripts/bench/bench_train.sh's denormal row.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "core/device.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"
#include "tests/core/test_util.h"

using namespace hz;

using hzt::FlushGuard;

namespace {

// Subnormal values in the optimizer state after two training steps of the underflowing model.
int64_t subnormal_state(bool flush) {
  cpu::set_flush_denormals(flush);
  nn::ModelConfig c;
  c.vocab_size = 50;
  c.d_model = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.mlp_hidden = 128;
  c.init_std = 1e-20;
  nn::Transformer m(c, 3);
  std::vector<double> v(4 * 33);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((i * 7) % 50);
  const Tensor ids = Tensor::from_vector(v, {4, 33}, DType::I64);
  optim::AdamW opt({{"all", m.named_parameters(), 1e-3, 0.0}});
  for (int step = 0; step < 2; ++step) {
    ag::Variable loss = m.loss(ids.narrow(1, 0, 32).contiguous(), ids.narrow(1, 1, 32).contiguous());
    EXPECT_TRUE(std::isfinite(loss.value().item()));
    loss.backward();
    opt.step();
    opt.zero_grad();
  }
  std::map<std::string, Tensor> state;
  opt.state_dict(state);
  int64_t n = 0;
  for (const auto& kv : state) n += hzt::count_subnormals(kv.second);
  return n;
}

}  // namespace

TEST(Denormals, AnUnderflowingModelKeepsNoSubnormalStateWhenFlushed) {
  FlushGuard guard;
  EXPECT_GT(subnormal_state(false), 10000);
  EXPECT_EQ(subnormal_state(true), 0);
}
