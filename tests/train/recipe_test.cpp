// Recipes: strict keys and types with file/line/key-path messages, impossible configs refused,
// override precedence, resolved-recipe round trip, every shipped recipe valid.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
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
  // a kind name becomes a path component: a dot in it is refused, not followed (the fuzzer's crash)
  e = error_of("model:\n  layer_kinds:\n    global_.ope: {pos: none}\n  pattern: [global_.ope]\n");
  EXPECT_TRUE(has(e, "test.yaml:3")) << e;
  EXPECT_TRUE(has(e, "kind name 'global_.ope'")) << e;
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

// issue 19: a section of the wrong type, duplicate keys and out-of-range numbers are refused
// with file:line and the key, never ignored.
TEST(Recipe, FactorListsComeFromJsonFiles) {
  // a numeric list field may name a JSON file: a bare list, or for LongRoPE's fields its release's
  // {long_factor, short_factor} or a config.json's rope_scaling; relative names from the recipe's directory
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "hz_recipe_factors";
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  };
  write("clip.json", "[1, 1, 0.5, 0]");
  write("lr.json", R"({"long_factor": [1, 2, 3, 4], "short_factor": [1, 1, 1.5, 2]})");
  write("phi3.json", R"({"hidden_size": 32, "rope_scaling": {"type": "longrope", "long_factor": [1, 3, 5, 7],
                       "short_factor": [1, 1, 1, 1]}})");
  const std::string y =
      "model:\n  d_model: 32\n  n_heads: 4\n  layer_kinds:\n"
      "    c: {pos: rope, rope_freq_factors: clip.json}\n"
      "    l: {pos: rope, rope_scaling: longrope, longrope_long_factors: lr.json, longrope_short_factors: lr.json}\n"
      "    p: {pos: rope, rope_scaling: longrope, longrope_long_factors: phi3.json}\n"
      "  pattern: [c, l, p]\ndata: {seq_len: 32}\n";
  const Recipe r = load_recipe(write("r.yaml", y));
  const auto& cfg = r.model.cfg;
  EXPECT_EQ(cfg.kind("c").attn.pos.rope_freq_factors, (std::vector<double>{1, 1, 0.5, 0}));
  EXPECT_EQ(cfg.kind("l").attn.pos.longrope_long_factors, (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(cfg.kind("l").attn.pos.longrope_short_factors, (std::vector<double>{1, 1, 1.5, 2}));
  EXPECT_EQ(cfg.kind("p").attn.pos.longrope_long_factors, (std::vector<double>{1, 3, 5, 7}));
  // the resolved recipe holds the values, not the file names
  EXPECT_FALSE(has(to_yaml(r), "lr.json"));
  // parse_recipe reads nothing: the files are named (with where to look beside the recipe) and read
  // a step above; parsing the same text without them refuses the field by line
  const std::vector<NamedFile> named = named_files(y, (dir / "r.yaml").string());
  ASSERT_EQ(named.size(), 4u);
  EXPECT_EQ(named[0].name, "clip.json");
  EXPECT_EQ(named[0].beside_recipe, (dir / "clip.json").string());
  EXPECT_TRUE(has(named[0].field, "rope_freq_factors")) << named[0].field;
  try {
    parse_recipe(y, (dir / "r.yaml").string());
    ADD_FAILURE() << "a recipe naming a factor file parsed without it";
  } catch (const RecipeError& e) {
    EXPECT_TRUE(has(e.what(), "r.yaml:5") && has(e.what(), "'clip.json', which was not read")) << e.what();
  }
  // on the command line a name is the working directory's, never the recipe's
  const std::vector<NamedFile> cl = named_files(y, (dir / "r.yaml").string(), {"model.layer_kinds.c.rope_freq_factors=x.json"});
  ASSERT_EQ(cl.size(), 4u);
  EXPECT_EQ(cl[0].name, "x.json");
  EXPECT_EQ(cl[0].beside_recipe, "");
  // bad files: named, with the recipe's line
  write("bad.json", "[1, \"x\"]");
  write("nojson.json", "{");
  write("nokey.json", R"({"short_factor": [1]})");
  auto err = [&](const std::string& field) {
    try {
      load_recipe(write("e.yaml", "model:\n  layer_kinds:\n    k: {pos: rope, " + field + "}\n  pattern: [k]\n"));
    } catch (const RecipeError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  std::string e = err("rope_freq_factors: bad.json");
  EXPECT_TRUE(has(e, "e.yaml:3") && has(e, "bad.json") && has(e, "not a number")) << e;
  e = err("rope_freq_factors: nojson.json");
  EXPECT_TRUE(has(e, "is not JSON")) << e;
  e = err("rope_freq_factors: missing.json");
  EXPECT_TRUE(has(e, "cannot read the JSON file")) << e;
  e = err("rope_scaling: longrope, longrope_long_factors: nokey.json");
  EXPECT_TRUE(has(e, "has no 'long_factor'")) << e;
  e = err("rope_freq_factors: lr.json");  // an object is LongRoPE's format, not a plain list
  EXPECT_TRUE(has(e, "must be a list of numbers")) << e;
  std::filesystem::remove_all(dir);
}

TEST(Recipe, DrawnPositionsNeedALayerThatReadsThem) {
  const std::string rope = "model:\n  layer_kinds:\n    k: {pos: rope}\n    a: {pos: ALIBI}\n  pattern: [k, a]\n"
                           "data: {seq_len: 64}\ntrain: {positions: pose, position_max: MAX}\n";
  auto y = [&](const std::string& a, const std::string& max) {
    std::string s = rope;
    s.replace(s.find("ALIBI"), 5, a);
    s.replace(s.find("MAX"), 3, max);
    return s;
  };
  EXPECT_EQ(error_of(y("rope", "256")), "");
  EXPECT_EQ(error_of(y("alibi", "256")), "");  // ALiBi's distances read the drawn positions
  // so do the logit terms, with no rotation in the model
  for (const char* logit : {"logit=swan_row", "logit=scale_invariant", "qtemp_alpha=0.1"})
    EXPECT_EQ(error_of(y("rope", "256"), {"model.layer_kinds.k.pos=none", "model.layer_kinds.a.pos=none",
                                          std::string("model.layer_kinds.a.") + logit}),
              "")
        << logit;
  std::string e = error_of(y("rope", "64"));
  EXPECT_TRUE(has(e, "set train.position_max above it")) << e;
  e = error_of(y("rope", "256"), {"data.documents=masked"});
  EXPECT_TRUE(has(e, "needs data.documents: stream")) << e;
  e = error_of(y("rope", "256"), {"model.layer_kinds.k.pos=none", "model.layer_kinds.a.pos=none"});
  EXPECT_TRUE(has(e, "no layer reads positions")) << e;
  // SSMax counts visible keys, not positions
  e = error_of(y("rope", "256"), {"model.layer_kinds.k.pos=none", "model.layer_kinds.a.pos=none",
                                  "model.layer_kinds.a.logit=ssmax"});
  EXPECT_TRUE(has(e, "no layer reads positions")) << e;
}

// Settings that trained silently and did not do what they say: a prefix-LM prefix of at least
// data.seq_len (one target per sequence, or none) and train.position_max with index positions (read
// by drawn positions only). Refused with the file, the line and the key, as other recipe errors are.
TEST(Recipe, PrefixAsLongAsTheSequenceAndPositionMaxWithIndexAreRefusedWithTheirLine) {
  const std::string prefix = "data: {seq_len: 64}\nmodel:\n  layer_kinds:\n    p: {pos: rope, prefix: P}\n  pattern: [p]\n";
  auto with = [&](const std::string& p) {
    std::string s = prefix;
    s.replace(s.find("P}"), 1, p);
    return s;
  };
  EXPECT_EQ(error_of(with("63")), "");  // two targets per sequence: allowed
  std::string e = error_of(with("64"));
  EXPECT_TRUE(has(e, "test.yaml:4: model.layer_kinds.p.prefix: 64 is at least data.seq_len = 64")) << e;
  EXPECT_TRUE(has(e, "one target")) << e;
  e = error_of(with("100"));
  EXPECT_TRUE(has(e, "test.yaml:4: model.layer_kinds.p.prefix: 100")) << e;
  EXPECT_TRUE(has(e, "no target")) << e;
  e = error_of(with("16"), {"data.seq_len=16"});  // the sequence shortened on the command line
  EXPECT_TRUE(has(e, "model.layer_kinds.p.prefix: 16 is at least data.seq_len = 16")) << e;
  e = error_of("data: {seq_len: 64}\ntrain:\n  steps: 10\n  position_max: 256\nschedule: {warmup_steps: 0}\n");
  EXPECT_TRUE(has(e, "test.yaml:4: train.position_max: 256 is read by drawn positions only")) << e;
  e = error_of("data: {seq_len: 64}\n", {"train.position_max=256"});
  EXPECT_TRUE(has(e, "test.yaml (command-line override train.position_max): train.position_max: 256")) << e;
  EXPECT_EQ(error_of("data: {seq_len: 64}\n", {"train.position_max=0"}), "");
  // a run that trained with them before is still loaded (evaluated, reported, resumed from)
  const Recipe trained = parse_trained_recipe(with("64") + "train: {position_max: 256}\n", "config.yaml");
  EXPECT_EQ(trained.train.positions.max, 256);
  EXPECT_EQ(trained.model.cfg.kinds[0].attn.mask.prefix, 64);
}

TEST(Recipe, SectionOfTheWrongTypeIsRefused) {
  std::string e = error_of("run: {name: x}\ntrain: -5\n");
  EXPECT_TRUE(has(e, "test.yaml:2")) << e;
  EXPECT_TRUE(has(e, "train: expected a section")) << e;
  e = error_of("optim: [1, 2]\n");
  EXPECT_TRUE(has(e, "test.yaml:1")) << e;
  EXPECT_TRUE(has(e, "optim: expected a section (a map of fields), got a list")) << e;
  e = error_of("model:\n  layer_kinds: 3\n");
  EXPECT_TRUE(has(e, "model.layer_kinds")) << e;
  EXPECT_EQ(error_of("train:\n"), "");  // an empty section is no section: defaults
}

TEST(Recipe, DuplicateKeysAreRefusedWithBothLines) {
  std::string e = error_of("train:\n  steps: 50\n  log_every: 5\n  steps: 70\n");
  EXPECT_TRUE(has(e, "test.yaml:4: duplicate key 'train.steps' (first at test.yaml:2)")) << e;
  e = error_of("train: {steps: 50}\nrun: {name: a}\ntrain: {steps: 60}\n");
  EXPECT_TRUE(has(e, "test.yaml:3: duplicate key 'train' (first at test.yaml:1)")) << e;
  e = error_of("model:\n  layer_kinds:\n    a: {pos: rope, pos: none}\n  pattern: [a]\n");
  EXPECT_TRUE(has(e, "duplicate key 'model.layer_kinds.a.pos'")) << e;
}

TEST(Recipe, NumbersOutsideTheirRangeAreRefused) {
  struct Case { const char* yaml; const char* key; const char* range; };
  for (const Case& c : {Case{"eval:\n  batches: -1\n", "eval.batches", ">= 1"},
                        Case{"checkpoint:\n  every: -10\n", "checkpoint.every", ">= 0"},
                        Case{"train:\n  log_every: -1\n", "train.log_every", ">= 1"},
                        Case{"train:\n  log_every: 0\n", "train.log_every", ">= 1"},
                        Case{"optim:\n  beta2: 1.5\n", "optim.beta2", "in [0, 1)"},
                        Case{"model:\n  norm_eps: -1e308\n", "model.norm_eps", "> 0"},
                        Case{"model:\n  norm_eps: .nan\n", "model.norm_eps", "> 0"},
                        // issue 36: infinities passed "> 0"; integers beyond what the code takes overflowed later
                        Case{"optim:\n  eps: .inf\n", "optim.eps", "> 0"},
                        Case{"train:\n  bucket_mb: 8796093022208\n", "train.bucket_mb", "in [1, 1048576]"},
                        Case{"run:\n  threads: 100000\n", "run.threads", "in [0, 4096]"},
                        Case{"train:\n  loss_chunk: 9223372036854775807\n", "train.loss_chunk", "at most 2^40"},
                        Case{"eval:\n  lengths: [9223372036854775807]\n", "eval.lengths[0]", "in [2, 16777216]"}}) {
    const std::string e = error_of(c.yaml);
    EXPECT_TRUE(has(e, "test.yaml:2")) << c.yaml << " -> " << e;
    EXPECT_TRUE(has(e, std::string(c.key) + ": must be " + c.range)) << c.yaml << " -> " << e;
  }
  std::string e = error_of("eval:\n  lengths: [64, 1]\n");
  EXPECT_TRUE(has(e, "eval.lengths[1]: must be in [2, 16777216]")) << e;
  // issue 36: a second document was ignored whole
  e = error_of("train:\n  steps: 5\n---\ntrain:\n  steps: 6\n");
  EXPECT_TRUE(has(e, "test.yaml:4: a second YAML document")) << e;
  e = error_of("train:\n  steps: 5\n...\njunk: [\n");
  EXPECT_TRUE(has(e, "test.yaml:")) << e;
  EXPECT_TRUE(has(e, "YAML syntax error") || has(e, "a second YAML document")) << e;
  e = error_of("train:\n  steps: 5\n...\nrun: {seed: 3}\n");
  EXPECT_TRUE(has(e, "a second YAML document")) << e;
  e = error_of("--- # a document marker first is one document\ntrain:\n  steps: 50\n...\n");
  EXPECT_EQ(e, "");
  // a plain scalar starting with ',' made yaml-cpp 0.7's LoadAll allocate until the memory ran out
  e = error_of(",un: 3\n  name: x\n");
  EXPECT_TRUE(has(e, "test.yaml:1: YAML syntax error: the text does not read as a YAML document")) << e;
  EXPECT_EQ(error_of("# only a comment\n\n"), "");  // an empty recipe: the defaults
  e = error_of("", {"eval.batches=-3"});
  EXPECT_TRUE(has(e, "command-line override eval.batches")) << e;
  // the schema shows each range and role
  const std::string s = recipe_schema();
  EXPECT_TRUE(has(s, "train.log_every (int, default 10, >= 1; run)")) << s;
  EXPECT_TRUE(has(s, "model.n_heads (int, default")) << s;
  EXPECT_TRUE(has(s, "data.val_fraction (number, default 0.05, in [0, 1); run)")) << s;
  EXPECT_TRUE(has(s, "model.layer_kinds.<kind>.rope_scaling (name, default none; inference-time)")) << s;
  EXPECT_TRUE(has(s, "model.layer_kinds.<kind>.pos (name, default rope; architecture)")) << s;
  EXPECT_TRUE(has(s, "eval.rope_scaling (name, default ''; inference-time)")) << s;
}

TEST(Recipe, ArchitectureChangesAreNamedAndRefused) {
  const std::string y = "model:\n  d_model: 64\n  n_heads: 4\n  layer_kinds:\n    r: {pos: rope}\n  pattern: [r]\n";
  const Recipe trained = parse_recipe(y, "ck.h5:recipe");
  auto refusal = [&](const std::vector<std::string>& ov) {
    try {
      check_architecture(trained, parse_recipe(y, "ck.h5:recipe", ov), "ck.h5");
    } catch (const RecipeError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::string e = refusal({"model.n_heads=8"});
  EXPECT_TRUE(has(e, "ck.h5")) << e;
  EXPECT_TRUE(has(e, "model.n_heads: 4 -> 8")) << e;
  EXPECT_TRUE(has(e, "recipes/drope_recalibrate.yaml")) << e;
  EXPECT_TRUE(has(e, "recipes/swan_continue.yaml")) << e;
  e = refusal({"model.layer_kinds.r.pos=none"});
  EXPECT_TRUE(has(e, "model.layer_kinds.r.pos: rope -> none")) << e;
  e = refusal({"swan.window=16"});
  EXPECT_TRUE(has(e, "swan.window: 512 -> 16")) << e;
  EXPECT_TRUE(has(refusal({"drope.at_step=5"}), "drope.at_step: -1 -> 5"));
  // inference-time options and run fields stay free
  for (const std::vector<std::string>& ok :
       {std::vector<std::string>{"model.layer_kinds.r.rope_scaling=yarn", "model.layer_kinds.r.rope_factor=4"},
        {"model.layer_kinds.r.freeze_scopes=true"}, {"eval.rope_scaling=ntk", "eval.lampe=true"},
        {"eval.drope_c=0.4", "eval.swan_a=362"}, {"run.device=cpu", "train.steps=500", "eval.lengths=[64]"}})
    EXPECT_EQ(refusal(ok), "") << ok[0];
  EXPECT_TRUE(architecture_changes(trained, trained).empty());
}

// The route every shipped recipe's layer kinds take on a GPU in bf16 (attention/backend.h): cuDNN's
// fused attention for the kinds it expresses, Horizon's kernels for the rest, named by the
// ingredient. A change to this table is a change to what runs where: review it, then update it
// (HZ_PRINT_ROUTES=1 prints the table as it is now).
TEST(Recipe, AttentionRoutesOfEveryShippedRecipe) {
  const std::map<std::string, std::string> want = {
#include "tests/train/attention_routes.inc"
  };
  std::map<std::string, std::string> got;
  for (const auto& e : std::filesystem::recursive_directory_iterator(std::string(HZ_SOURCE_DIR) + "/recipes")) {
    const std::string p = e.path().string();
    if (e.path().extension() != ".yaml" || p.find(".sweep.yaml") != std::string::npos) continue;
    const std::string name = std::filesystem::relative(e.path(), std::string(HZ_SOURCE_DIR) + "/recipes").string();
    const Recipe r = load_recipe(p, {"run.precision=bf16"});
    for (const auto& [kind, route] : r.attention_routes()) got[name + " " + kind] = route.describe();
    // in f32 every kind runs Horizon's kernels: cuDNN's fused attention takes bf16
    for (const auto& [kind, route] : load_recipe(p, {"run.precision=fp32"}).attention_routes())
      EXPECT_EQ(route.backend, hz::attn::AttnBackend::Horizon) << name << " " << kind;
  }
  if (std::getenv("HZ_PRINT_ROUTES"))
    for (const auto& [k, v] : got) std::printf("    {\"%s\", \"%s\"},\n", k.c_str(), v.c_str());
  EXPECT_EQ(got, want);
  EXPECT_GE(got.size(), 40u);
}

TEST(Recipe, ForcedCudnnRefusesWhatItCannotExpressByName) {
  const std::string scope =
      "run: {device: cuda, precision: bf16, attention_backend: cudnn}\n"
      "model:\n  layer_kinds:\n    s: {pos: none, mask: scope}\n  pattern: [s]\n";
  EXPECT_TRUE(has(error_of(scope), "layer kind 's'"));
  EXPECT_TRUE(has(error_of(scope), "SCOPE per-head scopes"));
  EXPECT_TRUE(has(error_of("run: {device: cuda, attention_backend: cudnn}\n"), "f32 activations"));
  EXPECT_TRUE(has(error_of("run: {precision: bf16, attention_backend: cudnn}\n"), "run.device=cuda only"));
  EXPECT_TRUE(has(error_of("run: {attention_backend: flash}\n"), "auto, horizon or cudnn"));
  const Recipe ok = parse_recipe("run: {device: cuda, precision: bf16, attention_backend: cudnn}\n", "ok.yaml");
  EXPECT_EQ(ok.attention_routes().front().second.describe(), "cudnn (causal)");
}
