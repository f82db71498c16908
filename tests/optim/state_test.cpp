// Optimizer state dicts: a run restored mid-way continues bitwise identically; the loader refuses
// missing keys, shape mismatches and foreign keys without loading anything; the composite.
#include <gtest/gtest.h>

#include <memory>

#include "core/error.h"
#include "optim/optimizer.h"
#include "optim/partition.h"
#include "tests/core/test_util.h"
#include "tests/optim/optim_test_util.h"

using namespace hz;
using namespace hz::optim;
using namespace hz::optim::testing;

namespace {

// A small "model": hidden matrices for Muon (one tall, one wide), embedding/head/gain for AdamW.
struct Model {
  std::vector<std::pair<std::string, Shape>> spec = {{"embed.weight", {7, 4}},
                                                     {"layers.0.attn.wq.weight", {4, 4}},
                                                     {"layers.0.mlp.w1.weight", {6, 4}},
                                                     {"layers.0.mlp.w2.weight", {4, 6}},
                                                     {"layers.0.norm1.weight", {4}},
                                                     {"head.weight", {7, 4}}};
  std::vector<ag::Variable> vars;
  explicit Model(DType dt) {
    for (size_t k = 0; k < spec.size(); ++k)
      vars.push_back(make_param(noise(shape_numel(spec[k].second), k, 0, 0.3), spec[k].second, dt));
  }
  NamedParams named() {
    NamedParams n;
    for (size_t k = 0; k < spec.size(); ++k) n.emplace_back(spec[k].first, &vars[k]);
    return n;
  }
  void copy_from(const Model& o) {
    for (size_t k = 0; k < vars.size(); ++k) vars[k].value().copy_(o.vars[k].value());
  }
  void set_grads(uint64_t step) {
    for (size_t k = 0; k < vars.size(); ++k) set_grad(vars[k], noise(vars[k].numel(), 100 + k, step));
  }
  std::vector<std::vector<double>> values() const {
    std::vector<std::vector<double>> v;
    for (const auto& x : vars) v.push_back(x.value().to_vector());
    return v;
  }
};

std::unique_ptr<Optimizer> build(Model& m) {
  Partition p = partition_for_muon(m.named());
  std::vector<std::unique_ptr<Optimizer>> parts;
  parts.push_back(std::make_unique<Muon>(std::vector<ParamGroup>{ParamGroup{"hidden", p.hidden_matrices, 0.02, 0.1}}));
  parts.push_back(std::make_unique<AdamW>(std::vector<ParamGroup>{ParamGroup{"rest", p.rest, 3e-3, 0.1}}));
  return std::make_unique<CompositeOptimizer>(std::move(parts));
}

TEST(StateDict, RestoredMidwayContinuesBitwise) {
  for (DType dt : {DType::F32, DType::F64}) {
    Model a(dt);
    auto opt_a = build(a);
    const double mult[6] = {0.2, 0.6, 1.0, 0.9, 0.5, 0.1};
    for (int s = 0; s < 3; ++s) {
      a.set_grads(s);
      opt_a->step(mult[s]);
    }
    std::map<std::string, Tensor> sd;
    opt_a->state_dict(sd);

    Model b(dt);  // same initial values as a, then a's current values
    b.copy_from(a);
    auto opt_b = build(b);
    opt_b->load_state_dict(sd);
    EXPECT_EQ(opt_b->step_count(), 3);

    Model c(dt);  // control: same values, fresh optimizer state
    c.copy_from(a);
    auto opt_c = build(c);

    for (int s = 3; s < 6; ++s) {
      a.set_grads(s);
      b.set_grads(s);
      c.set_grads(s);
      opt_a->step(mult[s]);
      opt_b->step(mult[s]);
      opt_c->step(mult[s]);
    }
    EXPECT_EQ(a.values(), b.values()) << dtype_name(dt);  // bitwise
    const auto va = a.values(), vc = c.values();
    for (size_t k = 0; k < va.size(); ++k)  // the state mattered, to every parameter
      EXPECT_TRUE(hzt::differs(va[k], vc[k], hzt::kValuesDiffer)) << dtype_name(dt) << " " << a.spec[k].first;

    // the state dicts agree bitwise too
    std::map<std::string, Tensor> sa, sb;
    opt_a->state_dict(sa);
    opt_b->state_dict(sb);
    ASSERT_EQ(sa.size(), sb.size());
    for (const auto& [k, t] : sa) EXPECT_EQ(t.to_vector(), sb.at(k).to_vector()) << k;
  }
}

TEST(StateDict, KeysOfTheComposite) {
  Model m(DType::F32);
  auto opt = build(m);
  EXPECT_EQ(opt->name(), "composite");
  std::map<std::string, Tensor> sd;
  opt->state_dict(sd);
  std::vector<std::string> want = {"adamw/embed.weight/exp_avg", "adamw/embed.weight/exp_avg_sq",
                                   "adamw/head.weight/exp_avg", "adamw/head.weight/exp_avg_sq",
                                   "adamw/layers.0.norm1.weight/exp_avg", "adamw/layers.0.norm1.weight/exp_avg_sq",
                                   "adamw/step", "composite/step",
                                   "muon/layers.0.attn.wq.weight/momentum_buffer",
                                   "muon/layers.0.mlp.w1.weight/momentum_buffer",
                                   "muon/layers.0.mlp.w2.weight/momentum_buffer", "muon/step"};
  std::vector<std::string> got;
  for (const auto& [k, t] : sd) got.push_back(k);
  EXPECT_EQ(got, want);
  EXPECT_EQ(sd.at("muon/layers.0.mlp.w1.weight/momentum_buffer").shape(), Shape({6, 4}));
  EXPECT_EQ(sd.at("adamw/embed.weight/exp_avg").dtype(), DType::F32);
  // state_dict returns copies: stepping does not change an earlier dict
  m.set_grads(0);
  opt->step();
  for (double v : sd.at("adamw/embed.weight/exp_avg").to_vector()) EXPECT_EQ(v, 0.0);
  EXPECT_EQ(sd.at("composite/step").item(), 0.0);
  EXPECT_EQ(opt->step_count(), 1);
}

void expect_refused(Optimizer& opt, const std::map<std::string, Tensor>& sd, const std::string& key) {
  std::map<std::string, Tensor> before;
  opt.state_dict(before);
  try {
    opt.load_state_dict(sd);
    ADD_FAILURE() << "expected ValueError for " << key;
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
  }
  std::map<std::string, Tensor> after;  // nothing was loaded
  opt.state_dict(after);
  ASSERT_EQ(before.size(), after.size());
  for (const auto& [k, t] : before) EXPECT_EQ(t.to_vector(), after.at(k).to_vector()) << k;
}

TEST(StateDict, LoaderRefusesAndLoadsNothing) {
  Model src(DType::F32);
  auto opt_src = build(src);
  for (int s = 0; s < 2; ++s) {
    src.set_grads(s);
    opt_src->step();
  }
  std::map<std::string, Tensor> good;
  opt_src->state_dict(good);

  Model m(DType::F32);
  auto opt = build(m);
  m.set_grads(7);
  opt->step();  // some non-zero state to compare against

  {  // missing buffer (the AdamW part comes after the Muon part: Muon must not load first)
    auto sd = good;
    sd.erase("adamw/head.weight/exp_avg_sq");
    expect_refused(*opt, sd, "adamw/head.weight/exp_avg_sq");
  }
  {  // missing step
    auto sd = good;
    sd.erase("muon/step");
    expect_refused(*opt, sd, "muon/step");
  }
  {  // shape mismatch
    auto sd = good;
    sd["muon/layers.0.mlp.w1.weight/momentum_buffer"] = Tensor::zeros({4, 6});
    expect_refused(*opt, sd, "muon/layers.0.mlp.w1.weight/momentum_buffer");
  }
  {  // a key for a parameter this optimizer does not have
    auto sd = good;
    sd["adamw/layers.1.norm1.weight/exp_avg"] = Tensor::zeros({4});
    expect_refused(*opt, sd, "adamw/layers.1.norm1.weight/exp_avg");
  }
  {  // step must be a scalar
    auto sd = good;
    sd["composite/step"] = Tensor::zeros({2}, DType::I64);
    expect_refused(*opt, sd, "composite/step");
  }
  // unrelated keys (model weights, other prefixes) are ignored; the good dict loads
  auto sd = good;
  sd["model/embed.weight"] = Tensor::zeros({7, 4});
  opt->load_state_dict(sd);
  EXPECT_EQ(opt->step_count(), 2);
  std::map<std::string, Tensor> now;
  opt->state_dict(now);
  for (const auto& [k, t] : good) EXPECT_EQ(t.to_vector(), now.at(k).to_vector()) << k;
}

TEST(StateDict, DtypeConvertedOnLoad) {
  // state saved from an f64 run loads into an f32 optimizer (values rounded), and vice versa
  Model a(DType::F64);
  auto oa = build(a);
  a.set_grads(0);
  oa->step();
  std::map<std::string, Tensor> sd;
  oa->state_dict(sd);
  Model b(DType::F32);
  auto ob = build(b);
  ob->load_state_dict(sd);
  std::map<std::string, Tensor> sb;
  ob->state_dict(sb);
  const auto x = sd.at("adamw/embed.weight/exp_avg").to_vector();
  const auto y = sb.at("adamw/embed.weight/exp_avg").to_vector();
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], static_cast<double>(static_cast<float>(x[i])));
  EXPECT_EQ(sb.at("adamw/embed.weight/exp_avg").dtype(), DType::F32);
}

TEST(Composite, StepsAllPartsAndValidates) {
  Model m(DType::F64);
  auto before = m.values();
  auto opt = build(m);
  m.set_grads(0);
  opt->step(0.5);
  auto after = m.values();
  for (size_t k = 0; k < before.size(); ++k)
    EXPECT_TRUE(hzt::differs(before[k], after[k], hzt::kValuesDiffer)) << m.spec[k].first;
  auto& comp = dynamic_cast<CompositeOptimizer&>(*opt);
  ASSERT_EQ(comp.parts().size(), 2u);
  EXPECT_EQ(comp.parts()[0]->step_count(), 1);
  EXPECT_EQ(comp.parts()[1]->step_count(), 1);
  EXPECT_TRUE(comp.groups().empty());
  opt->zero_grad();
  for (const auto& v : m.vars) EXPECT_FALSE(v.grad().defined());

  // two parts with one name, a parameter in two parts, no parts
  {
    std::vector<std::unique_ptr<Optimizer>> parts;
    parts.push_back(std::make_unique<AdamW>(std::vector<ParamGroup>{ParamGroup{"a", {{"x", &m.vars[0]}}}}));
    parts.push_back(std::make_unique<AdamW>(std::vector<ParamGroup>{ParamGroup{"b", {{"y", &m.vars[4]}}}}));
    EXPECT_THROW(CompositeOptimizer(std::move(parts)), ValueError);
  }
  {
    std::vector<std::unique_ptr<Optimizer>> parts;
    parts.push_back(std::make_unique<Muon>(std::vector<ParamGroup>{ParamGroup{"a", {{"x", &m.vars[1]}}}}));
    parts.push_back(std::make_unique<AdamW>(std::vector<ParamGroup>{ParamGroup{"b", {{"x", &m.vars[1]}}}}));
    EXPECT_THROW(CompositeOptimizer(std::move(parts)), ValueError);
  }
  EXPECT_THROW(CompositeOptimizer(std::vector<std::unique_ptr<Optimizer>>{}), ValueError);
}

TEST(Optimizer, ParamChangedShapeIsRefused) {
  ag::Variable w = make_param(noise(6, 1, 0), {2, 3});
  AdamW opt({ParamGroup{"g", {{"w", &w}}}});
  w.value() = Tensor::zeros({3, 3}, DType::F64);  // model surgery after building the optimizer
  set_grad(w, noise(9, 2, 0));
  EXPECT_THROW(opt.step(), ValueError);
}

}  // namespace
