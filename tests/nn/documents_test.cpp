// Packed documents through the whole model: a batch whose sequences pack several documents, run
// with the document mask and position reset, gives the same loss and the same parameter gradients
// (to float64 round-off) as running each document alone, for every attention kind (RoPE, p-RoPE,
// NoPE, ALiBi, sliding window, SCOPE, scale-invariant, LogN, SWAN rows, YaRN, DroPE's temperature),
// with GQA, documents shorter than an attention tile, longer than the window, and a document cut
// by the end of its sequence.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "attention/documents.h"
#include "autograd/functions.h"
#include "nn/transformer.h"

using namespace hz;
using namespace hz::nn;

namespace {

constexpr int64_t kB = 2, kT = 20, kV = 17;
// sequence 0: 2 (shorter than a 4-row tile), 11 (longer than the window 5), 7; sequence 1: 16, then
// 4 tokens of a document the sequence cuts off
const std::vector<int64_t> kCu = {0, 2, 13, 20, 36, 40};

struct Kind {
  std::string name;
  attn::AttentionSpec spec;
};

std::vector<Kind> kinds() {
  std::vector<Kind> v;
  auto add = [&](const std::string& n, auto f) {
    attn::AttentionSpec s;
    s.pos.rope_base = 100.0;
    f(s);
    v.push_back({n, s});
  };
  add("rope", [](attn::AttentionSpec&) {});
  add("prope", [](attn::AttentionSpec& s) {
    s.pos.kind = attn::PosKind::PRope;
    s.pos.prope_base_eff = 30.0;
  });
  add("nope", [](attn::AttentionSpec& s) { s.pos.kind = attn::PosKind::None; });
  add("alibi", [](attn::AttentionSpec& s) { s.pos.kind = attn::PosKind::Alibi; });
  add("swa", [](attn::AttentionSpec& s) {
    s.mask.kind = attn::MaskKind::Window;
    s.mask.window = 5;
  });
  add("scope", [](attn::AttentionSpec& s) {  // explicit scopes: the same for every call length
    s.pos.kind = attn::PosKind::None;
    s.mask.kind = attn::MaskKind::Scope;
    s.mask.scopes = {1, 3, 5, 8};
  });
  add("scale_invariant", [](attn::AttentionSpec& s) {
    s.logit.kind = attn::LogitKind::ScaleInvariant;
    s.logit.tau = 3.0;
  });
  add("logn", [](attn::AttentionSpec& s) { s.logit.kind = attn::LogitKind::LogN; });
  add("swan_row", [](attn::AttentionSpec& s) {
    s.pos.kind = attn::PosKind::None;
    s.logit.kind = attn::LogitKind::SwanRow;
    s.logit.swan_a = 5.0;
  });
  add("yarn", [](attn::AttentionSpec& s) {
    s.pos.scaling = attn::RopeScaling::YaRN;
    s.pos.factor = 2.0;
    s.pos.original_context = 8;
  });
  // learned angles: the accumulated angle between two tokens of a document sums only its steps, so
  // packing needs no reset; GRAPE-M's angles read the per-document positions
  add("accumulated_v", [](attn::AttentionSpec& s) {
    s.pos.rope_angles = attn::RopeAngles::Accumulated;
    s.pos.angles_per_head = true;
    s.pos.rotate_v = true;
  });
  add("grape_m", [](attn::AttentionSpec& s) { s.pos.learned_freqs = attn::LearnedFreqs::Head; });
  add("drope_temperature", [](attn::AttentionSpec& s) {
    s.pos.kind = attn::PosKind::None;
    s.logit.kind = attn::LogitKind::Temperature;
    s.logit.temp_c = 0.5;  // beta = 1 + c ln(L / 8) per document of length L > 8
  });
  return v;
}

ModelConfig config_for(const Kind& k) {
  ModelConfig c;
  c.vocab_size = kV;
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.mlp_hidden = 16;
  c.train_len = 8;
  c.dtype = DType::F64;
  c.kinds = {{"k", k.spec}};
  c.pattern = {"k"};
  return c;
}

class PackedModel : public ::testing::TestWithParam<Kind> {};
std::string kind_name(const ::testing::TestParamInfo<Kind>& i) { return i.param.name; }

}  // namespace

TEST_P(PackedModel, LossAndGradientsEqualTheDocumentsRunAlone) {
  const ModelConfig cfg = config_for(GetParam());
  Transformer m(cfg, 3);
  m.compute_dtype = DType::F64;
  std::vector<double> iv(kB * kT), tv(kB * kT);
  for (int64_t i = 0; i < kB * kT; ++i) {
    iv[i] = static_cast<double>((7 * i + 3) % kV);
    tv[i] = static_cast<double>((5 * i * i + 1) % kV);
  }
  const Tensor ids = Tensor::from_vector(iv, {kB, kT}, DType::I64);
  const Tensor targets = Tensor::from_vector(tv, {kB, kT}, DType::I64);

  // packed: the mean over all B T tokens
  AttnCall call;
  call.block_q = 4;
  call.block_k = 4;
  call.documents = std::make_shared<attn::Documents>(kB, kT, kCu, true);
  ag::Variable packed = m.loss(ids, targets, Tensor(), call);
  packed.backward();
  std::map<std::string, std::vector<double>> want;
  for (auto& [n, v] : m.named_parameters()) want[n] = v->grad().to_vector();
  m.zero_grad();

  // alone: each document its own B = 1 call of its own length, weighted by its share of tokens
  double total = 0;
  for (size_t d = 0; d + 1 < kCu.size(); ++d) {
    const int64_t b = kCu[d] / kT, s = kCu[d] - b * kT, L = kCu[d + 1] - kCu[d];
    const Tensor di = ids.slice(0, b, b + 1).slice(1, s, s + L).contiguous();
    const Tensor dt = targets.slice(0, b, b + 1).slice(1, s, s + L).contiguous();
    AttnCall alone;
    alone.block_q = 4;
    alone.block_k = 4;
    ag::Variable l = m.loss(di, dt, Tensor(), alone);
    total += l.value().item() * L;
    ag::mul_scalar(l, static_cast<double>(L) / (kB * kT)).backward();
  }
  total /= kB * kT;
  EXPECT_NEAR(packed.value().item(), total, 1e-12 * std::abs(total));
  for (auto& [n, v] : m.named_parameters()) {
    const std::vector<double> got = v->grad().to_vector();
    const std::vector<double>& w = want.at(n);
    double scale = 0;
    for (double x : w) scale = std::max(scale, std::abs(x));
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], w[i], 1e-11 * std::max(1.0, scale)) << n << "[" << i << "]";
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, PackedModel, ::testing::ValuesIn(kinds()), kind_name);

TEST(PackedModelCall, DocumentsAndPositionsAreOneSourceOfTruth) {
  ModelConfig cfg = config_for(kinds()[0]);
  Transformer m(cfg, 3);
  const Tensor ids = Tensor::zeros({kB, kT}, DType::I64);
  AttnCall call;
  call.documents = std::make_shared<attn::Documents>(kB, kT, kCu, true);
  EXPECT_THROW(m.forward(ids, Tensor::arange(0, kT, 1, DType::I64), call), ValueError);  // both given
  call.documents = std::make_shared<attn::Documents>(1, kT, std::vector<int64_t>{0, kT}, true);
  EXPECT_THROW(m.forward(ids, Tensor(), call), ShapeError);  // documents of another batch
  // Without position reset the positions run on through the documents. RoPE sees only the
  // distance between a query and a key, which the reset leaves as it is, so the two calls agree to
  // round-off; a term that reads a token's own position (LogN by position: n = position + 1) gives
  // a different result, by far more than round-off. Distinct tokens: with identical tokens every
  // value row is the same and any attention returns it, whatever the positions.
  std::vector<double> iv(kB * kT);
  for (int64_t i = 0; i < kB * kT; ++i) iv[i] = static_cast<double>((7 * i + 3) % kV);
  const Tensor ids2 = Tensor::from_vector(iv, {kB, kT}, DType::I64);
  AttnCall reset, global;
  reset.documents = std::make_shared<attn::Documents>(kB, kT, kCu, true);
  global.documents = std::make_shared<attn::Documents>(kB, kT, kCu, false);
  auto max_diff = [&](Transformer& model) {
    model.compute_dtype = DType::F64;
    const std::vector<double> a = model.forward(ids2, Tensor(), reset).value().to_vector();
    const std::vector<double> b = model.forward(ids2, Tensor(), global).value().to_vector();
    double d = 0, scale = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      d = std::max(d, std::abs(a[i] - b[i]));
      scale = std::max(scale, std::abs(a[i]));
    }
    return d / scale;
  };
  EXPECT_LT(max_diff(m), 1e-12);  // RoPE: relative positions, equal up to round-off (float64)
  Kind by_position = kinds()[0];
  by_position.spec.logit.kind = attn::LogitKind::LogN;
  by_position.spec.logit.logn_position = true;
  Transformer logn(config_for(by_position), 3);
  EXPECT_GT(max_diff(logn), 1e-6);  // 6e-4 at this init: ten orders of magnitude above round-off
}
