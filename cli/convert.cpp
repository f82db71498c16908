// Horizon: Hugging Face checkpoints in and out.
//   horizon convert hf HF_DIR OUT.h5 [key=value ...]
//       config.json + *.safetensors -> a Horizon checkpoint (step 0) whose recipe carries the
//       imported model; prints how every config.json field was used.
//   horizon convert to-hf CKPT|RUN_DIR|HF_DIR OUT_DIR [--dtype f32|bf16|f16] [--max-shard-size 5GB]
//                         [--remote-code | --stock] [--license ID]
//       -> config.json + generation_config.json + model.safetensors (sharded above the size) +
//       tokenizer + README.md (the model card, study/model_card.h), for transformers and the Hub: a
//       stock architecture where one expresses the model, else HorizonForCausalLM with its code.
#include "cli/convert.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <filesystem>

#include "core/error.h"
#include "hf/hf.h"
#include "study/hf_models.h"
#include "study/load_run.h"
#include "study/model_card.h"
#include "train/checkpoint.h"
#include "train/recipe.h"
#include "train/trainer.h"

namespace fs = std::filesystem;

namespace hz::cli {

namespace {

void usage() {
  const std::vector<std::string> arch = hf::architecture_names();  // the stock ones, then HorizonForCausalLM
  const std::string stock = fmt::format("{}", fmt::join(arch.begin(), arch.end() - 1, " / "));
  fmt::print(
      "usage: horizon convert hf HF_DIR OUT.h5 [key=value ...]\n"
      "       horizon convert to-hf CKPT|RUN_DIR|HF_DIR OUT_DIR [--dtype f32|bf16|f16] [--max-shard-size 5GB]\n"
      "                             [--remote-code | --stock] [--license ID]\n\n"
      "  hf     imports a Hugging Face directory ({}),\n"
      "         or one Horizon exported as {} (config.json + model.safetensors or shards) into a\n"
      "         Horizon checkpoint at step 0 (usable by horizon eval / score and checkpoint.init_from); the\n"
      "         overrides edit its recipe (e.g. data.seq_len=2048). Prints how every config field was used.\n"
      "         A recipe may also name the directory itself: checkpoint.init_from: HF_DIR.\n"
      "  to-hf  exports a Horizon model to a directory transformers loads: with the stock architecture\n"
      "         that expresses it, else as {}, whose code\n"
      "         (modeling_horizon.py, every Horizon ingredient) is written beside config.json's auto_map:\n"
      "         load it with from_pretrained(OUT_DIR, trust_remote_code=True). --remote-code: always\n"
      "         {}; --stock: refuse, naming the reasons, what no stock architecture\n"
      "         expresses. --dtype: storage of the weights (default f32); --max-shard-size: shard above\n"
      "         it (default 5GB; model-0000k-of-0000n.safetensors + model.safetensors.index.json). Also\n"
      "         writes generation_config.json and README.md, the Hub's model card (recipe, layer kinds,\n"
      "         tokens seen, eval.json's results); --license: its license (the Hub's identifier, e.g.\n"
      "         apache-2.0; default other, to be set before publishing). OUT_DIR must be new.\n",
      stock, arch.back(), arch.back(), arch.back());
}

int convert_hf(const std::vector<std::string>& a) {
  if (a.size() < 4) {
    usage();
    return 2;
  }
  const std::string dir = a[2], out = a[3];
  const std::vector<std::string> overrides(a.begin() + 4, a.end());
  HZ_CHECK(hf::is_hf_dir(dir), ValueError, "'", dir, "' is not a Hugging Face model directory (no config.json)");
  const hf::Imported im = hf::import_dir(dir);
  const train::Recipe r = study::hf_recipe(dir, overrides);
  train::CheckpointData c;
  c.step = 0;
  const nn::ModelConfig mc = train::model_config_at(r, 0);
  const auto shapes = hf::parameter_shapes(mc);
  for (const auto& [k, t] : im.weights) {
    auto it = shapes.find(k);
    HZ_CHECK(it != shapes.end() && it->second == t.shape(), ValueError, "the overrides changed the model so that '", k,
             "' no longer fits; convert without model.* overrides");
  }
  HZ_CHECK(shapes.size() == im.weights.size(), ValueError,
           "the overrides changed the model's parameters; convert without model.* overrides");
  c.model = im.weights;
  c.meta["recipe"] = train::to_yaml(r);
  c.meta["horizon_version"] = HZ_VERSION;
  c.meta["hf_source"] = dir;
  c.meta["hf_import_report"] = im.report.str();
  train::save_checkpoint(out, c);
  fmt::print("{}", im.report.str());
  fmt::print("data.seq_len = {}, data.tokenizer = '{}'\nwrote {} ({} tensors, step 0)\n", r.data.seq_len,
             r.data.tokenizer, out, c.model.size());
  return 0;
}

int convert_to_hf(const std::vector<std::string>& a) {
  if (a.size() < 4) {
    usage();
    return 2;
  }
  const std::string src = a[2], out = a[3];
  hf::ExportOptions opt;
  study::CardOptions card;
  for (size_t i = 4; i < a.size(); ++i) {
    if (a[i] == "--dtype" && i + 1 < a.size()) {
      opt.store = io::parse_store_as(a[++i]);
      HZ_CHECK(opt.store != io::StoreAs::Native, ValueError, "--dtype must be f32, bf16 or f16");
    } else if (a[i] == "--remote-code") {
      opt.target = hf::ExportTarget::Horizon;
    } else if (a[i] == "--stock") {
      opt.target = hf::ExportTarget::Stock;
    } else if (a[i] == "--max-shard-size" && i + 1 < a.size()) {
      opt.max_shard_bytes = io::parse_byte_size(a[++i]);
    } else if (a[i] == "--license" && i + 1 < a.size()) {
      card.license = a[++i];
      study::check_license_id(card.license);
    } else {
      fmt::print(stderr, "horizon convert to-hf: unknown option '{}'\n", a[i]);
      usage();
      return 2;
    }
  }
  study::LoadedRun run = study::load_run(src, {});
  opt.model_card = [&](const std::string& architecture) { return study::model_card(run, architecture, card); };
  const hf::ExportReport rep =
      hf::export_dir(run.model->cfg, run.model->state_dict(), run.recipe.data.tokenizer, out, opt);
  fmt::print("exported {} (step {}) as {}\n", run.checkpoint, run.step, rep.architecture);
  for (const auto& n : rep.notes) fmt::print("  note: {}\n", n);
  for (const auto& w : rep.warnings) fmt::print(stderr, "horizon convert to-hf: {}\n", w);
  for (const auto& f : rep.files) fmt::print("  wrote {}\n", f);
  return 0;
}

}  // namespace

int convert_main(const std::vector<std::string>& a) {
  for (const auto& s : a)
    if (s == "--help" || s == "-h") {
      usage();
      return 0;
    }
  if (a.size() >= 2 && a[1] == "hf") return convert_hf(a);
  if (a.size() >= 2 && a[1] == "to-hf") return convert_to_hf(a);
  usage();
  return 2;
}

}  // namespace hz::cli
