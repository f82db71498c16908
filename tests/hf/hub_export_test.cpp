// A Hub-ready export (horizon convert to-hf): a tiny trained and evaluated run exported with a small
// max shard size. The shards and their index hold every tensor exactly once, each shard within the
// size (a tensor never split), total_size / total_parameters the stored bytes / elements; the model
// card's numbers are the run's (eval.json's loss per length, the checkpoint's tokens seen, needle
// accuracy and effective length from needles.csv); generation_config.json carries config.json's token
// ids; nothing in the folder names a path outside it; a damaged eval.json refuses the export before
// anything is written.
#include <gtest/gtest.h>

#include <fmt/core.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "hf/hf.h"
#include "io/safetensors.h"
#include "study/evaluate_run.h"
#include "study/load_run.h"
#include "study/model_card.h"
#include "tests/train/train_test_util.h"
#include "train/trainer.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace hz;

namespace {

json read_json(const std::string& p) {
  std::ifstream in(p);
  return json::parse(in);
}

std::string read_text(const std::string& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// A run trained 3 steps (batch 2 x 32 tokens), evaluated at 32 and 64 tokens.
std::string trained_run(const std::string& root, const std::string& name, bool evaluate) {
  const train::Recipe r = test::tiny_recipe(root, name,
                                            {"model.d_model=32", "model.n_layers=2", "model.n_heads=2", "data.seq_len=32",
                                             "data.batch_size=2", "train.steps=3", "schedule.warmup_steps=1",
                                             "checkpoint.every=3", "eval.batches=1", "eval.lengths=[32, 64]",
                                             "eval.final=false", "metrics.tensorboard=false", "train.log_every=1"});
  train::train(r, test::quiet());
  const std::string dir = root + "/" + name;
  if (evaluate) {
    study::LoadedRun lr = study::load_run(dir, {});
    study::evaluate_run(lr, false);
  }
  return dir;
}

hf::ExportReport export_run(const std::string& run_dir, const std::string& out, uint64_t max_shard,
                            const std::string& license = "") {
  study::LoadedRun run = study::load_run(run_dir, {});
  hf::ExportOptions opt;
  opt.max_shard_bytes = max_shard;
  study::CardOptions card;
  card.license = license;
  opt.model_card = [&](const std::string& arch) { return study::model_card(run, arch, card); };
  return hf::export_dir(run.model->cfg, run.model->state_dict(), run.recipe.data.tokenizer, out, opt);
}

}  // namespace

TEST(HubExport, ShardsIndexCardAndGenerationConfig) {
  const std::string root = test::make_tmp_dir("hz_hub_export_test");
  const std::string run = trained_run(root, "evaluated", true);
  // needle cells as horizon eval writes them (eval/needles.cpp): passkey at 64 tokens 100% and 50% over
  // two depths (mean 75%), at 128 tokens 50% and 50% (mean 50%, under 85% of 75%): effective length 64
  std::ofstream(run + "/needles.csv") << "task,length,depth,samples,correct,accuracy,score\n"
                                      << "passkey,64,0,2,2,1.0000,1.0000\npasskey,64,1,2,1,0.5000,0.5000\n"
                                      << "passkey,128,0,2,1,0.5000,0.5000\npasskey,128,1,2,1,0.5000,0.7500\n";
  const std::string out = root + "/hf";
  const uint64_t max_shard = 20000;  // the embedding (259 x 32 f32 = 33,152 bytes) alone is above it
  const hf::ExportReport rep = export_run(run, out, max_shard, "apache-2.0");

  // the index: every tensor of the model exactly once, in the shard that holds it
  const json index = read_json(out + "/model.safetensors.index.json");
  const json& wm = index["weight_map"];
  study::LoadedRun lr = study::load_run(run, {});
  std::set<std::string> want;
  for (const auto& [hfname, hzname] : hf::parameter_names(lr.model->cfg)) want.insert(hfname);
  std::set<std::string> listed, stored, shard_files;
  for (auto it = wm.begin(); it != wm.end(); ++it) {
    listed.insert(it.key());
    shard_files.insert(it.value().get<std::string>());
  }
  EXPECT_EQ(listed, want);
  ASSERT_GT(shard_files.size(), 2u);
  uint64_t total_size = 0, total_params = 0, largest = 0;
  const size_t n = shard_files.size();
  size_t k = 0;
  for (const std::string& f : shard_files) {  // model-00001-of-0000n ... in order
    EXPECT_EQ(f, fmt::format("model-{:05d}-of-{:05d}.safetensors", ++k, n));
    const io::SafetensorsFile sf = io::SafetensorsFile::open(out + "/" + f);
    uint64_t bytes = 0;
    for (const auto& e : sf.entries()) {
      EXPECT_TRUE(stored.insert(e.name).second) << e.name << " stored twice";
      EXPECT_EQ(wm.value(e.name, ""), f) << e.name;
      bytes += e.end - e.begin;
      total_params += static_cast<uint64_t>(e.numel());
      largest = std::max(largest, e.end - e.begin);
    }
    // within the size, unless one tensor larger than it has the shard to itself
    EXPECT_TRUE(bytes <= max_shard || sf.entries().size() == 1) << f << ": " << bytes << " bytes";
    EXPECT_EQ(fs::file_size(out + "/" + f), 8 + sf.header_size() + bytes) << f;
    total_size += bytes;
  }
  EXPECT_GT(largest, max_shard);
  EXPECT_EQ(stored, want);
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total_size);
  EXPECT_EQ(index["metadata"]["total_parameters"].get<uint64_t>(), total_params);
  EXPECT_EQ(static_cast<int64_t>(total_params), lr.model->num_parameters());  // the head tied: not stored
  EXPECT_FALSE(fs::exists(out + "/model.safetensors"));
  // the weights read back through the same reader (io/safetensors.h) bit for bit
  const io::SafetensorsSet set = io::SafetensorsSet::open_dir(out);
  for (const auto& [hfname, hzname] : hf::parameter_names(lr.model->cfg))
    EXPECT_EQ(set.load(hfname).to_vector(), lr.model->state_dict().at(hzname).to_vector()) << hfname;

  // generation_config.json: config.json's token ids
  const json cfg = read_json(out + "/config.json"), gen = read_json(out + "/generation_config.json");
  EXPECT_EQ(gen.value("_from_model_config", false), true);
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"}) {
    ASSERT_TRUE(cfg[key].is_number_integer()) << key;
    EXPECT_EQ(gen[key], cfg[key]) << key;
  }

  // the card: front matter, the recipe, the layer kinds, the tokens seen and eval.json's numbers
  const std::string card = read_text(out + "/README.md");
  EXPECT_EQ(card.rfind("---\nlicense: apache-2.0\nlibrary_name: transformers\npipeline_tag: text-generation\ntags:\n", 0), 0u)
      << card.substr(0, 200);
  EXPECT_FALSE(has(card, "License: not set"));
  EXPECT_TRUE(has(card, "```yaml\n" + read_text(run + "/config.yaml"))) << "the run's config.yaml, verbatim";
  EXPECT_TRUE(has(card, "- `rope` (layers 0-1): " + lr.model->cfg.kind("rope").attn.describe() + "\n")) << card;
  EXPECT_TRUE(has(card, "3 steps, " + std::to_string(3 * 2 * 32) + " tokens seen")) << card;
  const json ev = read_json(run + "/eval.json");
  ASSERT_EQ(ev["lengths"].size(), 2u);
  for (const auto& l : ev["lengths"]) {
    const std::string row = fmt::format("| {} | {:.4f} | {:.2f} | {:.4f} |", l["length"].get<int64_t>(),
                                        l["loss"].get<double>(), l["ppl"].get<double>(), l["last256_loss"].get<double>());
    EXPECT_TRUE(has(card, row)) << row << "\n" << card;
  }
  EXPECT_TRUE(has(card, "| task | 64 | 128 | effective length |")) << card;
  EXPECT_TRUE(has(card, "| passkey | 75% | 50% | 64 |")) << card;
  // push_to_hub uploads the folder as it is: nothing in it names the run's directory
  for (const auto& f : rep.files)
    if (fs::path(f).extension() == ".json" || fs::path(f).extension() == ".py")
      EXPECT_FALSE(has(read_text(f), root)) << f << " names a path outside the folder";
  if (!HasFailure()) fs::remove_all(root);  // kept for inspection after a failure
}

TEST(HubExport, UnevaluatedRunsAndDamagedResults) {
  const std::string root = test::make_tmp_dir("hz_hub_export_test");
  const std::string run = trained_run(root, "plain", false);
  export_run(run, root + "/hf", 5000000000ull);
  EXPECT_TRUE(fs::exists(root + "/hf/model.safetensors"));  // under the size: one file, no index
  EXPECT_FALSE(fs::exists(root + "/hf/model.safetensors.index.json"));
  const std::string card = read_text(root + "/hf/README.md");
  EXPECT_TRUE(has(card, "\nlicense: other\n")) << card;
  EXPECT_TRUE(has(card, "**License: not set.**")) << card;
  EXPECT_TRUE(has(card, "Not evaluated (run `horizon eval " + run + "`)")) << card;
  // the export exported again: a Hugging Face directory is what horizon eval takes, no run directory
  export_run(root + "/hf", root + "/again", 5000000000ull);
  const std::string again = read_text(root + "/again/README.md");
  EXPECT_TRUE(has(again, "Not evaluated (run `horizon eval " + root + "/hf`)")) << again;
  EXPECT_TRUE(has(again, "steps and tokens seen: not recorded")) << again;

  // an eval.json that is not what horizon eval writes: refused by name, nothing written
  std::ofstream(run + "/eval.json") << "{\"lengths\": [{\"length\": 32, \"loss\": \"low\"}]}";
  try {
    export_run(run, root + "/bad", 5000000000ull);
    FAIL() << "a damaged eval.json was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), run + "/eval.json")) << e.what();
  }
  EXPECT_FALSE(fs::exists(root + "/bad"));
  EXPECT_THROW(study::check_license_id("Apache 2.0"), ValueError);
  EXPECT_THROW(study::check_license_id(""), ValueError);
  study::check_license_id("cc-by-4.0");
  if (!HasFailure()) fs::remove_all(root);
}
