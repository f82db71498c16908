// Horizon: `horizon score MODEL FILE [--json] [--bos] [--ids] [key=value ...]`
// MODEL is a Horizon checkpoint, run directory or Hugging Face directory. FILE is tokenized with
// the model's tokenizer (data.tokenizer of its recipe; no BOS unless --bos), or read as
// whitespace-separated token ids with --ids. Prints the mean negative log-likelihood (nats) of
// tokens 2..n given their prefix; --json prints one object {"tokens": n, "mean_nll": x, "nll": [...]}.
// --f64 runs the same weights in double precision. Packed documents are scored as the model trained
// on them: with data.documents=masked each document ends at an EOS token and sees only itself.
#include <fmt/core.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/convert.h"
#include "cli/flags.h"
#include "core/error.h"
#include "data/tokenizer.h"
#include "eval/eval.h"
#include "eval/inference.h"
#include "eval/score.h"
#include "io/safetensors.h"
#include "study/load_run.h"
#include "train/trainer.h"

namespace hz::cli {

int score_main(const std::vector<std::string>& a) {
  bool json_out = false, bos = false, ids_in = false, help = false, f64 = false;
  std::string logits_out;
  std::vector<std::string> pos, overrides;
  for (size_t i = 1; i < a.size(); ++i) {
    const std::string& s = a[i];
    if (s == "--json") json_out = true;
    else if (s == "--bos") bos = true;
    else if (s == "--ids") ids_in = true;
    else if (s == "--f64") f64 = true;
    else if (s == "--logits" && i + 1 < a.size()) logits_out = a[++i];
    else if (s == "--help" || s == "-h") help = true;
    else if (s.rfind("--", 0) == 0) {
      fmt::print(stderr, "horizon score: unknown option '{}'\n", s);
      return 2;
    } else if (s.find('=') != std::string::npos && pos.size() >= 2) overrides.push_back(s);
    else pos.push_back(s);
  }
  if (help || pos.size() != 2) {
    fmt::print("{}", "usage: horizon score MODEL FILE [--json] [--bos] [--ids] [--f64] [--logits OUT.safetensors]\n"
               "                     [key=value ...]\n"
               "  MODEL: a Horizon checkpoint (.h5), run directory or Hugging Face directory.\n"
               "  Tokenizes FILE with the model's tokenizer (no BOS unless --bos; --ids: FILE holds token ids)\n"
               "  and prints the mean negative log-likelihood (nats) of tokens 2..n given their prefix, in one\n"
               "  forward pass. --json: {\"tokens\": n, \"mean_nll\": x, \"nll\": [per-token values]}.\n"
               "  --f64: compute in double precision (a reference for the float32 numbers).\n"
               "  --logits: also write the (n, vocab) logits of the whole text as tensor \"logits\" (f32, f64\n"
               "  with --f64) of a safetensors file: what other implementations of the model are checked against.\n"
               "  Packed documents are scored as the model trained (data.documents=masked: each ends at EOS).\n"
               "  Overrides apply to the model's recipe (e.g. data.tokenizer=PATH), inference-time options as\n"
               "  horizon eval applies them at the text's length (eval.rope_scaling=yarn, eval.lampe=true, ...).\n");
    return help ? 0 : 2;
  }
  const std::string text = read_input_file(pos[1], "score");
  study::LoadedRun run = study::load_run(pos[0], overrides);
  std::vector<int64_t> ids;
  std::unique_ptr<data::Tokenizer> tok;
  const std::string& spec = run.recipe.data.tokenizer;
  if (!ids_in || bos) {
    HZ_CHECK(!spec.empty(), ValueError, pos[0], " has no tokenizer (data.tokenizer is empty); pass data.tokenizer=SPEC",
             ids_in ? "" : " or token ids with --ids");
    tok = data::make_tokenizer(spec);
  }
  if (bos) ids.push_back(tok->bos());
  if (ids_in) {
    std::istringstream is(text);
    std::string w;
    while (is >> w) {
      size_t used = 0;
      int64_t v = 0;
      try {
        v = std::stoll(w, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      HZ_CHECK(used == w.size(), ValueError, pos[1], ": '", w, "' is not a token id (--ids reads whitespace-separated integers)");
      ids.push_back(v);
    }
  } else {
    for (int32_t t : tok->encode(text)) ids.push_back(t);
  }
  if (f64) {  // the same weights in double precision
    nn::ModelConfig c = run.model->cfg;
    c.dtype = DType::F64;
    auto m = std::make_unique<nn::Transformer>(c, 0, /*draw_weights=*/false);  // on the CPU
    m->load_state_dict(run.model->state_dict(), /*strict=*/true);
    m->compute_dtype = DType::F64;
    run.model = std::move(m);
  }
  // inference-time options (eval.rope_scaling, eval.lampe, eval.drope_c, eval.swan_a) as horizon eval
  // applies them, with the text's length as the evaluation length
  const eval::ScopedInference inference(*run.model, run.recipe.eval_options().inference, run.recipe.data.seq_len,
                                        static_cast<int64_t>(ids.size()));
  // packed documents scored as the model trained on them (data.documents / data.position_reset)
  const attn::DocumentOptions docs = run.recipe.eval_options().documents;
  if (docs.mode == attn::DocumentMode::Masked && !tok) tok = data::make_tokenizer(spec);
  const std::vector<double> nll =
      eval::token_nll(*run.model, ids, run.recipe.data.seq_len, -1, docs, tok ? tok->eos() : -1);
  if (!logits_out.empty()) {  // one forward pass of the whole text, positions 0..n-1, at T = n
    HZ_CHECK(docs.mode != attn::DocumentMode::Masked, ValueError,
             "--logits scores the text as one sequence; this model packs masked documents (pass data.documents=stream)");
    const int64_t n = static_cast<int64_t>(ids.size());
    nn::AttnCall call;
    call.T = n;
    call.train_len = run.recipe.data.seq_len;
    const Tensor in = Tensor::from_vector(std::vector<double>(ids.begin(), ids.end()), {1, n}, DType::I64);
    ag::NoGradGuard ng;
    const Tensor logits = run.model->forward(in, Tensor(), call).value().reshape({n, run.model->cfg.vocab_size});
    io::save_safetensors(logits_out, std::map<std::string, Tensor>{{"logits", logits.to(Device::cpu())}}, {{"format", "pt"}});
  }
  double sum = 0;
  for (double x : nll) sum += x;
  const double mean = sum / static_cast<double>(nll.size());
  eval::require_finite(mean, pos[0], "the mean NLL of " + pos[1]);
  if (json_out) {
    nlohmann::ordered_json j;
    j["tokens"] = ids.size();
    j["mean_nll"] = mean;
    j["nll"] = nll;
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("model:     {} (step {})\ntokenizer: {}{}\ntokens:    {}\nmean_nll:  {:.6f} nats/token (ppl {:.4f}) "
               "over tokens 2..{}\n",
               run.checkpoint, run.step, ids_in ? std::string("(ids from the file)") : spec, bos ? " + BOS" : "",
               ids.size(), mean, std::exp(mean), ids.size());
  }
  return 0;
}

}  // namespace hz::cli
