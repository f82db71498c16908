// The optimizer's multi-tensor update (core/multi_tensor.h, ops::adamw_multi_update_) and the gradient
// clip folded into the step: the same bits as one AdamW kernel per parameter and as clip_grad_norm's
// in-place scaling; the table's blocks, run as a GPU runs them (256 lanes a block), cover every element
// of every tensor once; on CUDA, the same bits as the CPU.
#include <gtest/gtest.h>

#include <memory>

#include "core/device.h"
#include "core/multi_tensor.h"
#include "core/ops.h"
#include "core/rng.h"
#include "optim/clip.h"
#include "optim/optimizer.h"

using namespace hz;

namespace {

std::vector<double> values(const Tensor& t) { return t.to(Device::cpu()).to(DType::F64).to_vector(); }

// Sizes around the chunk and batch boundaries: empty, one element, a chunk +- 1, several chunks; 3
// batches' worth of tensors (kTensors each); f32 and f64 parameters mixed.
struct Params {
  std::vector<ops::AdamWSlot> slots;
};
Params make_params(Device dev, uint64_t seed) {
  const int64_t K = multi::kChunk;
  const std::vector<int64_t> sizes{0, 1, 7, K - 1, K, K + 1, 3 * K + 5, 130, 2 * K};
  Generator gen(seed);
  Params ps;
  for (int i = 0; i < 2 * multi::kTensors + 9; ++i) {
    const int64_t n = sizes[i % sizes.size()];
    const DType dt = i % 5 == 3 ? DType::F64 : DType::F32;
    ops::AdamWSlot s;
    s.p = gen.uniform({n}, -1, 1, dt, dev);
    s.g = gen.normal({n}, 0, 1e-2 * (1 + i % 4), dt, dev);
    s.m = gen.normal({n}, 0, 1e-3, dt, dev);
    Tensor v = gen.uniform({n}, 0, 1e-5, dt, dev);
    s.v = v;
    s.lr = 1e-3 * (1 + i % 3);
    s.decay = 1.0 - s.lr * (i % 2 ? 0.1 : 0.0);
    ps.slots.push_back(s);
  }
  return ps;
}
Params clone(const Params& a) {
  Params b = a;
  for (auto& s : b.slots) {
    s.p = s.p.clone();
    s.m = s.m.clone();
    s.v = s.v.clone();
  }
  return b;
}
void expect_same(const Params& a, const Params& b) {
  ASSERT_EQ(a.slots.size(), b.slots.size());
  for (size_t i = 0; i < a.slots.size(); ++i) {
    SCOPED_TRACE("slot " + std::to_string(i) + " of " + std::to_string(a.slots[i].p.numel()));
    EXPECT_EQ(values(a.slots[i].p), values(b.slots[i].p));
    EXPECT_EQ(values(a.slots[i].m), values(b.slots[i].m));
    EXPECT_EQ(values(a.slots[i].v), values(b.slots[i].v));
  }
}
math::AdamWCoef coef(double gscale) { return {0.9, 0.95, 1 - 0.9 * 0.9, 1 - 0.95 * 0.95, 1e-8, 0.0, 1.0, gscale}; }

// One adamw_update_ per slot, with the clip's factor as clip_grad_norm applies it: the gradient
// scaled in place (ops::axpby_) first.
void one_by_one(Params& ps, double gscale) {
  for (auto& s : ps.slots) {
    Tensor g = s.g.clone();
    if (gscale != 1.0) ops::axpby_(g, Tensor(), gscale, 0.0);
    math::AdamWCoef c = coef(1.0);
    c.lr = s.lr;
    c.decay = s.decay;
    ops::adamw_update_(s.p, g, s.m, s.v, c);
  }
}

}  // namespace

TEST(MultiTensor, AdamWIsOneUpdatePerParameterBitForBit) {
  for (double gscale : {1.0, 0.37}) {
    SCOPED_TRACE("gscale " + std::to_string(gscale));
    const Params start = make_params(Device::cpu(), 5);
    Params one = clone(start), multi = clone(start);
    one_by_one(one, gscale);
    ops::adamw_multi_update_(multi.slots, coef(gscale));
    expect_same(one, multi);
    // the update moved the parameters (a check that can fail)
    EXPECT_NE(values(multi.slots[2].p), values(start.slots[2].p));
  }
}

// The blocks as a GPU launch runs them: every lane of every block of every batch, on the host.
TEST(MultiTensor, TheTablesBlocksCoverEveryElementOnce) {
  const Params start = make_params(Device::cpu(), 9);
  Params one = clone(start), lanes = clone(start);
  one_by_one(one, 1.0);
  std::vector<multi::AdamWTensor> f32;
  std::vector<multi::AdamWTensor> f64;
  int64_t nonempty = 0;
  for (auto& s : lanes.slots) {
    nonempty += s.p.numel() > 0;
    (s.p.dtype() == DType::F32 ? f32 : f64)
        .push_back({s.p.raw_data(), s.g.raw_data(), s.m.raw_data(), s.v.raw_data(), s.p.numel(), s.lr, s.decay});
  }
  auto run = [](auto tag, const std::vector<multi::AdamWTensor>& ts) {
    using T = decltype(tag);
    int64_t tensors = 0;
    for (const multi::AdamWBatch<T>& b : multi::adamw_batches<T>(ts)) {
      EXPECT_LE(b.count, multi::kTensors);
      tensors += b.count;
      for (int64_t blk = 0; blk < b.blocks(); ++blk)
        for (int lane = 0; lane < 256; ++lane) multi::adamw_block(b, coef(1.0), blk, lane, 256);
    }
    return tensors;
  };
  const int64_t batched = run(float{}, f32) + run(double{}, f64);
  EXPECT_EQ(batched, nonempty);  // empty tensors left out, every other one in a batch
  EXPECT_GT(multi::adamw_batches<float>(f32).size(), 1u);  // several batches were exercised
  expect_same(one, lanes);
}

TEST(MultiTensor, AdamWOnCudaIsTheCpusBitForBit) {
  if (!cuda::available()) GTEST_SKIP() << "no usable CUDA device";
  const Params cpu = make_params(Device::cpu(), 13);
  Params host = clone(cpu), dev = clone(cpu);
  for (auto& s : dev.slots) {
    s.p = s.p.to(Device::cuda(0));
    s.g = s.g.to(Device::cuda(0));
    s.m = s.m.to(Device::cuda(0));
    s.v = s.v.to(Device::cuda(0));
  }
  ops::adamw_multi_update_(host.slots, coef(0.5));
  ops::adamw_multi_update_(dev.slots, coef(0.5));
  expect_same(host, dev);
}

namespace {
// Two copies of the same parameters with the same gradients (a 2-D matrix for Muon, a vector and a
// strided matrix for AdamW), stepped three times with gradients whose norm exceeds the clip.
struct Model {
  std::vector<std::unique_ptr<ag::Variable>> vars;
  optim::NamedParams named;
  std::unique_ptr<optim::Optimizer> opt;
};
Model make_model(bool muon) {
  Model m;
  Generator gen(21);
  auto add = [&](const std::string& name, Tensor v) {
    m.vars.push_back(std::make_unique<ag::Variable>(v, true, name));
    m.named.emplace_back(name, m.vars.back().get());
  };
  add("w", gen.normal({12, 8}, 0, 0.5));
  add("b", gen.normal({8}, 0, 0.5));
  add("t", gen.normal({8, 6}, 0, 0.5).transpose(0, 1));  // a strided parameter: AdamW's per-tensor path
  std::vector<optim::OptimizerSpec> specs;
  if (muon) {
    optim::OptimizerSpec mu;
    mu.kind = optim::OptimizerSpec::Kind::Muon;
    mu.groups = {{"hidden", {m.named[0]}, 2e-2, 0.1}};
    optim::OptimizerSpec ad;
    ad.groups = {{"rest", {m.named[1], m.named[2]}, 1e-2, 0.0}};
    specs = {mu, ad};
  } else {
    optim::OptimizerSpec ad;
    ad.groups = {{"all", m.named, 1e-2, 0.1}};
    specs = {ad};
  }
  m.opt = optim::build(specs);
  return m;
}
}  // namespace

TEST(MultiTensor, TheClipFactorInTheStepIsTheClipsInPlaceScaling) {
  for (bool muon : {false, true}) {
    SCOPED_TRACE(muon ? "muon + adamw" : "adamw");
    Model a = make_model(muon), b = make_model(muon);
    Generator gen(33);
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < a.named.size(); ++i) {
        const Tensor g = gen.normal(a.named[i].second->shape(), 0, 3.0);
        a.named[i].second->grad() = g.clone();
        b.named[i].second->grad() = g.clone();
      }
      const double na = optim::clip_grad_norm(a.named, 1.0);  // scales a's gradients in place
      a.opt->step(1.0);
      const double nb = optim::global_grad_norm(b.named);
      EXPECT_EQ(na, nb);
      const double f = optim::clip_factor(nb, 1.0);
      EXPECT_LT(f, 0.5);  // the clip is active
      b.opt->step(1.0, f);
      for (size_t i = 0; i < a.named.size(); ++i)
        EXPECT_EQ(values(a.named[i].second->value()), values(b.named[i].second->value())) << a.named[i].first;
      a.opt->zero_grad();
      b.opt->zero_grad();
    }
    std::map<std::string, Tensor> sa, sb;
    a.opt->state_dict(sa);
    b.opt->state_dict(sb);
    ASSERT_EQ(sa.size(), sb.size());
    for (const auto& [k, t] : sa) EXPECT_EQ(values(t), values(sb.at(k))) << k;
  }
}

TEST(MultiTensor, ClipFactorAndItsRange) {
  EXPECT_EQ(optim::clip_factor(4.0, 1.0), 0.25);
  EXPECT_EQ(optim::clip_factor(0.5, 1.0), 1.0);
  EXPECT_EQ(optim::clip_factor(4.0, 0.0), 1.0);  // clipping off
  EXPECT_EQ(optim::clip_factor(std::nan(""), 1.0), 1.0);
  Model m = make_model(false);
  for (auto& [n, v] : m.named) v->grad() = Tensor::ones(v->shape());
  EXPECT_THROW(m.opt->step(1.0, 0.0), ValueError);
  EXPECT_THROW(m.opt->step(1.0, 1.5), ValueError);
  EXPECT_THROW(m.opt->step(1.0, std::nan("")), ValueError);
}
