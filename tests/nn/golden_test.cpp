// The whole model against golden values produced by an independent implementation:
// scripts/fixtures/golden_torch.py builds the same decoders in PyTorch (float64) with seeded weights and
// records the loss, every parameter's gradient norm, gradient entries and logits. Horizon loads
// those weights by name and must reproduce them to float64 precision.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cmath>

#include "nn/transformer.h"

using namespace hz;

namespace {

class Golden : public ::testing::TestWithParam<std::string> {};

attn::AttentionSpec kind_of(const YAML::Node& k) {
  attn::AttentionSpec s;
  s.pos.kind = attn::parse_pos(k["pos"].as<std::string>());
  if (k["rope_base"]) s.pos.rope_base = k["rope_base"].as<double>();
  s.mask.kind = attn::parse_mask(k["mask"].as<std::string>());
  if (k["window"]) s.mask.window = k["window"].as<int64_t>();
  s.logit.kind = attn::parse_logit(k["logit"].as<std::string>());
  if (k["tau"]) s.logit.tau = k["tau"].as<double>();
  return s;
}

TEST_P(Golden, LossGradientsAndLogitsMatchPyTorch) {
  const YAML::Node g = YAML::LoadFile(std::string(HZ_SOURCE_DIR) + "/tests/golden/" + GetParam() + ".json");
  const YAML::Node c = g["config"];
  nn::ModelConfig cfg;
  cfg.vocab_size = c["vocab_size"].as<int64_t>();
  cfg.d_model = c["d_model"].as<int64_t>();
  cfg.n_layers = c["n_layers"].as<int64_t>();
  cfg.n_heads = c["n_heads"].as<int64_t>();
  cfg.n_kv_heads = c["n_kv_heads"].as<int64_t>();
  cfg.mlp_hidden = c["mlp_hidden"].as<int64_t>();
  cfg.mlp = nn::parse_mlp(c["mlp"].as<std::string>());
  cfg.tie_embeddings = c["tie_embeddings"].as<bool>();
  cfg.train_len = g["seq_len"].as<int64_t>();
  cfg.dtype = DType::F64;
  cfg.kinds.clear();
  for (auto it = c["kinds"].begin(); it != c["kinds"].end(); ++it)
    cfg.kinds.push_back({it->first.as<std::string>(), kind_of(it->second)});
  cfg.pattern = c["pattern"].as<std::vector<std::string>>();
  nn::Transformer m(cfg, 0);

  std::map<std::string, Tensor> sd;
  for (auto it = g["weights"].begin(); it != g["weights"].end(); ++it)
    sd[it->first.as<std::string>()] = Tensor::from_vector(it->second["values"].as<std::vector<double>>(),
                                                          it->second["shape"].as<std::vector<int64_t>>(), DType::F64);
  m.load_state_dict(sd);  // strict: every name must match

  const int64_t B = g["batch"].as<int64_t>(), T = g["seq_len"].as<int64_t>();
  std::vector<double> ids;
  for (const auto& row : g["ids"])
    for (const auto& v : row) ids.push_back(v.as<double>());
  const Tensor all = Tensor::from_vector(ids, {B, T + 1}, DType::I64);
  const Tensor x = all.narrow(1, 0, T).contiguous(), y = all.narrow(1, 1, T).contiguous();

  const Tensor logits = m.forward(x).value();
  for (const auto& s : g["logits_sample"])
    EXPECT_NEAR(logits.at({s[0].as<int64_t>(), s[1].as<int64_t>(), s[2].as<int64_t>()}), s[3].as<double>(), 1e-10);
  ag::Variable loss = m.loss(x, y);
  EXPECT_NEAR(loss.item(), g["loss"].as<double>(), 1e-10 * std::abs(g["loss"].as<double>()));
  loss.backward();
  int64_t n = 0;
  for (auto& [name, v] : m.named_parameters()) {
    const double want = g["grad_norms"][name].as<double>();
    double ss = 0;
    for (double e : v->grad().to_vector()) ss += e * e;
    EXPECT_NEAR(std::sqrt(ss), want, 1e-9 * want + 1e-14) << name;
    for (const auto& s : g["grad_samples"][name])
      EXPECT_NEAR(v->grad().at_flat(s[0].as<int64_t>()), s[1].as<double>(), 1e-10 + 1e-8 * std::abs(s[1].as<double>()))
          << name << "[" << s[0].as<int64_t>() << "]";
    ++n;
  }
  EXPECT_EQ(n, static_cast<int64_t>(g["grad_norms"].size()));
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Models, Golden, ::testing::Values("rope_gqa_swiglu", "nope_si_swa_relu2"));
