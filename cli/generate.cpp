// Horizon: `horizon generate` (decoding with the KV cache) and `horizon bench generate`
// (prefill and per-token latency and KV memory vs length, next to recomputing the full forward
// for every token, which is what a user without a cache does).
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/device.h"
#include "data/tokenizer.h"
#include "eval/generate.h"
#include "eval/inference.h"
#include "nn/kv_cache.h"
#include "study/load_run.h"
#include "study/hf_models.h"
#include "train/trainer.h"

namespace hz::cli {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// --flag value pairs (flags listed in `with_value`), bare flags in `bare`, the rest positional.
struct Flags {
  std::map<std::string, std::string> kv;
  std::vector<std::string> positional;
  bool has(const std::string& k) const { return kv.count(k) > 0; }
  std::string get(const std::string& k, const std::string& def = "") const {
    auto it = kv.find(k);
    return it == kv.end() ? def : it->second;
  }
};

Flags parse_flags(const std::vector<std::string>& a, const std::vector<std::string>& with_value,
                  const std::vector<std::string>& bare) {
  Flags f;
  for (size_t i = 1; i < a.size(); ++i) {
    const std::string& s = a[i];
    if (s.rfind("--", 0) == 0) {
      const std::string k = s.substr(2);
      if (std::find(bare.begin(), bare.end(), k) != bare.end()) {
        f.kv[k] = "1";
        continue;
      }
      HZ_CHECK(std::find(with_value.begin(), with_value.end(), k) != with_value.end(), ValueError,
               "unknown option ", s, "; see --help");
      HZ_CHECK(i + 1 < a.size(), ValueError, "option ", s, " needs a value");
      f.kv[k] = a[++i];
    } else {
      f.positional.push_back(s);
    }
  }
  return f;
}

}  // namespace

int generate_main(const std::vector<std::string>& a) {
  if (a.size() < 2 || std::find(a.begin(), a.end(), "--help") != a.end()) {
    fmt::print("{}",
        "usage: horizon generate RUN_DIR|CHECKPOINT (--prompt TEXT | --file F) [--max-new-tokens N]\n"
        "                        [--temperature T] [--top-p P] [--seed S] [--stop-at-eos] [--json]\n"
        "                        [--documents stream|masked] [--doc-separator S] [eval.key=value ...]\n"
        "  Prints only the continuation (temperature 0 = greedy; sampling is reproducible from --seed).\n"
        "  Inference options come from the run's recipe and overrides, as for horizon eval:\n"
        "  eval.rope_scaling=yarn eval.lampe=true eval.swan_a=362 eval.drope_c=0.4 ...\n"
        "  --json prints {prompt_tokens, tokens, text, context, prefill_ms, per_token_ms, kv_bytes}.\n"
        "  --documents masked: the prompt packs documents separated by S (default <|endoftext|>), each\n"
        "  followed by EOS as in training; the continuation sees only the last one, its positions from 0\n"
        "  (as trained with data.documents: masked, data.position_reset: true); a generated EOS starts a\n"
        "  new document. Default: the run's data.documents.\n");
    return a.size() < 2 ? 2 : 0;
  }
  const Flags f = parse_flags(a, {"prompt", "file", "max-new-tokens", "temperature", "top-p", "seed", "documents",
                                  "doc-separator"},
                              {"json", "stop-at-eos"});
  HZ_CHECK(!f.positional.empty(), ValueError, "generate: give a run directory or checkpoint");
  HZ_CHECK(f.has("prompt") != f.has("file"), ValueError, "generate: give exactly one of --prompt TEXT and --file F");
  std::string text = f.get("prompt");
  if (f.has("file")) {
    std::ifstream in(f.get("file"), std::ios::binary);
    HZ_CHECK(in.good(), ValueError, "generate: cannot read prompt file '", f.get("file"), "'");
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  study::LoadedRun run = study::load_run(f.positional[0], std::vector<std::string>(f.positional.begin() + 1, f.positional.end()));
  const auto tok = data::make_tokenizer(run.recipe.data.tokenizer);
  eval::GenerateOptions o;
  o.documents = run.recipe.eval_options().documents;
  if (f.has("documents")) o.documents = {attn::parse_document_mode(f.get("documents")), true};
  std::vector<int32_t> prompt;
  if (o.documents.mode == attn::DocumentMode::Masked) {  // documents, each followed by EOS
    const std::string sep = f.get("doc-separator", "<|endoftext|>");
    HZ_CHECK(!sep.empty(), ValueError, "generate: --doc-separator must not be empty");
    for (size_t at = 0;;) {
      const size_t next = text.find(sep, at);
      const std::vector<int32_t> piece = tok->encode(text.substr(at, next == std::string::npos ? std::string::npos : next - at));
      prompt.insert(prompt.end(), piece.begin(), piece.end());
      if (next == std::string::npos) break;
      prompt.push_back(tok->eos());
      at = next + sep.size();
    }
  } else {
    prompt = tok->encode(text);
  }
  o.eos = tok->eos();
  o.max_new_tokens = std::stoll(f.get("max-new-tokens", "64"));
  o.temperature = std::stod(f.get("temperature", "0"));
  o.top_p = std::stod(f.get("top-p", "1"));
  o.seed = std::stoull(f.get("seed", "0"));
  o.stop_token = f.has("stop-at-eos") ? tok->eos() : -1;
  o.train_T = run.recipe.data.seq_len;
  o.inference = run.recipe.eval_options().inference;
  const eval::Generation g = eval::generate(*run.model, prompt, o);
  const std::string out = tok->decode(g.tokens);
  if (!f.has("json")) {
    fmt::print("{}\n", out);
    return 0;
  }
  nlohmann::json j;
  j["prompt_tokens"] = prompt;
  j["tokens"] = g.tokens;
  j["text"] = out;
  j["context"] = g.context;
  j["prefill_ms"] = 1e3 * g.prefill_seconds;
  j["per_token_ms"] = 1e3 * median(g.step_seconds);
  j["kv_bytes"] = g.kv_bytes;
  fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  return 0;
}

int bench_generate_main(const std::vector<std::string>& a) {
  if (std::find(a.begin(), a.end(), "--help") != a.end() || a.size() < 3) {
    fmt::print("{}",
        "usage: horizon bench generate RECIPE.yaml|RUN_DIR [--lengths 256,512,1024,2048] [--new 16] [--reps 3]\n"
        "  Per context length: prefill time of the prompt, median time per generated token with the KV cache,\n"
        "  the same token recomputed by a full forward (no cache), and the cache's memory next to a cache\n"
        "  that keeps every key. Runs alternate (cached, uncached, cached, ...) so machine noise hits both.\n");
    return a.size() < 3 ? 2 : 0;
  }
  const std::vector<std::string> rest(a.begin() + 1, a.end());
  const Flags f = parse_flags(rest, {"lengths", "new", "reps"}, {});
  HZ_CHECK(!f.positional.empty(), ValueError, "bench generate: give a recipe or a run directory");
  std::unique_ptr<nn::Transformer> owned;
  study::LoadedRun run;
  const std::string target = f.positional[0];
  const std::vector<std::string> ov(f.positional.begin() + 1, f.positional.end());
  train::Recipe recipe;
  if (target.size() > 5 && target.substr(target.size() - 5) == ".yaml") {
    recipe = study::load_recipe(target, ov);
    owned = std::make_unique<nn::Transformer>(recipe.model_config(), static_cast<uint64_t>(recipe.run.seed));
  } else {
    run = study::load_run(target, ov);
    recipe = run.recipe;
    owned = std::move(run.model);
  }
  nn::Transformer& m = *owned;
  std::vector<int64_t> lengths;
  {
    std::stringstream ss(f.get("lengths", "256,512,1024,2048"));
    std::string item;
    while (std::getline(ss, item, ',')) lengths.push_back(std::stoll(item));
  }
  const int64_t n_new = std::stoll(f.get("new", "16")), reps = std::stoll(f.get("reps", "3"));
  const int64_t V = m.cfg.vocab_size;
  const auto inf = recipe.eval_options().inference;
  using clock = std::chrono::steady_clock;
  fmt::print("model: {} parameters, {} layers, d_model {}, heads {}/{}, trained at T = {}\n", m.num_parameters(),
             m.cfg.n_layers, m.cfg.d_model, m.cfg.n_heads, m.cfg.kv_heads(), recipe.data.seq_len);
  fmt::print("{:>8} {:>12} {:>14} {:>16} {:>8} {:>12} {:>14}\n", "context", "prefill ms", "cached ms/tok",
             "full fwd ms/tok", "speedup", "KV MiB", "KV MiB dense");
  for (int64_t L : lengths) {
    HZ_CHECK(L > n_new, ValueError, "bench generate: length ", L, " must exceed --new ", n_new);
    std::vector<int32_t> prompt(L - n_new);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 31 + 7) % std::min<int64_t>(V, 250));
    eval::ScopedInference si(m, inf, recipe.data.seq_len, L);
    std::vector<double> prefill, cached, full;
    int64_t kv = 0;
    const Device dev = m.device();
    auto settled = [&] {  // the clock stops once the device has finished
      synchronize(dev);
      return clock::now();
    };
    for (int64_t r = 0; r < reps; ++r) {
      {  // A: prefill + cached steps
        nn::KVCache cache(m, L, recipe.data.seq_len);
        kv = cache.bytes();
        auto t0 = settled();
        cache.prefill(prompt);
        prefill.push_back(std::chrono::duration<double>(settled() - t0).count());
        for (int64_t i = 0; i + 1 < n_new; ++i) {
          t0 = settled();
          cache.step(static_cast<int32_t>(i % 200));
          cached.push_back(std::chrono::duration<double>(settled() - t0).count());
        }
      }
      {  // B: one new token by recomputing the whole sequence (no cache)
        ag::NoGradGuard ng;
        std::vector<double> ids(prompt.begin(), prompt.end());
        ids.resize(L - 1, 5.0);
        nn::AttnCall call;
        call.T = L;
        call.train_T = recipe.data.seq_len;
        const auto t0 = settled();
        m.forward(Tensor::from_vector(ids, {1, L - 1}, DType::I64), Tensor(), call);
        full.push_back(std::chrono::duration<double>(settled() - t0).count());
      }
    }
    const int64_t dense = 2 * L * m.cfg.kv_heads() * m.cfg.hdim() * m.cfg.n_layers *
                          static_cast<int64_t>(dtype_size(m.cfg.dtype));
    const double c = median(cached), u = median(full);
    fmt::print("{:>8} {:>12.2f} {:>14.3f} {:>16.2f} {:>7.1f}x {:>12.3f} {:>14.3f}\n", L, 1e3 * median(prefill), 1e3 * c,
               1e3 * u, u / std::max(c, 1e-12), kv / 1048576.0, dense / 1048576.0);
    (void)V;
  }
  return 0;
}

}  // namespace hz::cli
