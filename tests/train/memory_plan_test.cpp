// The memory plan (train/memory_plan.h) against the CPU allocator's measured peak of real training
// steps: within 15% for every recompute setting, f32 and bf16, SwiGLU and ReLU^2, GQA and QK-norm,
// a vocabulary whose head dominates, the loss chunk, tied and untied heads, Muon, FoX gates, sinks
// and an output gate, and a sharded
// optimizer's share counted per rank; and the plan orders the settings as the measurements do.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/train/train_test_util.h"

#include "train/memory_plan.h"
#include "train/trainer.h"

using namespace hz;
using namespace hz::train;

namespace {

std::string tmp_root() {
  static const std::string root = test::make_tmp_dir("hz_memory_plan_test");
  return root;
}

TrainResult step(const std::string& name, std::vector<std::string> extra) {
  std::vector<std::string> ov{"run.name=" + name, "run.out_dir=" + tmp_root(), "data.cache_dir=" + tmp_root() + "/data",
                              "model.d_model=96", "model.n_layers=3", "model.n_heads=4", "data.seq_len=256",
                              "data.batch_size=4", "train.steps=3", "train.log_every=1", "schedule.warmup_steps=0",
                              "eval.every=0", "eval.batches=1", "eval.lengths=[256]", "checkpoint.every=0"};
  ov.insert(ov.end(), extra.begin(), extra.end());
  TrainOptions o;
  o.quiet = true;
  o.stop_after = 2;  // no final evaluation or checkpoint: the peak is the steps'
  return hz::train::train(parse_recipe("model:\n  layer_kinds:\n    rope: {pos: rope}\n  pattern: [rope]\n", "plan.yaml", ov), o);
}

}  // namespace

TEST(MemoryPlan, WithinFifteenPercentOfTheMeasuredPeak) {
  const std::vector<std::vector<std::string>> cases{
      {},
      {"train.recompute=attention"},
      {"train.recompute=layer"},
      {"train.grad_accum=2"},
      {"train.grad_accum=2", "train.recompute=layer"},
      {"run.precision=bf16"},
      {"run.precision=bf16", "train.recompute=layer"},
      {"model.mlp=relu2", "model.n_kv_heads=2"},
      {"model.layer_kinds.rope.qk_norm=per_head"},
      {"model.vocab_size=8192", "train.loss_chunk=0"},
      {"model.vocab_size=8192", "train.loss_chunk=256"},
      {"model.vocab_size=8192", "model.tie_embeddings=false"},
      {"optim.name=muon"},
      {"parallel.shard_optimizer=true"},
      {"model.layer_kinds.rope.forget=true", "model.layer_kinds.rope.sink=true", "model.layer_kinds.rope.gate=head"},
      {"model.layer_kinds.rope.forget=true", "train.recompute=layer"},
  };
  int i = 0;
  for (const auto& c : cases) {
    std::string what;
    for (const auto& s : c) what += s + " ";
    test::expect_plan_holds_peak(step("case" + std::to_string(i++), c), what);
  }
}

TEST(MemoryPlan, RecomputationAndTheLossChunkShrinkItAsMeasured) {
  const TrainResult none = step("o_none", {}), layer = step("o_layer", {"train.recompute=layer"});
  EXPECT_LT(layer.mem_peak, none.mem_peak);
  EXPECT_LT(layer.mem_plan, none.mem_plan);
  const TrainResult all = step("o_all", {"model.vocab_size=8192", "train.loss_chunk=0"}),
                    chunk = step("o_chunk", {"model.vocab_size=8192", "train.loss_chunk=256"});
  EXPECT_LT(chunk.mem_peak, all.mem_peak);
  EXPECT_LT(chunk.mem_plan, all.mem_plan);
}

namespace {

// A whole run of three steps with its final evaluation: the evaluation's own high-water mark
TrainResult run_with_eval(const std::string& name, std::vector<std::string> extra) {
  std::vector<std::string> ov{"run.name=" + name, "run.out_dir=" + tmp_root(), "data.cache_dir=" + tmp_root() + "/data",
                              "model.d_model=96", "model.n_layers=3", "model.n_heads=4", "data.seq_len=128",
                              "data.batch_size=2", "train.steps=3", "train.log_every=1", "schedule.warmup_steps=0",
                              "eval.every=0", "eval.batches=1", "checkpoint.every=0"};
  ov.insert(ov.end(), extra.begin(), extra.end());
  TrainOptions o;
  o.quiet = true;
  return hz::train::train(parse_recipe("model:\n  layer_kinds:\n    rope: {pos: rope}\n  pattern: [rope]\n", "plan.yaml", ov), o);
}

}  // namespace

TEST(MemoryPlan, TheEvaluationWithinFifteenPercentOfItsMeasuredPeak) {
  // lengths up to 16x training's, so that the no-grad forward at the longest length dominates
  const std::vector<std::vector<std::string>> cases{
      {"eval.lengths=[128,2048]"},
      {"eval.lengths=[2048]", "eval.batch_size=1", "model.mlp=gelu"},
      {"eval.lengths=[1024]", "run.precision=bf16"},
      {"eval.lengths=[1024]", "model.vocab_size=8192", "model.tie_embeddings=false"},
      {"eval.lengths=[1024]", "model.layer_kinds.rope.gate=head", "model.n_kv_heads=2"},
  };
  int i = 0;
  for (const auto& c : cases) {
    std::string what;
    for (const auto& s : c) what += s + " ";
    const TrainResult r = run_with_eval("eval" + std::to_string(i++), c);
    ASSERT_GT(r.eval_mem_peak, 0) << what;
    const double ratio = static_cast<double>(r.eval_mem_plan) / static_cast<double>(r.eval_mem_peak);
    EXPECT_GT(ratio, 0.85) << what << "plan " << format_bytes(r.eval_mem_plan) << " measured " << format_bytes(r.eval_mem_peak);
    EXPECT_LT(ratio, 1.15) << what << "plan " << format_bytes(r.eval_mem_plan) << " measured " << format_bytes(r.eval_mem_peak);
  }
}

TEST(MemoryPlan, NoEvaluationWhenSwitchedOff) {
  const TrainResult r = run_with_eval("noeval", {"eval.final=false"});
  EXPECT_EQ(r.eval_mem_peak, 0);
  EXPECT_TRUE(std::isnan(r.final_val_loss));
  const Recipe rc = parse_recipe("{}", "x.yaml", {"eval.every=0", "eval.final=false"});
  EXPECT_EQ(plan_memory(rc, nn::Transformer(rc.model_config(), 0), 1).eval, 0);
  const Recipe on = parse_recipe("{}", "x.yaml", {"eval.every=0"});
  EXPECT_GT(plan_memory(on, nn::Transformer(on.model_config(), 0), 1).eval, 0);
}
