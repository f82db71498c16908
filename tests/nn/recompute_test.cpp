// Activation recomputation (train.recompute): the loss and every parameter gradient are bitwise
// those of the plain graph, for attention and layer recomputation, every attention kind, f32 and
// bf16 compute, packed documents, and accumulated over two micro-batches; and recomputation frees
// the activations: fewer bytes stay allocated between forward and backward.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>

#include "attention/documents.h"
#include "autograd/functions.h"
#include "core/ops.h"
#include "nn/transformer.h"

using namespace hz;
using namespace hz::nn;

namespace {

std::vector<std::pair<std::string, attn::AttentionSpec>> specs() {
  std::vector<std::pair<std::string, attn::AttentionSpec>> v;
  attn::AttentionSpec s;
  v.push_back({"rope", s});
  s.mask.kind = attn::MaskKind::Window, s.mask.window = 5;
  v.push_back({"swa_rope", s});
  s = {};
  s.pos.kind = attn::PosKind::None, s.mask.kind = attn::MaskKind::Scope;
  v.push_back({"scope_nope", s});
  s = {};
  s.pos.kind = attn::PosKind::Alibi, s.logit.kind = attn::LogitKind::LogN;
  v.push_back({"alibi_logn", s});
  s = {};
  s.pos.kind = attn::PosKind::PRope, s.logit.kind = attn::LogitKind::ScaleInvariant, s.qk_norm = attn::QKNorm::PerHead;
  v.push_back({"prope_scale_invariant_qknorm", s});
  s = {};
  s.pos.kind = attn::PosKind::None, s.logit.kind = attn::LogitKind::SwanRow;
  v.push_back({"swan_row", s});
  s = {};
  s.pos.rope_angles = attn::RopeAngles::Accumulated, s.pos.rotate_v = true, s.pos.learned_freqs = attn::LearnedFreqs::Head;
  v.push_back({"learned_angles", s});
  return v;
}

ModelConfig config(const attn::AttentionSpec& s) {
  ModelConfig c;
  c.vocab_size = 37;
  c.d_model = 32;
  c.n_layers = 3;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.mlp_hidden = 48;
  c.train_len = 16;
  c.kinds = {{"k", s}};
  c.pattern = {"k"};
  return c;
}

Tensor ids(int64_t B, int64_t T, int salt) {
  std::vector<double> v(B * T);
  for (int64_t i = 0; i < B * T; ++i) v[i] = static_cast<double>((i * 7 + salt * 13 + i * i) % 37);
  return Tensor::from_vector(v, {B, T}, DType::I64);
}

// loss values and parameter gradients after `micro` micro-batches
std::pair<std::vector<double>, std::map<std::string, std::vector<double>>> run(const ModelConfig& c, DType compute,
                                                                              Recompute rc, bool docs, int micro) {
  Transformer m(c, 7);
  m.compute_dtype = compute;
  std::vector<double> losses;
  for (int k = 0; k < micro; ++k) {
    AttnCall call;
    call.recompute = rc;
    if (docs) call.documents = std::make_shared<attn::Documents>(2, 16, std::vector<int64_t>{0, 3, 11, 16, 32}, true);
    ag::Variable l = m.loss(ids(2, 16, k), ids(2, 16, k + 5), Tensor(), call);
    l.backward();
    losses.push_back(l.value().item());
  }
  std::map<std::string, std::vector<double>> g;
  for (auto& [n, v] : m.named_parameters()) g[n] = v->grad().to_vector();
  return {losses, g};
}

}  // namespace

TEST(Recompute, GradientsAreBitwiseThoseOfThePlainGraph) {
  for (const auto& [kind, spec] : specs())
    for (DType compute : {DType::F32, DType::BF16})
      for (bool docs : {false, true}) {
        SCOPED_TRACE(kind + (compute == DType::BF16 ? " bf16" : " f32") + (docs ? " packed documents" : ""));
        const auto plain = run(config(spec), compute, Recompute::None, docs, 2);
        for (Recompute rc : {Recompute::Attention, Recompute::Layer}) {
          const auto re = run(config(spec), compute, rc, docs, 2);
          EXPECT_EQ(re.first, plain.first) << name(rc);
          for (const auto& [n, g] : plain.second) EXPECT_EQ(re.second.at(n), g) << name(rc) << " " << n;
        }
      }
}

TEST(Recompute, KeepsFewerActivations) {
  // bytes held between forward and backward: the graph's saved tensors
  ModelConfig c = config(specs()[0].second);
  c.n_layers = 4;
  c.d_model = 64;
  c.mlp_hidden = 256;
  Transformer m(c, 7);
  auto held = [&](Recompute rc) {
    const int64_t before = memory_stats(Device::cpu()).allocated;
    AttnCall call;
    call.recompute = rc;
    ag::Variable l = m.loss(ids(4, 64, 1), ids(4, 64, 2), Tensor(), call);
    const int64_t during = memory_stats(Device::cpu()).allocated - before;
    l.backward();
    m.zero_grad();
    return during;
  };
  const int64_t none = held(Recompute::None), attention = held(Recompute::Attention), layer = held(Recompute::Layer);
  std::printf("  bytes held for backward: none %lld, attention %lld, layer %lld\n", static_cast<long long>(none),
              static_cast<long long>(attention), static_cast<long long>(layer));
  EXPECT_LT(attention, none);
  EXPECT_LT(layer, attention);
  EXPECT_EQ(parse_recompute("layer"), Recompute::Layer);
  EXPECT_THROW(parse_recompute("full"), ValueError);
}

// Evaluation's per-token NLL (Transformer::token_nll) runs the head on chunks of rows: every chunk,
// on the CPU in f32 and bf16, gives the bits of cross_entropy_rows on the full forward's logits,
// with and without packed documents; ignored targets score 0.
TEST(TokenNll, ChunkedEqualsFullLogitsBitwise) {
  attn::AttentionSpec s;
  s.mask.kind = attn::MaskKind::Window, s.mask.window = 5;
  for (DType compute : {DType::F32, DType::BF16})
    for (int docs = 0; docs < 3; ++docs) {  // 2: one sequence of 257 rows, a last chunk of 1 row
      Transformer m(config(s), 3);
      m.compute_dtype = compute;
      const int64_t B = docs == 2 ? 1 : 2, T = docs == 2 ? 257 : 300;
      AttnCall call;
      if (docs == 1)
        call.documents = std::make_shared<attn::Documents>(B, T, std::vector<int64_t>{0, 40, 290, 300, 512, 600}, true);
      Tensor tg = ids(B, T, 4);
      tg.set({B - 1, 17}, -100);
      std::vector<double> full;
      {
        ag::NoGradGuard ng;
        const Tensor logits = m.forward(ids(B, T, 1), Tensor(), call).value();
        full = ops::cross_entropy_rows(logits.reshape({B * T, -1}), tg.reshape({-1})).to_vector();
      }
      EXPECT_EQ(full[(B - 1) * T + 17], 0.0);
      for (int64_t chunk : {int64_t(0), int64_t(-1), int64_t(256), int64_t(7), int64_t(1)}) {
        const std::vector<double> got = m.token_nll(ids(B, T, 1), tg, call, chunk).to_vector();
        ASSERT_EQ(got.size(), full.size());
        for (size_t i = 0; i < full.size(); ++i)
          ASSERT_EQ(got[i], full[i]) << dtype_name(compute) << " docs " << docs << " chunk " << chunk << " row " << i;
      }
    }
}
