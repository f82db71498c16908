// Gradient-norm clipping and the Muon / AdamW parameter partition.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "nn/transformer.h"
#include "optim/clip.h"
#include "optim/optimizer.h"
#include "optim/partition.h"
#include "tests/optim/optim_test_util.h"

using namespace hz;
using namespace hz::optim;
using namespace hz::optim::testing;

namespace {

TEST(Clip, NormClipAndDisabled) {
  ag::Variable a = make_param({0, 0}, {2}, DType::F32);
  ag::Variable b = make_param({0, 0, 0, 0}, {2, 2}, DType::F64);
  ag::Variable none = make_param({0}, {1});  // no grad: contributes nothing, untouched
  set_grad(a, {3.0, 0.0});
  set_grad(b, {0.0, -4.0, 0.0, 12.0});
  NamedParams ps = {{"a", &a}, {"none", &none}, {"b", &b}};
  EXPECT_DOUBLE_EQ(global_grad_norm(ps), 13.0);  // sqrt(9 + 16 + 144)

  // disabled (<= 0) and not needed (norm <= max): grads bitwise unchanged, norm returned
  const auto ga = a.grad().to_vector(), gb = b.grad().to_vector();
  EXPECT_DOUBLE_EQ(clip_grad_norm(ps, 0.0), 13.0);
  EXPECT_DOUBLE_EQ(clip_grad_norm(ps, -1.0), 13.0);
  EXPECT_DOUBLE_EQ(clip_grad_norm(ps, 13.0), 13.0);
  EXPECT_DOUBLE_EQ(clip_grad_norm(ps, 100.0), 13.0);
  EXPECT_EQ(a.grad().to_vector(), ga);
  EXPECT_EQ(b.grad().to_vector(), gb);

  // clipped: returns the pre-clip norm, afterwards the norm is max_norm, directions kept
  EXPECT_DOUBLE_EQ(clip_grad_norm(ps, 2.6), 13.0);
  EXPECT_NEAR(global_grad_norm(ps), 2.6, 1e-6);
  EXPECT_NEAR(a.grad().to_vector()[0], 0.6, 1e-7);
  EXPECT_NEAR(b.grad().to_vector()[1], -0.8, 1e-15);
  EXPECT_NEAR(b.grad().to_vector()[3], 2.4, 1e-15);
  EXPECT_FALSE(none.grad().defined());
}

TEST(Clip, NonContiguousGradAndNoGrads) {
  ag::Variable w = make_param({0, 0, 0, 0, 0, 0}, {2, 3});
  w.grad() = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {3, 2}, DType::F64).transpose(0, 1);
  NamedParams ps = {{"w", &w}};
  const double n = std::sqrt(91.0);
  EXPECT_NEAR(global_grad_norm(ps), n, 1e-14);
  clip_grad_norm(ps, 1.0);
  // grad (2,3) as a view of [[1,3,5],[2,4,6]]: after clipping the same layout, scaled
  auto g = w.grad().to_vector();
  EXPECT_NEAR(g[1], 3.0 / n, 1e-14);
  EXPECT_NEAR(g[3], 2.0 / n, 1e-14);
  EXPECT_NEAR(global_grad_norm(ps), 1.0, 1e-14);

  ag::Variable x = make_param({1}, {1});
  EXPECT_EQ(global_grad_norm({{"x", &x}}), 0.0);
  EXPECT_EQ(clip_grad_norm({{"x", &x}}, 1.0), 0.0);
}

TEST(Clip, NonFiniteNormLeavesGradsAlone) {
  ag::Variable a = make_param({0, 0}, {2});
  set_grad(a, {INFINITY, 1.0});
  NamedParams ps = {{"a", &a}};
  EXPECT_TRUE(std::isinf(clip_grad_norm(ps, 1.0)));
  EXPECT_EQ(a.grad().to_vector()[1], 1.0);
}

TEST(Partition, SyntheticNames) {
  ag::Variable emb = make_param(std::vector<double>(6, 0), {3, 2});
  ag::Variable wq = make_param(std::vector<double>(4, 0), {2, 2});
  ag::Variable w1 = make_param(std::vector<double>(6, 0), {3, 2});
  ag::Variable gain = make_param(std::vector<double>(2, 0), {2});
  ag::Variable scalar = make_param({0}, {});
  ag::Variable head = make_param(std::vector<double>(6, 0), {3, 2});
  ag::Variable conv = make_param(std::vector<double>(8, 0), {2, 2, 2});
  ag::Variable embedlike = make_param(std::vector<double>(4, 0), {2, 2});  // "embedding_proj" is hidden
  NamedParams all = {{"embed.weight", &emb},   {"layers.0.attn.wq.weight", &wq}, {"layers.0.mlp.w1.weight", &w1},
                     {"norm.weight", &gain},   {"layers.0.attn.logn_c", &scalar}, {"head.weight", &head},
                     {"conv.weight", &conv},   {"embedding_proj.weight", &embedlike}};
  Partition p = partition_for_muon(all);
  std::vector<std::string> hidden, rest;
  for (auto& [n, v] : p.hidden_matrices) hidden.push_back(n);
  for (auto& [n, v] : p.rest) rest.push_back(n);
  EXPECT_EQ(hidden, (std::vector<std::string>{"layers.0.attn.wq.weight", "layers.0.mlp.w1.weight",
                                              "embedding_proj.weight"}));
  EXPECT_EQ(rest, (std::vector<std::string>{"embed.weight", "norm.weight", "layers.0.attn.logn_c",
                                            "head.weight", "conv.weight"}));
  EXPECT_EQ(p.hidden_matrices[0].second, &wq);
  EXPECT_THROW(partition_for_muon({{"x", nullptr}}), ValueError);
}

TEST(Partition, RealTransformerNames) {
  for (bool tied : {true, false}) {
    nn::ModelConfig c;
    c.vocab_size = 11;
    c.d_model = 8;
    c.n_layers = 2;
    c.n_heads = 2;
    c.n_kv_heads = 1;
    c.mlp_hidden = 8;
    c.train_len = 4;
    c.tie_embeddings = tied;
    nn::Transformer m(c, 0);
    auto named = m.named_parameters();
    Partition p = partition_for_muon(named);
    EXPECT_EQ(p.hidden_matrices.size() + p.rest.size(), named.size());
    bool saw_embed = false, saw_head = false;
    for (auto& [n, v] : p.rest) {
      saw_embed |= n == "embed.weight";
      saw_head |= n == "head.weight";
      EXPECT_TRUE(v->dim() != 2 || n == "embed.weight" || n == "head.weight") << n;
    }
    EXPECT_TRUE(saw_embed);
    EXPECT_EQ(saw_head, !tied);
    // every block has wq wk wv wo w1 w2 (+ w3 for SwiGLU) as hidden matrices
    EXPECT_GE(p.hidden_matrices.size(), 12u);
    for (auto& [n, v] : p.hidden_matrices) {
      EXPECT_EQ(v->dim(), 2) << n;
      EXPECT_EQ(n.rfind("layers.", 0), 0u) << n;
    }
  }
}

}  // namespace
