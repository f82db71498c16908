// The autograd engine: accumulation, graph shapes, depth, no-grad, freeing saved tensors.
#include <gtest/gtest.h>

#include <algorithm>

#include "autograd/functions.h"
#include "core/rng.h"

using namespace hz;
using namespace hz::ag;

namespace {
Variable leaf(std::vector<double> v, Shape s) { return Variable(Tensor::from_vector(v, s, DType::F64), true); }
}  // namespace

TEST(Engine, ValueUsedTwiceAddsGradients) {
  Variable x = leaf({3.0}, {1});
  Variable y = add(mul_scalar(x, 2.0), mul(x, x));  // 2x + x^2 -> dy/dx = 2 + 2x = 8
  sum_all(y).backward();
  EXPECT_DOUBLE_EQ(x.grad().item(), 8.0);
}

TEST(Engine, DiamondGraph) {
  // a -> (b = a*2, c = a^2) -> d = b * c ; dd/da = 2c + b*2a = 2a^2 + 4a^2 = 6a^2
  Variable a = leaf({1.5, -2.0}, {2});
  Variable b = mul_scalar(a, 2.0);
  Variable c = mul(a, a);
  Variable d = mul(b, c);
  sum_all(d).backward();
  EXPECT_DOUBLE_EQ(a.grad().at({0}), 6 * 1.5 * 1.5);
  EXPECT_DOUBLE_EQ(a.grad().at({1}), 6 * 4.0);
}

TEST(Engine, GradientsAccumulateAcrossBackwardCallsUntilZeroed) {
  Variable x = leaf({1.0, 2.0}, {2});
  sum_all(mul_scalar(x, 3.0)).backward();
  sum_all(mul_scalar(x, 3.0)).backward();
  EXPECT_DOUBLE_EQ(x.grad().at({1}), 6.0);
  x.zero_grad();
  sum_all(mul_scalar(x, 3.0)).backward();
  EXPECT_DOUBLE_EQ(x.grad().at({1}), 3.0);
}

TEST(Engine, LongChainHasNoStackOverflow) {
  // 100,000 nodes: both the backward walk and the graph's destruction must be iterative.
  Variable x = leaf({1.0}, {1});
  Variable y = x;
  for (int i = 0; i < 100000; ++i) y = add_scalar(y, 1e-5);
  EXPECT_NEAR(y.item(), 2.0, 1e-9);
  y.backward();
  EXPECT_DOUBLE_EQ(x.grad().item(), 1.0);
  {
    Variable z = x;
    for (int i = 0; i < 100000; ++i) z = mul_scalar(z, 1.0);
  }  // destroyed here without recursion
  SUCCEED();
}

TEST(Engine, NoGradGuardRecordsNothing) {
  Variable x = leaf({2.0}, {1});
  Variable y;
  {
    NoGradGuard ng;
    EXPECT_FALSE(grad_enabled());
    y = mul(x, x);
    {
      NoGradGuard nested;
    }
    EXPECT_FALSE(grad_enabled());
  }
  EXPECT_TRUE(grad_enabled());
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
  EXPECT_THROW(y.backward(), ValueError);
}

TEST(Engine, InputsWithoutRequiresGradGetNoGradient) {
  Variable w = leaf({1.0, 2.0, 3.0}, {3});
  Variable c(Tensor::from_vector({4.0, 5.0, 6.0}, {3}, DType::F64), false);
  Variable y = sum_all(mul(w, c));
  ASSERT_TRUE(y.requires_grad());
  y.backward();
  EXPECT_DOUBLE_EQ(w.grad().at({2}), 6.0);
  EXPECT_FALSE(c.grad().defined());
  // the node has no edge for the constant
  Variable z = mul(w, c);
  EXPECT_TRUE(z.grad_fn()->edges[0].active());
  EXPECT_FALSE(z.grad_fn()->edges[1].active());
}

TEST(Engine, OpsOnConstantsOnlyProduceConstants) {
  Variable a(Tensor::ones({2}, DType::F64)), b(Tensor::ones({2}, DType::F64));
  Variable y = add(a, b);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
}

TEST(Engine, SavedTensorsAreFreedAfterBackward) {
  Variable x = leaf({1.0, 2.0}, {2});
  Tensor big = Tensor::ones({2}, DType::F64);
  Variable c(big, false);
  Variable y = sum_all(mul(x, c));  // mul saves c's value for x's gradient
  const long before = big.storage().use_count();
  y.backward();
  EXPECT_LT(big.storage().use_count(), before);  // the node's capture was released
  EXPECT_THROW(y.backward(), ValueError);          // and a second pass says so
}

TEST(Engine, RetainGraphAllowsASecondBackward) {
  Variable x = leaf({2.0}, {1});
  Variable y = sum_all(mul(x, x));
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  EXPECT_DOUBLE_EQ(x.grad().item(), 8.0);
}

TEST(Engine, NonScalarBackwardNeedsExplicitGradient) {
  Variable x = leaf({1.0, 2.0}, {2});
  Variable y = mul_scalar(x, 2.0);
  EXPECT_THROW(y.backward(), ShapeError);
  y.backward(Tensor::from_vector({1.0, 10.0}, {2}, DType::F64));
  EXPECT_DOUBLE_EQ(x.grad().at({1}), 20.0);
}

TEST(Engine, IntegerTensorsCannotRequireGrad) {
  EXPECT_THROW(Variable(Tensor::zeros({2}, DType::I64), true), DTypeError);
}

TEST(Engine, BackwardIsDeterministic) {
  // same graph twice -> bitwise-identical gradients (f32, OpenMP paths exercised)
  auto run = [] {
    Generator g(11);
    Variable w(g.normal({257, 129}), true);
    Variable x(g.normal({64, 129}));
    Variable loss = mean_all(square(silu(linear(x, w))));
    loss.backward();
    return w.grad().to_vector();
  };
  EXPECT_EQ(run(), run());
}

TEST(Engine, GradReadyHookFiresOnceWhenTheLeafIsComplete) {
  // w is used three times; its hook must fire once, after the last contribution
  Variable w = leaf({2.0}, {1});
  Variable x = leaf({3.0}, {1});
  int fired = 0;
  double seen = 0;
  w.impl()->grad_ready_hook = [&] {
    ++fired;
    seen = w.grad().item();
  };
  Variable y = sum_all(add(mul(w, x), mul(w, mul(w, x))));  // wx + w^2 x -> dy/dw = x + 2wx = 15
  y.backward();
  EXPECT_EQ(fired, 1);
  EXPECT_DOUBLE_EQ(seen, 15.0);
}

// A leaf's first gradient is kept without a copy only when nothing else can see its buffer; later
// gradients add into it in place, so the seed, one gradient handed to two inputs, and views must
// come out of that unchanged.
TEST(Engine, FirstGradientIsCopiedOnlyWhenSomethingElseSeesIt) {
  const Tensor seed = Tensor::from_vector({10.0, 20.0}, {2}, DType::F64);  // the leaves' dtype: no conversion
  Variable x = leaf({1.0, 2.0}, {2});
  reshape(x, {2}).backward(seed);  // the seed itself reaches x
  reshape(x, {2}).backward(seed);
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{20, 40}));
  EXPECT_EQ(seed.to_vector(), (std::vector<double>{10, 20}));
  Variable p = leaf({1.0, 2.0}, {2}), q = leaf({3.0, 4.0}, {2});
  add(p, q).backward(seed);  // add hands the same gradient to both inputs
  sum_all(mul_scalar(p, 1.0)).backward();
  EXPECT_EQ(p.grad().to_vector(), (std::vector<double>{11, 21}));
  EXPECT_EQ(q.grad().to_vector(), (std::vector<double>{10, 20}));
  Variable a = leaf({1.0, 2.0}, {2});
  add(a, a).backward(seed);
  EXPECT_EQ(a.grad().to_vector(), (std::vector<double>{20, 40}));
  EXPECT_EQ(seed.to_vector(), (std::vector<double>{10, 20}));
}

// ... and a fresh gradient is kept as it is: the backward of 2 x holds one buffer of x's size at
// its peak, not two.
TEST(Engine, FreshFirstGradientIsNotCopied) {
  const int64_t n = 1 << 20;
  Variable x(Tensor::ones({n}, DType::F32), true);
  Variable y = mul_scalar(x, 2.0);
  const Tensor seed = Tensor::ones({n}, DType::F32);
  const int64_t base = memory_stats(Device::cpu()).allocated;
  reset_peak_memory(Device::cpu());
  y.backward(seed);
  const int64_t extra = memory_stats(Device::cpu()).peak - base;
  EXPECT_EQ(x.grad().at({0}), 2.0);
  EXPECT_LT(extra, 2 * n * 4) << "the gradient was copied";
  EXPECT_GE(extra, n * 4);
}

// Grads::pending: a backward sees the gradient its input's other consumers have already given it,
// and none for a leaf, an input nobody else has reached, or a producer it reads twice.
TEST(Engine, ABackwardSeesThePendingGradientOfItsInput) {
  Variable x = leaf({1.0, 2.0}, {2});
  std::vector<std::string> seen;
  auto probe = [&](const Variable& in, const std::vector<Variable>& inputs, const char* name) {
    return make_result(in.value().clone(), inputs, name, [&seen, name] {
      return [&seen, name](const Tensor& g, Grads& gr) {
        for (size_t i = 0; i < gr.out().size(); ++i) {
          seen.push_back(std::string(name) + (gr.pending(i).defined() ? " pending" : " none"));
          gr.set(i, g);
        }
      };
    });
  };
  Variable h = mul_scalar(x, 3.0);
  Variable twice = probe(h, {h, h}, "twice");  // the same producer twice: nothing offered
  Variable leafy = probe(x, {x}, "leaf");      // a leaf: nothing offered
  sum_all(add(twice, leafy)).backward();
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<std::string>{"leaf none", "twice none", "twice none"}));
  // two single-input consumers of one value: whichever the engine runs second sees the first's
  Variable a = mul_scalar(x, 2.0);
  seen.clear();
  Variable b = probe(a, {a}, "first");
  Variable c = probe(mul_scalar(a, 7.0), {a}, "second");  // reads a; a's other consumer is b
  sum_all(add(b, c)).backward();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1], std::string(seen[0].rfind("first", 0) == 0 ? "second" : "first") + " pending");
}

namespace {
// A residual stream of `blocks` pre-norm blocks (x = x + f(norm1(x)); x = x + g(norm2(x))) and a
// final norm, with the adds and norms either as add_rms_norm / rms_norm (fused: the norms add the
// pending gradient in their pass) or with every norm's input behind an exact x * 1 (nothing pending
// for them: the engine adds the gradients). Returns the loss and every gradient.
std::vector<std::vector<double>> residual_stream(bool fused, DType act) {
  Generator gen(71);
  auto param = [&](Shape s, double lo, double hi) { return Variable(gen.uniform(s, lo, hi, DType::F32), true); };
  const int64_t B = 2, T = 5, C = 12, blocks = 3;
  Variable x0 = param({B, T, C}, -1.5, 1.5);
  std::vector<Variable> params{x0};
  auto norm = [&](const Variable& in, const Variable& w) {
    return rms_norm(fused ? in : mul_scalar(in, 1.0), w, 1e-5);
  };
  Variable x = cast(x0, act);
  for (int64_t l = 0; l < blocks; ++l) {
    Variable w1 = param({C}, 0.5, 1.5), w2 = param({C}, 0.5, 1.5), u = param({C}, -1, 1), v = param({C}, -1, 1);
    params.insert(params.end(), {w1, w2, u, v});
    Variable a = tanh(mul(norm(x, w1), cast(u, act)));
    Variable h, n2;
    if (fused) {
      ResidualNorm r = add_rms_norm(x, a, w2, 1e-5);
      h = r.sum;
      n2 = r.normed;
    } else {
      h = add(x, a);
      n2 = norm(h, w2);
    }
    x = add(h, sigmoid(mul(n2, cast(v, act))));
  }
  Variable wf = param({C}, 0.5, 1.5), z = param({B, T, C}, -1, 1);
  params.insert(params.end(), {wf, z});
  Variable loss = sum_all(cast(mul(norm(x, wf), cast(z, act)), DType::F32));
  loss.backward();
  std::vector<std::vector<double>> out{{loss.item()}};
  for (const Variable& p : params) out.push_back(p.grad().to(DType::F64).to_vector());
  return out;
}
}  // namespace

// The residual stream's fusions change no bit: add_rms_norm's forward and the norms' backward,
// which adds the next residual's gradient in its own pass, against the two ops and the engine's add.
TEST(Engine, FusedResidualNormsGiveTheUnfusedGradientsBitForBit) {
  for (DType act : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(act));
    const auto fused = residual_stream(true, act), plain = residual_stream(false, act);
    ASSERT_EQ(fused.size(), plain.size());
    for (size_t i = 0; i < fused.size(); ++i) EXPECT_EQ(fused[i], plain[i]) << "entry " << i;
    // the check has teeth: the gradients are not all zero
    EXPECT_GT(std::abs(fused[1][0]) + std::abs(fused[1][7]), 0.0);
  }
}
