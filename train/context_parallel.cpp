// Horizon: context parallelism in training (see context_parallel.h).
#include "train/context_parallel.h"

#include <fmt/core.h>

namespace hz::train {

double loss_weight(const Tensor& targets, const Tensor& weights) {
  const std::vector<double> t = targets.to_vector();
  const std::vector<double> w = weights.defined() ? weights.to_vector() : std::vector<double>();
  double s = 0;
  for (size_t i = 0; i < t.size(); ++i)
    if (t[i] != -100) s += w.empty() ? 1.0 : w[i];
  return s;
}

nn::AttnCall training_call(const Recipe& r, const nn::Transformer& m) {
  nn::AttnCall call;
  call.T = r.data.seq_len;
  call.train_len = m.cfg.train_len;
  if (r.data.documents == attn::DocumentMode::Masked)
    call.documents = std::make_shared<attn::Documents>(attn::Documents::whole(r.data.batch_size, r.data.seq_len));
  return call;
}

attn::AttnConfig training_config(const Recipe& r, const nn::Transformer& m, size_t layer) {
  return m.layers[layer]->attn->attn_config(training_call(r, m));
}

int64_t activation_bytes(const Recipe& r, const nn::Transformer& m) {
  return r.run.precision == nn::Precision::BF16 ? 2 : static_cast<int64_t>(dtype_size(m.cfg.dtype));
}

bool split_attention(const Recipe& r, const nn::Transformer& m) {
  return r.run.device == DeviceType::CUDA && activation_bytes(r, m) == 4 && !r.run.exact_f32_attention;
}

std::shared_ptr<dist::ContextRoute> planning_route(const Recipe& r, int N) {
  if (N <= 1) return nullptr;
  return dist::ContextRoute::planning(r.data.seq_len, N, r.parallel.context_exchange);
}

std::vector<ContextPlanRow> context_plan(const Recipe& r, const nn::Transformer& m, int N) {
  std::vector<ContextPlanRow> rows;
  const auto route = planning_route(r, N);
  const nn::CallShape shape{r.data.batch_size, r.data.seq_len, activation_bytes(r, m), split_attention(r, m)};
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const attn::AttnConfig cfg = training_config(r, m, l);
    const int64_t bytes = route ? route->traffic_bytes(cfg, m.layers[l]->attn->shape(shape)) : 0;
    const std::string ex = route ? dist::name(route->exchange(cfg, m.layers[l]->attn->spec.forget)) : "none";
    if (!rows.empty() && rows.back().exchange == ex && rows.back().bytes == bytes) {
      ++rows.back().count;
      rows.back().layers = fmt::format("{}-{}", l + 1 - rows.back().count, l);
    } else {
      rows.push_back({fmt::format("{}", l), ex, bytes, 1});
    }
  }
  return rows;
}

}  // namespace hz::train
