// LongRoPE's factor search (study/longrope_search.h) on a small trained RoPE run: the factors keep
// LongRoPE's constraints, the best candidate survives every generation, the search repeats per
// seed, the reported loss is what evaluating the factors on the same batches gives, those batches
// lie after the ones horizon eval scores, and the written file is what eval.longrope_long_factors
// reads.
#include <gtest/gtest.h>

#include "tests/core/test_util.h"
#include "tests/train/train_test_util.h"

#include <filesystem>
#include <fstream>

#include "core/file.h"
#include "data/loader.h"
#include "data/shard.h"
#include "eval/eval.h"
#include "study/load_run.h"
#include "study/longrope_search.h"
#include "train/data.h"
#include "train/trainer.h"

using namespace hz;

namespace {

struct Trained {
  std::string root, run;
  train::Recipe recipe;
};

const Trained& trained() {
  static const Trained t = [] {
    Trained x;
    x.root = test::make_tmp_dir("hz_longrope_search_test");
    x.recipe = train::parse_recipe(
        "run: {name: rope, out_dir: " + x.root + "}\nmodel:\n  d_model: 32\n  n_layers: 1\n  n_heads: 2\n"
        "data: {seq_len: 32, batch_size: 4, cache_dir: " + x.root + "/data}\ntrain: {steps: 30, log_every: 10}\n"
        "optim: {lr: 1.0e-2}\nschedule: {warmup_steps: 2}\neval: {every: 0, batches: 1, batch_size: 2, lengths: [32]}\n",
        "rope.yaml");
    train::TrainOptions opt;
    opt.quiet = true;
    train::train(x.recipe, opt);
    x.run = x.root + "/rope";
    return x;
  }();
  return t;
}

study::LongRopeSearchOptions small() {
  study::LongRopeSearchOptions o;
  o.length = 64;
  o.population = 6;
  o.generations = 3;
  o.parents = 2;
  o.seed = 5;
  return o;
}

}  // namespace

TEST(LongRopeSearch, KeepsTheConstraintsAndTheBestAndRepeats) {
  const Trained& t = trained();
  study::LoadedRun run = study::load_run(t.run, {});
  const auto val = data::Shard::open(train::prepare_data(run.recipe, false).second);
  const eval::EvalOptions eo = run.recipe.eval_options();
  const study::LongRopeSearchOptions o = small();
  const study::LongRopeSearchResult r = study::longrope_search(*run.model, *val, eo, o);
  const int64_t half = run.model->cfg.hdim() / 2;
  ASSERT_EQ(static_cast<int64_t>(r.best.factors.size()), half);
  for (int64_t m = 0; m < half; ++m) {
    EXPECT_GE(r.best.factors[m], 1.0) << m;
    EXPECT_LE(r.best.factors[m], 1.25 * 2.0) << m;
    if (m > 0) {
      EXPECT_GE(r.best.factors[m], r.best.factors[m - 1]) << "not monotone at pair " << m;
    }
  }
  ASSERT_EQ(r.best_per_generation.size(), 3u);
  for (size_t g = 1; g < r.best_per_generation.size(); ++g)
    EXPECT_LE(r.best_per_generation[g], r.best_per_generation[g - 1]) << "the best was lost in generation " << g;
  EXPECT_EQ(r.best.loss, r.best_per_generation.back());
  EXPECT_EQ(r.evaluated, 6 + 2 * (6 - 2));
  EXPECT_TRUE(std::isfinite(r.loss_none) && std::isfinite(r.loss_pi) && std::isfinite(r.loss_yarn));

  // the same seed repeats the search; another seed explores other candidates
  const study::LongRopeSearchResult again = study::longrope_search(*run.model, *val, eo, o);
  EXPECT_EQ(again.best.factors, r.best.factors);
  EXPECT_EQ(again.best.loss, r.best.loss);

  // the reported loss is the evaluation of the factors on the batches after horizon eval's
  eval::EvalOptions check = eo;
  check.lengths = {64};
  check.skip_batches = eo.batches;
  check.inference.rope_scaling = attn::RopeScaling::LongRoPE;
  check.inference.longrope_long_factors = r.best.factors;
  EXPECT_EQ(eval::evaluate(*run.model, *val, check, false).lengths.at(0).loss, r.best.loss);
  check.skip_batches = 0;  // horizon eval's batch is another text
  const double other_text = eval::evaluate(*run.model, *val, check, false).lengths.at(0).loss;
  EXPECT_TRUE(hzt::differs(other_text, r.best.loss, hzt::kLossDiffers));
  const auto after = data::eval_batches(*val, 64, 2, 1, 257, 1), both = data::eval_batches(*val, 64, 2, 2);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].tokens.to_vector(), both[1].tokens.to_vector());

  // the file is LongRoPE's, and eval.longrope_long_factors reads its long factors
  const std::string file = t.root + "/longrope_64.json";
  write_file_atomic(file, study::longrope_json(r, o));
  const std::string text = to_yaml(run.recipe);
  const std::vector<std::string> ov{"eval.rope_scaling=longrope", "eval.longrope_long_factors=" + file};
  const train::RecipeFiles files = train::read_recipe_files(text, "config.yaml", ov);  // as load_run reads them
  const train::Recipe withf = train::parse_recipe(text, "config.yaml", ov, nullptr, &files);
  EXPECT_EQ(withf.eval.opts.inference.longrope_long_factors, r.best.factors);
}

TEST(LongRopeSearch, RefusesWhatItCannotSearch) {
  const Trained& t = trained();
  study::LoadedRun run = study::load_run(t.run, {});
  const auto val = data::Shard::open(train::prepare_data(run.recipe, false).second);
  const eval::EvalOptions eo = run.recipe.eval_options();
  study::LongRopeSearchOptions o = small();
  o.length = 32;  // not beyond the training length
  EXPECT_THROW(study::longrope_search(*run.model, *val, eo, o), ValueError);
  o = small();
  o.parents = o.population;
  EXPECT_THROW(study::longrope_search(*run.model, *val, eo, o), ValueError);
  o = small();
  for (auto& b : run.model->layers) b->attn->spec.pos.kind = attn::PosKind::None;  // a NoPE model
  EXPECT_THROW(study::longrope_search(*run.model, *val, eo, o), ValueError);
}
