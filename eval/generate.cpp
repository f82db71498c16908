#include "eval/generate.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "core/device.h"
#include "data/sampling.h"
#include "eval/eval.h"
#include "eval/inference.h"
#include "nn/kv_cache.h"

namespace hz::eval {

int32_t choose_token(const std::vector<double>& lg, double temperature, double top_p, double u) {
  HZ_CHECK(!lg.empty(), ValueError, "generate: empty logits");
  HZ_CHECK(temperature >= 0, ValueError, "generate: temperature must be >= 0, got ", temperature);
  HZ_CHECK(top_p > 0 && top_p <= 1, ValueError, "generate: top_p must be in (0, 1], got ", top_p);
  const int64_t V = static_cast<int64_t>(lg.size());
  if (temperature == 0) return static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin());
  std::vector<int32_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return lg[a] > lg[b]; });
  const double mx = lg[order[0]];
  std::vector<double> p(V);
  double total = 0;
  for (int64_t i = 0; i < V; ++i) total += (p[i] = std::exp((lg[order[i]] - mx) / temperature));
  int64_t keep = V;
  double mass = 0;
  for (int64_t i = 0; i < V; ++i) {
    mass += p[i] / total;
    if (mass >= top_p) {
      keep = i + 1;
      break;
    }
  }
  double kept = 0;
  for (int64_t i = 0; i < keep; ++i) kept += p[i];
  double acc = 0;
  const double target = u * kept;
  for (int64_t i = 0; i < keep; ++i) {
    acc += p[i];
    if (target < acc) return order[i];
  }
  return order[keep - 1];
}

namespace {
// Refuses a prompt whose prefill and cache cannot fit before anything is allocated (a 10 MB prompt
// used to grow to 6 GB before failing): the keys and values of every layer for `capacity` tokens
// (an upper bound: window layers keep fewer) plus the largest block's no-grad working set over the
// prompt and the hidden states around it (nn/cost.h), against the host's memory on the CPU.
void check_fits(const nn::Transformer& m, int64_t prompt, int64_t capacity, int64_t train_len) {
  const Device dev = m.device();
  if (!dev.is_cpu()) return;  // the CUDA pool refuses an allocation it cannot make with a DeviceError
  const int64_t act = m.compute_dtype == DType::BF16 ? 2 : static_cast<int64_t>(dtype_size(m.cfg.dtype));
  const double kv = 2.0 * static_cast<double>(m.cfg.n_layers) * static_cast<double>(m.cfg.kv_heads()) *
                    static_cast<double>(m.cfg.hdim()) * static_cast<double>(capacity) * static_cast<double>(act);
  nn::AttnCall call;
  call.T = capacity;
  call.train_len = train_len;
  double block = 0;
  for (const auto& b : m.layers)
    block = std::max(block, static_cast<double>(b->cost(nn::CallShape{1, prompt, act}, call).inference));
  const double need = kv + block + 2.0 * static_cast<double>(prompt) * static_cast<double>(m.cfg.d_model * act);
  const double have = static_cast<double>(cpu::physical_memory());
  HZ_CHECK(have <= 0 || need <= 0.9 * have, ValueError, "generate: a prompt of ", prompt, " tokens with ",
           capacity - prompt, " new ones needs about ", fmt::format("{:.1f}", need / double(1 << 30)),
           " GiB for its prefill and key/value cache, more than this machine's ",
           fmt::format("{:.1f}", have / double(1 << 30)), " GiB allow; shorten the prompt");
}
}  // namespace

Generation generate(nn::Transformer& m, const std::vector<int32_t>& prompt, const GenerateOptions& o) {
  HZ_CHECK(!prompt.empty(), ValueError, "generate: the prompt is empty; give at least one token");
  HZ_CHECK(o.max_new_tokens >= 1, ValueError, "generate: max_new_tokens must be >= 1");
  for (int32_t t : prompt)
    HZ_CHECK(t >= 0 && t < m.cfg.vocab_size, ValueError, "generate: prompt token ", t, " is outside the model's vocabulary [0, ",
             m.cfg.vocab_size, "); the tokenizer does not match the model");
  using clock = std::chrono::steady_clock;
  Generation g;
  const int64_t train_len = o.train_len > 0 ? o.train_len : m.cfg.train_len;
  const bool masked = o.documents.mode == attn::DocumentMode::Masked;
  std::vector<int32_t> visible = prompt;
  if (masked) {
    HZ_CHECK(o.documents.position_reset, NotImplementedError,
             "generate: masked documents without position reset are not supported (the cache restarts at position 0 "
             "at each document); generate with the whole prompt as one sequence instead");
    HZ_CHECK(o.eos >= 0, ValueError, "generate: masked documents need the tokenizer's EOS id");
    // a document is its tokens and its EOS: the last one starts after the last EOS before the final token
    size_t start = 0;
    for (size_t i = 0; i + 1 < prompt.size(); ++i)
      if (prompt[i] == o.eos) start = i + 1;
    visible.assign(prompt.begin() + static_cast<std::ptrdiff_t>(start), prompt.end());
  }
  g.prompt_kept = static_cast<int64_t>(visible.size());
  g.capacity = static_cast<int64_t>(visible.size()) + o.max_new_tokens;
  check_fits(m, g.prompt_kept, g.capacity, train_len);
  ScopedInference inf(m, o.inference, train_len, g.capacity);
  nn::KVCache cache(m, g.capacity, train_len);
  g.kv_bytes = cache.bytes();
  const Device dev = m.device();
  auto settled = [&] {  // the clock stops once the device has finished
    synchronize(dev);
    return clock::now();
  };
  auto t0 = settled();
  Tensor lg = cache.prefill(visible);
  int32_t previous = visible.back();
  g.prefill_seconds = std::chrono::duration<double>(settled() - t0).count();
  for (int64_t i = 0; i < o.max_new_tokens; ++i) {
    double u = 0;
    if (o.temperature > 0) {
      Generator gen(o.seed, static_cast<uint64_t>(i));
      u = data::uniform01(gen);
    }
    const std::vector<double> row = lg.to_vector();
    // NaN or infinite logits choose no token (the argmax of NaNs is id 0, printed as a NUL byte):
    // refused as horizon eval and score refuse a non-finite loss
    for (size_t v = 0; v < row.size(); ++v)
      if (!std::isfinite(row[v]))
        require_finite(row[v], o.model, fmt::format("the logit of token {} for generated token {}", v, i + 1));
    const int32_t tok = choose_token(row, o.temperature, o.top_p, u);
    g.tokens.push_back(tok);
    if (tok == o.stop_token || i + 1 == o.max_new_tokens) break;
    t0 = settled();
    // masked documents: the token after an EOS starts a new document, seen alone from position 0
    lg = masked && previous == o.eos ? cache.prefill({tok}) : cache.step(tok);
    previous = tok;
    g.step_seconds.push_back(std::chrono::duration<double>(settled() - t0).count());
  }
  return g;
}

}  // namespace hz::eval
