// Helpers shared by the train/ test files.
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "train/memory_plan.h"
#include "train/trainer.h"

namespace hz::test {

// A fresh directory /tmp/<prefix>_XXXXXX (left in place for inspection after a failure).
inline std::string make_tmp_dir(const std::string& prefix) {
  std::string tmpl = "/tmp/" + prefix + "_XXXXXX";
  return std::string(mkdtemp(tmpl.data()));
}

inline const char* const kRopeModel = "model:\n  layer_kinds:\n    rope: {pos: rope}\n  pattern: [rope]\n";

// The training tests' small run: d_model 64, 2 layers of `model` (RoPE), 4 heads, 64 tokens, batch 8,
// 12 steps at lr 1e-2 (2 warm-up), a checkpoint every 6, evaluation off, run and data directories
// under `root`; then `overrides` (they win).
inline train::Recipe tiny_recipe(const std::string& root, const std::string& name,
                                 const std::vector<std::string>& overrides = {}, const std::string& model = kRopeModel) {
  std::vector<std::string> ov{"run.name=" + name, "run.out_dir=" + root, "data.cache_dir=" + root + "/data",
                              "model.d_model=64", "model.n_layers=2", "model.n_heads=4", "data.seq_len=64",
                              "data.batch_size=8", "train.steps=12", "train.log_every=4", "schedule.warmup_steps=2",
                              "optim.lr=1e-2", "eval.every=0", "eval.batches=2", "eval.lengths=[64, 128]",
                              "checkpoint.every=6"};
  ov.insert(ov.end(), overrides.begin(), overrides.end());
  return train::parse_recipe(model, "tiny.yaml", ov);
}

inline train::TrainOptions quiet() {
  train::TrainOptions o;
  o.quiet = true;
  return o;
}

// The memory plan within 15% of a run's measured peak (the CPU allocator's or the CUDA pool's).
inline void expect_plan_holds_peak(const train::TrainResult& r, const std::string& what) {
  ASSERT_GT(r.mem_peak, 0) << what;
  const double ratio = static_cast<double>(r.mem_plan) / static_cast<double>(r.mem_peak);
  EXPECT_GT(ratio, 0.85) << what << "plan " << train::format_bytes(r.mem_plan) << " measured " << train::format_bytes(r.mem_peak);
  EXPECT_LT(ratio, 1.15) << what << "plan " << train::format_bytes(r.mem_plan) << " measured " << train::format_bytes(r.mem_peak);
}

}  // namespace hz::test
