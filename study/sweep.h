// Horizon: sweeps. A grid file (by convention NAME.sweep.yaml) expands one recipe over the cartesian product of override lists,
// runs the points in order (train, then evaluate), and collects one table.
//
//   recipe: recipes/pretrain_scope.yaml     # relative to the working directory, else to this file
//   name: scope_grid                        # points go to <out_dir>/<name>/p<NN>-<values>/
//   out_dir: runs/sweeps                    # default: runs
//   overrides: [train.steps=200]            # applied to every point (before the grid values)
//   grid:                                   # key path -> values; the last key varies fastest
//     model.layer_kinds.scope.scope_gamma: [2, 4]
//     model.layer_kinds.scope.scope_min: [1, 8]
//   eval: [eval.lengths=[256,512,1024]]     # overrides of every point's evaluation
//
// Resumable: a point whose sweep_point.json records the same overrides is finished and skipped;
// a point with checkpoints but no record resumes from its latest checkpoint (the trajectory
// continues bit for bit, as `checkpoint.resume=latest`). Results: <out_dir>/<name>/sweep.csv and
// sweep.md, one row per point (grid values, final training loss, held-out loss and last-256
// loss at every evaluation length).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace hz::study {

struct SweepSpec {
  std::string file;                  // where it came from (messages)
  std::string recipe;                // resolved recipe path
  std::string name = "sweep", out_dir = "runs";
  std::vector<std::string> overrides, eval_overrides;
  std::vector<std::pair<std::string, std::vector<std::string>>> grid;  // values as YAML text
};

// Parses and checks a grid file (strict keys; errors name the file and line). Every point's
// recipe is parsed and validated here, before anything runs.
// `extra` overrides (the command line's) follow the file's `overrides`.
SweepSpec load_sweep(const std::string& path, const std::vector<std::string>& extra = {});

struct SweepPoint {
  int64_t index = 0;
  std::string name;                       // p<NN>-<grid values>, e.g. p01-2-8
  std::string dir;                        // <out_dir>/<name>/<point name>
  std::vector<std::string> values;        // one per grid key, YAML text
  std::vector<std::string> overrides;     // everything applied to the recipe
};
std::vector<SweepPoint> expand(const SweepSpec& s);

struct SweepRow {
  SweepPoint point;
  bool skipped = false;                   // finished by an earlier invocation
  int64_t resumed_from = 0;               // > 0: continued from this step's checkpoint
  double final_train_loss = 0;
  std::vector<int64_t> lengths;
  std::vector<double> loss, last256;      // per evaluation length
};

struct SweepOptions {
  bool quiet = false;
  // Tests of interruption: train point `interrupt_point` for only `interrupt_after` steps and
  // stop the sweep there (as a killed process would, minus the kill).
  int64_t interrupt_point = -1, interrupt_after = 0;
  std::function<void(int64_t step, int rank)> before_step;  // passed to every point's training
};

struct SweepResult {
  std::vector<SweepRow> rows;
  bool interrupted = false;
  std::string table;  // the markdown table also written to sweep.md
};

SweepResult run_sweep(const SweepSpec& s, const SweepOptions& o = {});

}  // namespace hz::study
