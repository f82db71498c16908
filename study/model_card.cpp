#include "study/model_card.h"

#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "attention/documents.h"
#include "core/error.h"
#include "core/file.h"
#include "core/version.h"
#include "eval/needles.h"
#include "nn/layers.h"
#include "study/report.h"
#include "train/checkpoint.h"
#include "train/recipe.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace hz::study {

namespace {

constexpr uint64_t kMaxRecipeBytes = 16ull << 20;  // a run's config.yaml (real ones: a few KB)

// A fence longer than any run of backticks in `text`, so the embedded file cannot close it.
std::string fence_for(const std::string& text) {
  size_t longest = 0, run = 0;
  for (char c : text) {
    run = c == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  return std::string(std::max<size_t>(3, longest + 1), '`');
}

// "0-3, 6" for the layers [0, 1, 2, 3, 6].
std::string layer_ranges(const std::vector<int64_t>& layers) {
  std::string out;
  for (size_t i = 0; i < layers.size();) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(layers[i]) + (j > i ? "-" + std::to_string(layers[j]) : "");
    i = j + 1;
  }
  return out;
}

std::string data_words(const train::DataSection& d) {
  std::string s;
  switch (d.source) {
    case train::DataSource::Bible: s = "the King James Bible (the corpus embedded in Horizon)"; break;
    case train::DataSource::Files:
    case train::DataSource::Jsonl:
    case train::DataSource::Tokens: {
      s = std::string(train::name(d.source)) + " files";
      for (size_t i = 0; i < d.files.size(); ++i) s += (i ? ", `" : " `") + d.files[i] + "`";
      break;
    }
    default: s = std::string("the synthetic task `") + train::name(d.source) + "`"; break;
  }
  if (!d.mix_task.empty() && d.mix_share > 0)
    s += fmt::format(", with {:g}% of the batches the synthetic task `{}`", 100.0 * d.mix_share, d.mix_task);
  return s;
}

std::string front_matter(const std::string& architecture, const std::string& license) {
  std::ostringstream md;
  md << "---\nlicense: " << (license.empty() ? "other" : license) << "\nlibrary_name: transformers\n"
     << "pipeline_tag: text-generation\ntags:\n- horizon\n- long-context\n- position-encoding\n";
  if (architecture == "HorizonForCausalLM") md << "- custom_code\n";
  md << "---\n\n";
  return md.str();
}

std::string model_section(const LoadedRun& run) {
  const nn::ModelConfig& c = run.model->cfg;
  std::ostringstream md;
  md << "## Model\n\n| parameters | layers | d_model | heads | kv heads | head dim | MLP | vocabulary | training length |\n"
     << "|---|---|---|---|---|---|---|---|---|\n"
     << fmt::format("| {} | {} | {} | {} | {} | {} | {} ({}) | {} | {} |\n\n", run.model->num_parameters(), c.n_layers,
                    c.d_model, c.n_heads, c.kv_heads(), c.hdim(), nn::mlp_name(c.mlp), c.hidden(), c.vocab_size,
                    c.train_len)
     << "Layer kinds (position encoding, mask, logit transform and the other attention ingredients, as Horizon "
        "describes them):\n\n";
  const std::vector<std::string> names = c.layer_kind_names();
  for (const auto& kind : c.kinds) {
    std::vector<int64_t> layers;
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == kind.name) layers.push_back(static_cast<int64_t>(i));
    if (layers.empty()) continue;
    md << "- `" << kind.name << "` (layer" << (layers.size() > 1 ? "s " : " ") << layer_ranges(layers)
       << "): " << kind.attn.describe() << "\n";
  }
  return md.str() + "\n";
}

std::string training_section(const LoadedRun& run, const json& results) {
  const train::Recipe& r = run.recipe;
  std::ostringstream md;
  md << "## Training\n\n"
     << "- data: " << data_words(r.data) << "; tokenizer `" << r.data.tokenizer << "`\n"
     << "- sequences of " << r.data.seq_len << " tokens (" << attn::name(r.data.documents) << " documents)\n";
  if (run.tokens_seen > 0)
    md << "- " << run.step << " steps, " << run.tokens_seen << " tokens seen (the exported checkpoint, "
       << fs::path(run.checkpoint).filename().string() << ")\n";
  else
    md << "- steps and tokens seen: not recorded (step " << run.step << " of " << fs::path(run.checkpoint).filename().string()
       << ")\n";
  const json& curve = results["train_curve"];
  if (!curve.empty())
    md << fmt::format("- last logged training loss: {:.4f} at step {} (metrics.jsonl)\n", curve.back()[1].get<double>(),
                      curve.back()[0].get<int64_t>());
  return md.str() + "\n";
}

std::string recipe_section(const LoadedRun& run) {
  std::string text;
  const std::string path = run.run_dir + "/config.yaml";
  std::string source = "The run's `config.yaml`, the fully resolved recipe (`horizon train config.yaml` repeats the run)";
  if (!read_file_capped(path, kMaxRecipeBytes, text).empty()) {
    text = train::to_yaml(run.recipe);  // a checkpoint outside its run, a Hugging Face directory
    source = "The recipe Horizon resolved for the exported model (no config.yaml beside it)";
  }
  if (!text.empty() && text.back() != '\n') text += '\n';
  const std::string fence = fence_for(text);
  return "## Recipe\n\n" + source + ":\n\n" + fence + "yaml\n" + text +
         fence + "\n\n";
}

std::string evaluation_section(const LoadedRun& run, const json& results) {
  std::ostringstream md;
  md << "## Evaluation\n\n";
  const bool lengths = results.contains("lengths") && !results["lengths"].empty();
  const bool needles = !results["needles"].empty();
  if (!lengths && !needles) {
    // a run directory, else what was exported (a checkpoint or a Hugging Face directory) is what horizon eval takes
    const bool is_run = fs::exists(run.run_dir + "/config.yaml");
    md << "Not evaluated (run `horizon eval " << (is_run ? run.run_dir : run.checkpoint) << "`).\n\n";
    return md.str();
  }
  const std::string latest = train::find_latest_checkpoint(run.run_dir + "/checkpoints");
  if (!latest.empty() && fs::path(latest).filename() != fs::path(run.checkpoint).filename())
    md << "`horizon eval` scored the run's latest checkpoint, " << fs::path(latest).filename().string()
       << ", not the exported one.\n\n";
  if (lengths) {
    md << "Held-out loss per evaluation length (eval.json; nats per token):\n\n"
       << "| length | loss | perplexity | last-256 loss |\n|---|---|---|---|\n";
    for (const auto& l : results["lengths"])
      md << fmt::format("| {} | {:.4f} | {} | {:.4f} |\n", l["length"].get<int64_t>(), l["loss"].get<double>(),
                        l.contains("ppl") ? fmt::format("{:.2f}", l["ppl"].get<double>()) : std::string("-"),
                        l["last256_loss"].get<double>());
    md << "\n";
  }
  if (needles) {
    const auto acc = needle_accuracy(results["needles"]);
    std::set<int64_t> all;
    for (const auto& [task, byL] : acc)
      for (const auto& [L, a] : byL) all.insert(L);
    md << "Needle accuracy per length (greedy decoding, averaged over depths; effective length: the longest length "
          "up to which every length keeps at least 85% of the accuracy at the shortest):\n\n| task |";
    for (int64_t L : all) md << " " << L << " |";
    md << " effective length |\n|---|";
    for (size_t i = 0; i < all.size(); ++i) md << "---|";
    md << "---|\n";
    for (const auto& [task, byL] : acc) {
      md << "| " << task << " |";
      for (int64_t L : all) {
        const auto it = byL.find(L);
        md << " " << (it == byL.end() ? std::string("-") : fmt::format("{:.0f}%", 100.0 * it->second)) << " |";
      }
      md << " " << eval::effective_length(byL) << " |\n";
    }
    md << "\n";
  }
  return md.str();
}

}  // namespace

void check_license_id(const std::string& id) {
  const bool ok = !id.empty() && id.size() <= 64 && std::isalnum(static_cast<unsigned char>(id[0])) &&
                  std::all_of(id.begin(), id.end(), [](char c) {
                    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
                  });
  HZ_CHECK(ok, ValueError, "--license '", id,
           "' is not a Hub license identifier (lower-case letters, digits, '.', '-': apache-2.0, mit, cc-by-4.0, ...)");
}

std::string model_card(const LoadedRun& run, const std::string& architecture, const CardOptions& o) {
  if (!o.license.empty()) check_license_id(o.license);
  if (fs::is_directory(run.run_dir)) {
    try {
      finish_file_set(run.run_dir);  // an evaluation stopped between its renames: its complete files go into place
    } catch (const Error&) {
      // read-only: the previous set is still whole, read it
    }
  }
  const json results = read_run_results(run.run_dir);  // a ValueError names a damaged file
  const std::string& name = run.recipe.run.name;
  std::ostringstream md;
  md << front_matter(architecture, o.license) << "# " << name << "\n\n"
     << "A `" << architecture << "` exported by Horizon " << version() << " (`horizon convert to-hf`) from the run `"
     << name << "`, checkpoint step " << run.step << ".\n\n";
  if (o.license.empty())
    md << "**License: not set.** Replace `license: other` in the front matter above with the model's license "
          "before publishing (or export with `horizon convert to-hf --license ID`).\n\n";
  const bool remote = architecture == "HorizonForCausalLM";
  md << "## Use\n\n```python\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n"
     << "model = AutoModelForCausalLM.from_pretrained(\"PATH_OR_REPO\"" << (remote ? ", trust_remote_code=True" : "")
     << ")\ntok = AutoTokenizer.from_pretrained(\"PATH_OR_REPO\"" << (remote ? ", trust_remote_code=True" : "")
     << ")\n```\n\n";
  if (remote)
    md << "The model's code is `modeling_horizon.py` in this folder (eager PyTorch, every Horizon ingredient next to its "
          "formula); `config.json` names it in `auto_map`. AutoTokenizer reads `config.json` too, whose model type is "
          "this code's, so it takes `trust_remote_code=True` as well (without it, transformers asks).\n\n";
  md << model_section(run) << training_section(run, results) << evaluation_section(run, results) << recipe_section(run);
  return md.str();
}

}  // namespace hz::study
