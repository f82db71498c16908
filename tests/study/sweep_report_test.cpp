// Sweeps (study/sweep.h): a two-point sweep runs, is interrupted inside its second point, and
// resumes (the finished point skipped, the interrupted one continued from its checkpoint) to the
// same numbers as an uninterrupted sweep. Reports (study/report.h): the markdown page, the JSON
// and every plot exist and are non-empty.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/train/train_test_util.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "data/shard.h"
#include "eval/eval.h"
#include "eval/needles.h"
#include "eval/probe.h"
#include "study/evaluate_run.h"
#include "study/load_run.h"
#include "study/report.h"
#include "study/sweep.h"
#include "train/recipe.h"

using namespace hz;
using namespace hz::study;
using namespace hz::train;
namespace fs = std::filesystem;

namespace {

std::string tmp_root() {
  static const std::string root = test::make_tmp_dir("hz_sweep_test");
  return root;
}

std::string write_grid(const std::string& name) {
  const std::string recipe = tmp_root() + "/tiny.yaml";
  std::ofstream(recipe) << "model:\n  d_model: 32\n  n_layers: 1\n  n_heads: 2\n  layer_kinds:\n    rope: {pos: rope}\n"
                        << "  pattern: [rope]\ndata: {seq_len: 32, batch_size: 4, cache_dir: " << tmp_root() << "/data}\n"
                        << "train: {steps: 6, log_every: 2}\nschedule: {warmup_steps: 1}\ncheckpoint: {every: 2}\n"
                        << "eval: {every: 0, batches: 1, lengths: [32, 64]}\n";
  const std::string grid = tmp_root() + "/" + name + ".yaml";
  std::ofstream(grid) << "recipe: tiny.yaml\nname: " << name << "\nout_dir: " << tmp_root() << "\n"
                      << "overrides: [optim.lr=1e-2]\ngrid:\n  model.n_heads: [2, 4]\neval: [eval.batches=2]\n";
  return grid;
}

// A tiny trained run: the first point of the grid `name`, trained by a quiet sweep.
std::string tiny_run(const std::string& name) {
  SweepOptions quiet;
  quiet.quiet = true;
  run_sweep(load_sweep(write_grid(name)), quiet);
  return tmp_root() + "/" + name + "/p00-2";
}
// A short passkey needle grid at length 96 (one sample, one depth).
const std::vector<std::string> kShortNeedles = {"eval.needle_tasks=[passkey]", "eval.needle_samples=1",
                                                "eval.needle_format=short", "eval.needle_depths=[0.5]",
                                                "eval.lengths=[96]"};

}  // namespace

TEST(Sweep, ExpandsInOrderAndRefusesBadPoints) {
  const SweepSpec s = load_sweep(write_grid("expand"));
  const auto pts = expand(s);
  ASSERT_EQ(pts.size(), 2u);
  EXPECT_EQ(pts[0].values, std::vector<std::string>{"2"});
  EXPECT_EQ(pts[1].values, std::vector<std::string>{"4"});
  EXPECT_EQ(pts[1].dir, tmp_root() + "/expand/p01-4");
  const std::string bad = tmp_root() + "/bad.yaml";
  std::ofstream(bad) << "recipe: tiny.yaml\ngrid:\n  model.n_heads: [2, 3]\n";  // 32 % 3 != 0
  try {
    load_sweep(bad);
    FAIL() << "a grid with an impossible point was accepted";
  } catch (const RecipeError& e) {
    EXPECT_NE(std::string(e.what()).find("point 1 (3)"), std::string::npos) << e.what();
  }
  std::ofstream(bad) << "recipe: tiny.yaml\ngrids:\n  model.n_heads: [2]\n";
  EXPECT_THROW(load_sweep(bad), RecipeError);
}

TEST(Sweep, InterruptedSweepResumesToTheSameTable) {
  SweepOptions quiet;
  quiet.quiet = true;
  const SweepResult ref = run_sweep(load_sweep(write_grid("straight")), quiet);
  ASSERT_FALSE(ref.interrupted);
  ASSERT_EQ(ref.rows.size(), 2u);

  const SweepSpec s = load_sweep(write_grid("resumed"));
  SweepOptions cut = quiet;
  cut.interrupt_point = 1;
  cut.interrupt_after = 3;  // checkpoints at steps 2 (and 4, 6): dies after step 3
  const SweepResult first = run_sweep(s, cut);
  EXPECT_TRUE(first.interrupted);
  ASSERT_EQ(first.rows.size(), 2u);
  EXPECT_FALSE(first.rows[0].skipped);
  EXPECT_TRUE(fs::exists(tmp_root() + "/resumed/p00-2/sweep_point.json"));
  EXPECT_FALSE(fs::exists(tmp_root() + "/resumed/p01-4/sweep_point.json"));
  const auto mtime = fs::last_write_time(tmp_root() + "/resumed/p00-2/eval.json");

  const SweepResult second = run_sweep(s, quiet);
  ASSERT_FALSE(second.interrupted);
  ASSERT_EQ(second.rows.size(), 2u);
  EXPECT_TRUE(second.rows[0].skipped);                   // finished: not run again
  EXPECT_EQ(fs::last_write_time(tmp_root() + "/resumed/p00-2/eval.json"), mtime);
  EXPECT_FALSE(second.rows[1].skipped);
  EXPECT_EQ(second.rows[1].resumed_from, 2);             // from the step-2 checkpoint
  for (size_t i = 0; i < 2; ++i) {                       // bit for bit the uninterrupted numbers
    EXPECT_EQ(second.rows[i].final_train_loss, ref.rows[i].final_train_loss) << i;
    EXPECT_EQ(second.rows[i].loss, ref.rows[i].loss) << i;
    EXPECT_EQ(second.rows[i].last256, ref.rows[i].last256) << i;
  }
  ASSERT_EQ(second.rows[1].lengths, (std::vector<int64_t>{32, 64}));
  EXPECT_TRUE(fs::file_size(tmp_root() + "/resumed/sweep.csv") > 0);
  EXPECT_NE(second.table.find("| p01-4 | 4 |"), std::string::npos) << second.table;
}

// An evaluation replaces the previous one's results whole: one without needle tasks or the position
// probe leaves no needles.csv or probes.csv of an earlier one beside its eval.json (a report would
// read them as this evaluation's).
TEST(Evaluate, AnEvaluationRemovesThePreviousOnesResultsItDoesNotProduce) {
  const std::string run = tiny_run("restale");
  {
    std::vector<std::string> ov = kShortNeedles;
    ov.push_back("eval.probe_sequences=2");
    LoadedRun lr = load_run(run, ov);
    evaluate_run(lr, false);
  }
  for (const char* f : {"eval.json", "needles.csv", "needles.json", "probes.csv"}) ASSERT_TRUE(fs::exists(run + "/" + f)) << f;
  {
    LoadedRun lr = load_run(run, {"eval.needle_tasks=[]", "eval.lengths=[32]", "eval.probe_sequences=0"});
    evaluate_run(lr, false);
  }
  EXPECT_TRUE(fs::exists(run + "/eval.json"));
  EXPECT_TRUE(fs::exists(run + "/nll_by_position.csv"));
  for (const char* f : {"needles.csv", "needles.json", "probes.csv"}) EXPECT_FALSE(fs::exists(run + "/" + f)) << f;
  EXPECT_TRUE(fs::exists(run + "/config.yaml"));  // the run's own files stay
}

TEST(Report, FilesExistAndAreNonEmpty) {
  // a tiny trained run, evaluated with needles and the probe
  const std::string run = tiny_run("forreport");
  LoadedRun lr = load_run(run, kShortNeedles);
  const eval::EvalOptions eo = lr.recipe.eval_options();
  eval::write_needles(eval::evaluate_needles(*lr.model, eo), run);
  const auto val = data::Shard::open(tmp_root() + "/data/val.shard");
  eval::write_probes(eval::position_probe(*lr.model, *val, 32, 3, 1, 32), run);
  ReportOptions o;
  o.out_dir = tmp_root() + "/report";
  o.oa_T = 64;
  o.oa_heads = 6;
  o.oa_layers = 4;
  const ReportResult r = make_report({run, tmp_root() + "/forreport/p01-4"}, o);
  for (const std::string f : {"README.md", "report.json", "loss_vs_length.png", "nll_by_position.png", "training_loss.png",
                              "needles_p00-2.png", "probe_r2.png", "attention_flops.png", "order_awareness.png"}) {
    ASSERT_TRUE(fs::exists(o.out_dir + "/" + f)) << f;
    EXPECT_GT(fs::file_size(o.out_dir + "/" + f), 1000u) << f;
  }
  std::ifstream md(r.markdown_path);
  const std::string text((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("| p00-2 | rope(base=10000) causal identity |"), std::string::npos) << text;
  EXPECT_NE(text.find("## Needles"), std::string::npos);
  EXPECT_NE(text.find("effective length |"), std::string::npos) << text;
  std::ifstream rj(r.json_path);
  const nlohmann::json report = nlohmann::json::parse(rj);
  ASSERT_TRUE(report.contains("effective_length")) << report.dump().substr(0, 300);
  EXPECT_TRUE(report["effective_length"].contains("p00-2"));
  EXPECT_NE(text.find("![order awareness](order_awareness.png)"), std::string::npos);
  EXPECT_THROW(make_report({tmp_root()}, o), ValueError);  // not a run directory
}

// Issue 40: runs of one method with several seeds are grouped, with the mean and a 95% interval
// (Student's t) of each number and the effective length of the mean needle accuracy.
// An evaluated run for the report's grouping: its config.yaml (the model text with the overrides)
// and the result files of horizon eval.
void write_evaluated_run(const std::string& root, const std::string& name, const std::string& model_yaml,
                         std::vector<std::string> overrides, double loss, double acc_long) {
  const std::string dir = root + "/" + name;
  fs::create_directories(dir);
  overrides.insert(overrides.end(), {"run.name=" + name, "run.out_dir=" + root});
  const train::Recipe r = train::parse_recipe(model_yaml + "data: {seq_len: 32}\n", "t.yaml", overrides);
  std::ofstream(dir + "/config.yaml") << train::to_yaml(r);
  std::ofstream(dir + "/eval.json") << "{\"train_length\": 32, \"lengths\": [{\"length\": 32, \"loss\": " << loss
                                    << ", \"ppl\": 1, \"last256_loss\": " << loss + 0.5
                                    << ", \"tokens\": 10, \"drope_c\": 0, \"swan_a\": 0}], \"nll_length\": 32}\n";
  std::ofstream(dir + "/needles.csv") << "task,length,depth,samples,correct,accuracy,score\n"
                                      << "passkey,32,0.5,4,4,1.0,1.0\npasskey,64,0.5,4,0," << acc_long << "," << acc_long << "\n";
  std::ofstream(dir + "/passkey.csv") << "length,depth,examples,correct,accuracy,digit_accuracy\n32,0,5,5,1.0000,1.0000\n"
                                      << "64,0,5,0,0.0000,0.2000\n";
}

// The report of `dirs` into root/report, without plots and with a small order-awareness simulation.
ReportResult small_report(const std::string& root, const std::vector<std::string>& dirs) {
  ReportOptions o;
  o.out_dir = root + "/report";
  o.plots = false;
  o.oa_T = 16;
  o.oa_heads = 4;
  o.oa_layers = 2;
  return make_report(dirs, o);
}

// Two stacks of the same kinds in another order (one description) are two methods named by their layers,
// and by their steps where those differ; factors a
// LongRoPE search found per seed group the seeds as one method (like the checkpoint each starts from).
TEST(Report, LayerOrdersAndPerSeedFactorsGroupAsTheirMethods) {
  const std::string root = tmp_root() + "/orders";
  const std::string kinds = "model:\n  d_model: 32\n  n_layers: 3\n  n_heads: 2\n  layer_kinds:\n    a: {pos: rope}\n"
                            "    b: {pos: none}\n";
  std::vector<std::string> dirs;
  for (int seed : {1, 2}) {
    const std::string sd = std::to_string(seed);
    write_evaluated_run(root, "ab-" + sd, kinds + "  pattern: [a, b, a]\n", {"run.seed=" + sd}, 1.0 + seed, 1.0);
    write_evaluated_run(root, "ba-" + sd, kinds + "  pattern: [a, a, b]\n", {"run.seed=" + sd}, 2.0 + seed, 1.0);
    write_evaluated_run(root, "lr-" + sd, kinds + "  pattern: [a]\n",
                        {"run.seed=" + sd, "eval.rope_scaling=longrope",
                         "eval.longrope_long_factors=[1, " + std::to_string(1 + seed) + "]"},
                        3.0 + seed, 1.0);
    write_evaluated_run(root, "long-" + sd, kinds + "  pattern: [a, b, a]\n", {"run.seed=" + sd, "train.steps=77"},
                        1.5 + seed, 1.0);
    for (const char* m : {"ab-", "ba-", "lr-", "long-"}) dirs.push_back(root + "/" + m + sd);
  }
  const ReportResult r = small_report(root, dirs);
  std::ifstream rj(r.json_path);
  const nlohmann::json j = nlohmann::json::parse(rj);
  ASSERT_EQ(j["groups"].size(), 4u) << j["groups"].dump();
  std::set<std::string> names;
  for (const auto& g : j["groups"]) {
    EXPECT_EQ(g["seeds"], nlohmann::json({1, 2})) << g["name"];
    names.insert(g["name"].get<std::string>());
  }
  std::string all;
  for (const auto& n : names) all += n + "\n";
  EXPECT_NE(all.find("[layers a, b, a], 300 steps\n"), std::string::npos) << all;  // the default train.steps
  EXPECT_NE(all.find("[layers a, b, a], 77 steps\n"), std::string::npos) << all;
  EXPECT_NE(all.find("[layers a, a, b]"), std::string::npos) << all;
  EXPECT_NE(all.find("evaluated with rope_scaling longrope, its own long factors"), std::string::npos) << all;
  EXPECT_EQ(all.find(" #"), std::string::npos) << all;
}

// A run evaluated with inference-time overrides (horizon eval RUN model.layer_kinds.s.freeze_scopes=true)
// is described and grouped as evaluated (its eval_recipe.yaml), apart from the runs evaluated as trained.
TEST(Report, RunsEvaluatedWithOverridesAreTheirOwnMethod) {
  const std::string root = tmp_root() + "/evaluated_as";
  const std::string model = "model:\n  d_model: 32\n  n_layers: 1\n  n_heads: 2\n  layer_kinds:\n    s: {pos: none, mask: scope}\n"
                            "  pattern: [s]\n";
  std::vector<std::string> dirs;
  for (int seed : {1, 2}) {
    const std::string sd = std::to_string(seed);
    write_evaluated_run(root, "scope-" + sd, model, {"run.seed=" + sd}, 1.0 + seed, 1.0);
    write_evaluated_run(root, "frozen-" + sd, model, {"run.seed=" + sd}, 1.5 + seed, 1.0);
    const train::Recipe as_evaluated = train::parse_recipe(
        model + "data: {seq_len: 32}\n", "t.yaml",
        {"run.seed=" + sd, "run.name=frozen-" + sd, "run.out_dir=" + root, "model.layer_kinds.s.freeze_scopes=true"});
    std::ofstream(root + "/frozen-" + sd + "/eval_recipe.yaml") << train::to_yaml(as_evaluated);
    dirs.push_back(root + "/scope-" + sd);
    dirs.push_back(root + "/frozen-" + sd);
  }
  const ReportResult r = small_report(root, dirs);
  std::ifstream rj(r.json_path);
  const nlohmann::json j = nlohmann::json::parse(rj);
  ASSERT_EQ(j["groups"].size(), 2u) << j["groups"].dump();
  std::string methods;
  for (const auto& g : j["groups"]) {
    EXPECT_EQ(g["seeds"], nlohmann::json({1, 2})) << g["name"];
    methods += g["name"].get<std::string>() + "\n";
  }
  EXPECT_NE(methods.find("scope(gamma=auto, frozen)"), std::string::npos) << methods;
  EXPECT_NE(methods.find("scope(gamma=auto)"), std::string::npos) << methods;
  for (const auto& run : j["runs"])
    EXPECT_EQ(run["method"].get<std::string>().find("frozen") != std::string::npos,
              run["name"].get<std::string>().rfind("frozen", 0) == 0)
        << run["name"] << ": " << run["method"];
}

// Two sweeps' runs of one directory name (p00-rope-1 in each) keep apart: named with their parent
// directory in the tables and report.json, and each with its own needle plot.
TEST(Report, RunsOfOneNameInTwoSweepsKeepApart) {
  const std::string root = tmp_root() + "/names";
  const std::string model = "model: {d_model: 32, n_layers: 1, n_heads: 2}\n";
  write_evaluated_run(root + "/sweep_a", "p00-rope-1", model, {}, 1.0, 0.5);
  write_evaluated_run(root + "/sweep_b", "p00-rope-1", model, {"train.steps=77"}, 2.0, 1.0);
  write_evaluated_run(root + "/sweep_b", "p01-other-1", model, {"train.steps=78"}, 3.0, 1.0);
  const ReportResult r = small_report(root, {root + "/sweep_a/p00-rope-1", root + "/sweep_b/p00-rope-1/",
                                             root + "/sweep_b/p01-other-1"});
  std::ifstream rj(r.json_path);
  const nlohmann::json j = nlohmann::json::parse(rj);
  ASSERT_EQ(j["runs"].size(), 3u);
  EXPECT_EQ(j["runs"][0]["name"], "sweep_a/p00-rope-1");
  EXPECT_EQ(j["runs"][1]["name"], "sweep_b/p00-rope-1");  // a trailing slash on the directory too
  EXPECT_EQ(j["runs"][2]["name"], "p01-other-1");         // a unique name stays as it was
  EXPECT_TRUE(j["effective_length"].contains("sweep_a/p00-rope-1"));
  EXPECT_TRUE(j["effective_length"].contains("sweep_b/p00-rope-1"));
  std::ifstream md(r.markdown_path);
  const std::string text((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("(needles_sweep_a-p00-rope-1.png)"), std::string::npos) << text;
  EXPECT_NE(text.find("(needles_sweep_b-p00-rope-1.png)"), std::string::npos) << text;
}

TEST(Report, SeedsOfOneMethodAreGroupedWithIntervals) {
  EXPECT_DOUBLE_EQ(mean_ci95({1.0, 1.2, 1.4}).first, 1.2);
  EXPECT_NEAR(mean_ci95({1.0, 1.2, 1.4}).second, 4.303 * 0.2 / std::sqrt(3.0), 1e-12);
  EXPECT_EQ(mean_ci95({2.5}).second, 0.0);
  const std::string root = tmp_root() + "/seeds";
  auto make_run = [&](const std::string& name, int64_t seed, int64_t d_model, double loss, double acc_long) {
    write_evaluated_run(root, name, "model: {d_model: " + std::to_string(d_model) + ", n_layers: 1, n_heads: 2}\n",
                        {"run.seed=" + std::to_string(seed)}, loss, acc_long);
  };
  make_run("rope-s1", 1, 32, 1.0, 0.5);
  make_run("rope-s2", 2, 32, 1.2, 1.0);
  // an interrupted seed resumed from its checkpoint (its recipe says so) is a seed all the same
  write_evaluated_run(root, "rope-s3", "model: {d_model: 32, n_layers: 1, n_heads: 2}\n",
                      {"run.seed=3", "checkpoint.resume=latest", "checkpoint.every=7"}, 1.4, 1.0);
  make_run("wide-s1", 1, 64, 0.9, 0.0);  // another method, one seed: no group
  const ReportResult r = small_report(root, {root + "/rope-s1", root + "/rope-s2", root + "/rope-s3", root + "/wide-s1"});
  std::ifstream rj(r.json_path);
  const nlohmann::json j = nlohmann::json::parse(rj);
  ASSERT_EQ(j["groups"].size(), 1u) << j["groups"].dump();
  const auto& g = j["groups"][0];
  EXPECT_EQ(g["seeds"], nlohmann::json({1, 2, 3}));
  const auto& l = g["lengths"][0];
  EXPECT_EQ(l["length"], 32);
  EXPECT_NEAR(l["loss_mean"].get<double>(), 1.2, 1e-12);
  EXPECT_NEAR(l["loss_ci95"].get<double>(), 4.303 * 0.2 / std::sqrt(3.0), 1e-9);
  EXPECT_NEAR(l["last256_mean"].get<double>(), 1.7, 1e-12);
  // needle accuracy at 64: seeds 0.5, 1, 1 -> mean 5/6 >= 0.85 x 1? no: 0.833 < 0.85, effective 32
  EXPECT_EQ(g["effective_length"]["passkey"], 32);
  EXPECT_EQ(g["effective_length"]["passkey_argmax"], 32);  // the passkey grid (passkey.csv) as a task
  // partial credit: the passkey grid at 64 finds no whole passkey but a fifth of the digits in every seed
  bool seen = false;
  for (const auto& c : g["needles"])
    if (c["task"] == "passkey_argmax" && c["length"] == 64) {
      seen = true;
      EXPECT_EQ(c["accuracy_mean"].get<double>(), 0.0);
      EXPECT_NEAR(c["score_mean"].get<double>(), 0.2, 1e-12);
      EXPECT_NEAR(c["score_ci95"].get<double>(), 0.0, 1e-12);
    }
  EXPECT_TRUE(seen) << g["needles"].dump();
  std::ifstream md(r.markdown_path);
  const std::string text((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("## Seeds: mean and 95% interval"), std::string::npos);
  EXPECT_NE(text.find("1.2000 +- 0.4969"), std::string::npos) << text;
  const size_t partial = text.find("Partial credit");
  ASSERT_NE(partial, std::string::npos) << text;
  EXPECT_NE(text.find("| passkey_argmax | 100% +- 0 |\n", partial), std::string::npos) << text;  // the lengths evaluated
}

// A run whose result files are not what Horizon writes (an empty or non-JSON eval.json, a string loss
// in metrics.jsonl, a non-number in needles.csv) made horizon report exit 3 (a JSON or stod exception).
// Each is now left out, named with its file and the reason (stderr, README.md, report.json's
// "left_out"), and the report goes on with the runs it can read; with none left it refuses.
TEST(Report, BrokenRunsAreLeftOutNamingTheFile) {
  const std::string root = tmp_root() + "/broken";
  const std::string model = "model: {d_model: 32, n_layers: 1, n_heads: 2}\n";
  for (const char* n : {"good", "empty_eval", "text_eval", "string_loss", "word_needles", "null_loss"})
    write_evaluated_run(root, n, model, {}, 1.0, 0.5);
  std::ofstream(root + "/empty_eval/eval.json", std::ios::trunc);
  std::ofstream(root + "/text_eval/eval.json", std::ios::trunc) << "this is not JSON\n";
  std::ofstream(root + "/string_loss/metrics.jsonl") << "{\"step\": 1, \"loss\": 4.5}\n{\"step\": 2, \"loss\": \"high\"}\n";
  std::ofstream(root + "/word_needles/needles.csv", std::ios::trunc)
      << "task,length,depth,samples,correct,accuracy,score\npasskey,32,0.5,4,4,most,1.0\n";
  std::ofstream(root + "/null_loss/eval.json", std::ios::trunc)
      << "{\"lengths\": [{\"length\": 32, \"loss\": null, \"last256_loss\": 1}]}\n";
  // a metrics line cut short when training stopped holds no point and is no error
  std::ofstream(root + "/good/metrics.jsonl") << "{\"step\": 1, \"loss\": 4.5}\n{\"step\": 2, \"lo";
  std::vector<std::string> dirs;
  for (const char* n : {"good", "empty_eval", "text_eval", "string_loss", "word_needles", "null_loss"})
    dirs.push_back(root + "/" + n);
  const ReportResult r = small_report(root, dirs);
  std::ifstream rj(r.json_path);
  const nlohmann::json j = nlohmann::json::parse(rj);
  ASSERT_EQ(j["runs"].size(), 1u);
  EXPECT_EQ(j["runs"][0]["name"], "good");
  EXPECT_EQ(j["runs"][0]["final_train_loss"], 4.5);
  ASSERT_EQ(j["left_out"].size(), 5u) << j["left_out"].dump();
  const std::vector<std::pair<std::string, std::string>> want = {
      {"/empty_eval/eval.json", "empty, not JSON"},
      {"/text_eval/eval.json", "not valid JSON"},
      {"/string_loss/metrics.jsonl:2", "\"loss\" is \"high\", not a finite number"},
      {"/word_needles/needles.csv:2", "accuracy is 'most', not a finite number"},
      {"/null_loss/eval.json (lengths[0])", "\"loss\" is null, not a finite number"}};
  std::ifstream md(r.markdown_path);
  const std::string text((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("Left out (5 of 6 runs"), std::string::npos) << text;
  for (size_t i = 0; i < want.size(); ++i) {
    const std::string reason = j["left_out"][i]["reason"];
    EXPECT_NE(reason.find(root + want[i].first), std::string::npos) << reason;
    EXPECT_NE(reason.find(want[i].second), std::string::npos) << reason;
    EXPECT_NE(text.find(reason), std::string::npos) << reason;
  }
  // the reader alone refuses with the same message
  try {
    (void)read_run_results(root + "/word_needles");
    FAIL() << "a word read as a number";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("needles.csv:2: accuracy"), std::string::npos) << e.what();
  }
  // nothing readable: refused, naming every run's reason
  try {
    (void)small_report(root, {root + "/empty_eval", root + "/text_eval"});
    FAIL() << "a report of no run";
  } catch (const ValueError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("no run could be read"), std::string::npos) << m;
    EXPECT_NE(m.find(root + "/text_eval/eval.json"), std::string::npos) << m;
  }
}

// The plot script ran through /bin/sh: an apostrophe in the output directory broke the command and
// a name holding '$(cmd)' ran cmd; and ./scripts/tools/report_plots.py of the working directory ran
// before the build's own copy. Now the copy installed with the binary runs, with an argument vector.
// A stand-in interpreter records the arguments it is given.
TEST(Report, PlotScriptIsTheInstalledOneRunWithoutAShell) {
  const std::string root = tmp_root() + "/plots_argv";
  write_evaluated_run(root, "run", "model: {d_model: 32, n_layers: 1, n_heads: 2}\n", {}, 1.0, 0.5);
  const std::string fake = root + "/fake_python";
  std::ofstream(fake) << "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$3/args.txt\"\n";
  fs::permissions(fake, fs::perms::owner_all);
  // a working directory holding a script of the same name, which must not run
  fs::create_directories(root + "/cwd/scripts/tools");
  std::ofstream(root + "/cwd/scripts/tools/report_plots.py") << "open('ran_from_cwd', 'w')\n";
  const fs::path before = fs::current_path();
  fs::current_path(root + "/cwd");
  ReportOptions o;
  o.out_dir = root + "/cwd/it's a'$(touch pwned)'report";
  o.python = fake;
  o.oa_T = 16, o.oa_heads = 4, o.oa_layers = 2;
  std::string error;
  try {
    (void)make_report({root + "/run"}, o);
  } catch (const std::exception& e) {
    error = e.what();
  }
  fs::current_path(before);
  EXPECT_EQ(error, "");
  EXPECT_FALSE(fs::exists(root + "/cwd/pwned")) << "a command in the directory's name ran";
  std::ifstream in(o.out_dir + "/args.txt");
  std::vector<std::string> args;
  for (std::string line; std::getline(in, line);) args.push_back(line);
  const std::string installed = fs::read_symlink("/proc/self/exe").parent_path().string() + "/report_plots.py";
  EXPECT_EQ(args, (std::vector<std::string>{installed, o.out_dir + "/report.json", o.out_dir}));
  EXPECT_TRUE(fs::exists(installed));
}

// Issue 58: horizon report reads retrieval_heads.csv (eval.retrieval_heads) and shows, per run and
// checkpoint step, the heads scoring >= 0.1 by layer kind and the best head; each head's score pools
// its copies over the needle tasks and lengths (copies = score x opportunities).
TEST(Report, RetrievalHeadsByStepAndLayerKind) {
  const std::string root = tmp_root() + "/retrieval";
  const std::string model = "model: {d_model: 32, n_layers: 2, n_heads: 2}\n";
  write_evaluated_run(root, "rh", model, {}, 1.0, 0.5);
  write_evaluated_run(root, "bad_kind", model, {}, 1.0, 0.5);
  const std::string header = "step,task,length,layer,layer_kind,head,window,score,needle_mass,opportunities\n";
  std::ofstream(root + "/rh/retrieval_heads.csv") << header
      // step 100: L0H0 pools (0.5 x 4 + 0) / 8 = 0.25, L1H0 (0.05 x 4 + 0.25 x 4) / 8 = 0.15, L0H1 0
      << "100,passkey,32,0,global,0,0,0.5,0.4,4\n100,passkey,32,0,global,1,0,0,0.1,4\n100,passkey,32,1,windowed,0,8,0.05,0.2,4\n"
      << "100,niah_single_2,64,0,global,0,0,0,0.3,4\n100,niah_single_2,64,0,global,1,0,0,0.1,4\n"
      << "100,niah_single_2,64,1,windowed,0,8,0.25,0.2,4\n"
      // step 200: L1H0 0.75 on both (the best); L0H0 (0.125 x 8 + 0) / 16 = 0.0625 < 0.1
      << "200,passkey,32,0,global,0,0,0.125,0.4,8\n200,passkey,32,0,global,1,0,0,0.1,8\n200,passkey,32,1,windowed,0,8,0.75,0.6,8\n"
      << "200,niah_single_2,64,0,global,0,0,0,0.3,8\n200,niah_single_2,64,0,global,1,0,0,0.1,8\n"
      << "200,niah_single_2,64,1,windowed,0,8,0.75,0.6,8\n";
  std::ofstream(root + "/bad_kind/retrieval_heads.csv") << header << "100,passkey,32,0,sideways,0,0,0.5,0.4,4\n";
  const ReportResult r = small_report(root, {root + "/rh", root + "/bad_kind"});
  std::ifstream md(r.markdown_path);
  const std::string text((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("## Retrieval heads"), std::string::npos) << text;
  EXPECT_NE(text.find("| rh | 100 | 1 | 1 | 0 | 0.0 (global) | 0.250 |"), std::string::npos) << text;
  EXPECT_NE(text.find("| rh | 200 | 0 | 1 | 0 | 1.0 (windowed) | 0.750 |"), std::string::npos) << text;
  std::ifstream rj(r.json_path);
  const nlohmann::json j = nlohmann::json::parse(rj);
  ASSERT_EQ(j["runs"].size(), 1u);
  ASSERT_EQ(j["runs"][0]["retrieval_heads"].size(), 12u);
  ASSERT_EQ(j["runs"][0]["retrieval_by_step"].size(), 2u);
  EXPECT_EQ(j["runs"][0]["retrieval_by_step"][1]["step"], 200);
  EXPECT_EQ(j["runs"][0]["retrieval_by_step"][1]["windowed"], 1);
  ASSERT_EQ(j["left_out"].size(), 1u);
  const std::string reason = j["left_out"][0]["reason"];
  EXPECT_NE(reason.find("bad_kind/retrieval_heads.csv:2: layer_kind is 'sideways'"), std::string::npos) << reason;
}
