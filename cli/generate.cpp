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
#include "cli/flags.h"
#include "core/device.h"
#include "data/tokenizer.h"
#include "eval/generate.h"
#include "eval/inference.h"
#include "nn/kv_cache.h"
#include "study/load_run.h"
#include "study/hf_models.h"
#include "train/trainer.h"

namespace hz::cli {

int generate_main(const std::vector<std::string>& a) {
  if (a.size() < 2 || std::find(a.begin(), a.end(), "--help") != a.end()) {
    fmt::print("{}",
        "usage: horizon generate RUN_DIR|CHECKPOINT (--prompt TEXT | --file F) [--max-new-tokens N]\n"
        "                        [--temperature T] [--top-p P] [--seed S] [--stop-at-eos] [--json]\n"
        "                        [--documents stream|masked] [--doc-separator S] [eval.key=value ...]\n"
        "  Prints only the continuation (temperature 0 = greedy; sampling is reproducible from --seed).\n"
        "  Inference options come from the run's recipe and overrides, as for horizon eval:\n"
        "  eval.rope_scaling=yarn eval.lampe=true eval.swan_a=362 eval.drope_c=0.4 ...\n"
        "  --json prints {prompt_tokens, tokens, text, capacity, prefill_ms, per_token_ms, kv_bytes}.\n"
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
  if (f.has("file")) text = read_input_file(f.get("file"), "generate --file");
  // the numbers first: a bad one is refused before the model loads
  const int64_t max_new = f.geti("max-new-tokens", 64, 1, int64_t{1} << 24);
  const double temperature = f.getd("temperature", 0, 0, 1e6), top_p = f.getd("top-p", 1, 0, 1);
  const int64_t seed = f.geti("seed", 0, 0);
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
  o.max_new_tokens = max_new;
  o.temperature = temperature;
  o.top_p = top_p;
  o.seed = static_cast<uint64_t>(seed);
  o.stop_token = f.has("stop-at-eos") ? tok->eos() : -1;
  o.train_len = run.recipe.data.seq_len;
  o.inference = run.recipe.eval_options().inference;
  o.model = run.checkpoint;
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
  j["capacity"] = g.capacity;
  j["prefill_ms"] = 1e3 * g.prefill_seconds;
  j["per_token_ms"] = 1e3 * median(g.step_seconds);
  j["kv_bytes"] = g.kv_bytes;
  fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  return 0;
}


}  // namespace hz::cli
