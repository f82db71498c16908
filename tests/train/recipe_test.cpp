// Recipes: strict keys and types with file/line/key-path messages, impossible configs refused,
// override precedence, resolved-recipe round trip, every shipped recipe valid.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "study/sweep.h"
#include "train/recipe.h"

using namespace hz;
using namespace hz::train;

namespace {
std::string error_of(const std::string& yaml, const std::vector<std::string>& ov = {}) {
  try {
    parse_recipe(yaml, "test.yaml", ov);
  } catch (const RecipeError& e) {
    return e.what();
  }
  return "";
}
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST(Recipe, UnknownKeyNamesFileLineAndPath) {
  const std::string e = error_of("run:\n  name: x\nmodel:\n  d_model: 64\n  d_modle: 5\n");
  EXPECT_TRUE(has(e, "test.yaml:5")) << e;
  EXPECT_TRUE(has(e, "unknown key 'model.d_modle'")) << e;
  EXPECT_TRUE(has(e, "d_model")) << e;  // lists the known keys of that section
  EXPECT_TRUE(has(error_of("trian:\n  steps: 3\n"), "test.yaml:1: unknown key 'trian'"));
  EXPECT_TRUE(has(error_of("model:\n  layer_kinds:\n    a: {pos: rope, windw: 3}\n  pattern: [a]\n"),
                  "unknown key 'model.layer_kinds.a.windw'"));
}

TEST(Recipe, WrongTypesNameLineAndExpectation) {
  std::string e = error_of("train:\n  steps: many\n");
  EXPECT_TRUE(has(e, "test.yaml:2")) << e;
  EXPECT_TRUE(has(e, "train.steps")) << e;
  EXPECT_TRUE(has(e, "expected an integer, got 'many'")) << e;
  e = error_of("eval:\n  lengths: 256\n");
  EXPECT_TRUE(has(e, "eval.lengths: expected a list")) << e;
  e = error_of("model:\n  layer_kinds:\n    a: {mask: sliding}\n  pattern: [a]\n");
  EXPECT_TRUE(has(e, "test.yaml:3")) << e;
  EXPECT_TRUE(has(e, "model.layer_kinds.a.mask")) << e;
  EXPECT_TRUE(has(e, "causal window scope")) << e;
  EXPECT_TRUE(has(error_of("run: [1, 2]\nx: {\n"), "YAML syntax error"));
}

TEST(Recipe, ImpossibleConfigsAreRefusedBeforeTraining) {
  EXPECT_TRUE(has(error_of("model:\n  layer_kinds:\n    w: {mask: window, window: 512}\n  pattern: [w]\ndata: {seq_len: 256}\n"),
                  "exceeds the context"));
  EXPECT_TRUE(has(error_of("model: {n_heads: 4, n_kv_heads: 3}\n"), "divisible"));
  EXPECT_TRUE(has(error_of("model: {d_model: 100, n_heads: 3}\n"), "not divisible by n_heads"));
  EXPECT_TRUE(has(error_of("model: {pattern: [nothing]}\n"), "'nothing' is not defined"));
  EXPECT_TRUE(has(error_of("train: {steps: 10}\nschedule: {warmup_steps: 20}\n"), "warmup_steps"));
  EXPECT_TRUE(has(error_of("data: {source: web}\n"), "unknown data.source 'web'; expected one of: bible files"));
  EXPECT_TRUE(has(error_of("drope: {at_step: 500}\ntrain: {steps: 100}\nschedule: {warmup_steps: 0}\n"), "drope.at_step"));
}

TEST(Recipe, OverridePrecedenceAndErrors) {
  const std::string y = "train: {steps: 50}\nschedule: {warmup_steps: 5}\n";
  EXPECT_EQ(parse_recipe(y, "t.yaml").train.steps, 50);                          // file > default
  EXPECT_EQ(parse_recipe("", "t.yaml").train.steps, Recipe{}.train.steps);       // default
  const Recipe r = parse_recipe(y, "t.yaml", {"train.steps=70", "eval.lengths=[64, 128]", "model.layer_kinds.default.window=8"});
  EXPECT_EQ(r.train.steps, 70);                                                   // command line > file
  EXPECT_EQ(r.eval.opts.lengths, (std::vector<int64_t>{64, 128}));
  EXPECT_EQ(r.model.cfg.kinds[0].attn.mask.window, 8);
  EXPECT_TRUE(has(error_of(y, {"train.stpes=3"}), "unknown key 'train.stpes'"));
  EXPECT_TRUE(has(error_of(y, {"train.steps=abc"}), "command-line override"));
  EXPECT_TRUE(has(error_of(y, {"nonsense"}), "key.path=value"));
}

TEST(Recipe, ResolvedRecipeRoundTrips) {
  const Recipe a = parse_recipe(
      "model:\n  layer_kinds:\n    g: {pos: none}\n    s: {mask: window, window: 16, rope_base: 500000}\n  pattern: [g, s]\n"
      "  overrides: {1: g}\neval: {fit_drope_c: [0.1, 0.2]}\n",
      "a.yaml");
  const std::string y = to_yaml(a);
  const Recipe b = parse_recipe(y, "resolved.yaml");
  EXPECT_EQ(to_yaml(b), y);
  EXPECT_EQ(b.model.cfg.kinds.size(), 2u);
  EXPECT_EQ(b.model.cfg.kinds[1].attn.mask.window, 16);
  EXPECT_EQ(b.model.cfg.overrides.at(1), "g");
  EXPECT_EQ(b.eval.opts.fit_drope_c, (std::vector<double>{0.1, 0.2}));
  EXPECT_TRUE(has(recipe_schema(), "model.layer_kinds.<kind>.scope_gamma"));
}

TEST(Recipe, EveryShippedRecipeIsValid) {
  int n = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(std::string(HZ_SOURCE_DIR) + "/recipes")) {
    if (e.path().extension() != ".yaml") continue;
    const std::string p = e.path().string();
    if (p.size() > 11 && p.substr(p.size() - 11) == ".sweep.yaml") {  // sweep grids: every point must be valid
      EXPECT_NO_THROW(hz::study::load_sweep(p)) << p;
      continue;
    }
    EXPECT_NO_THROW(load_recipe(p)) << p;
    ++n;
  }
  EXPECT_GE(n, 10);
}

TEST(Recipe, DocumentedFieldsMatchTheCode) {
  // recipes/README.md embeds `horizon train --schema`; regenerate it when a field changes.
  std::ifstream f(std::string(HZ_SOURCE_DIR) + "/recipes/README.md");
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_NE(ss.str().find(recipe_schema()), std::string::npos)
      << "recipes/README.md is out of date: rerun build/horizon train --schema into it";
}

TEST(Recipe, CorpusSourcesAndTheirFields) {
  EXPECT_TRUE(has(error_of("data:\n  source: parquet\n"), "bible files jsonl tokens passkey kv"));
  EXPECT_TRUE(has(error_of("data:\n  source: jsonl\n"), "data.files lists no glob"));
  EXPECT_TRUE(has(error_of("data:\n  source: files\n  files: [corpus/*.jsonl]\n"), "set data.source: jsonl"));
  EXPECT_TRUE(has(error_of("data:\n  source: files\n  files: [fineweb_train_000001.bin]\n"), "set data.source: tokens"));
  EXPECT_TRUE(has(error_of("data:\n  val_files: [v.txt]\n"), "data.val_files is only read for"));
  EXPECT_TRUE(has(error_of("data:\n  source: tokens\n  files: [a.bin]\n  token_format: npy\n"), "auto llmc nanogpt"));
  EXPECT_TRUE(has(error_of("data:\n  source: jsonl\n  files: [a.jsonl]\n  text_field: ''\n"), "data.text_field"));
  const Recipe r = parse_recipe(
      "data:\n  source: jsonl\n  files: [a.jsonl]\n  val_files: [b.jsonl]\n  text_field: body\n"
      "  tokenizer: t/tokenizer.json\n",
      "test.yaml");
  EXPECT_EQ(r.data.val_files, std::vector<std::string>{"b.jsonl"});
  EXPECT_EQ(r.data.text_field, "body");
  EXPECT_EQ(r.data.token_format, "auto");
  const Recipe back = parse_recipe(to_yaml(r), "resolved.yaml");
  EXPECT_EQ(back.data.tokenizer, "t/tokenizer.json");
  EXPECT_EQ(back.data.val_files, r.data.val_files);
}
