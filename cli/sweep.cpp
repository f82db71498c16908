// Horizon: `horizon sweep GRID.yaml` — train and evaluate a recipe over a grid of overrides
// (study/sweep.h), resumably, and print the collected table.
#include <fmt/core.h>

#include <algorithm>

#include "cli/commands.h"
#include "study/sweep.h"
#include "train/trainer.h"

namespace hz::cli {

int sweep_main(const std::vector<std::string>& a) {
  if (a.size() < 2 || std::find(a.begin(), a.end(), "--help") != a.end()) {
    fmt::print("{}",
        "usage: horizon sweep GRID.yaml [key.path=value ...] [--quiet]\n"
        "  Overrides on the command line apply to every point, after the file's (e.g. data.tokenizer=...).\n"
        "  GRID.yaml: recipe, name, out_dir, overrides, grid {key.path: [values]}, eval [overrides].\n"
        "  Points run in order (last grid key fastest) into <out_dir>/<name>/p<NN>-<values>/; each is trained, then\n"
        "  evaluated. Run it again after an interruption: finished points are skipped, an interrupted one\n"
        "  resumes from its latest checkpoint. Writes <out_dir>/<name>/sweep.csv and sweep.md.\n");
    return a.size() < 2 ? 2 : 0;
  }
  study::SweepOptions o;
  o.quiet = std::find(a.begin(), a.end(), "--quiet") != a.end();
  o.before_step = train::fault_injection_from_env();  // failure tests (HZ_FAULT_STEP)
  std::vector<std::string> extra;
  for (size_t i = 2; i < a.size(); ++i)
    if (a[i] != "--quiet") extra.push_back(a[i]);
  const study::SweepSpec s = study::load_sweep(a[1], extra);
  const study::SweepResult r = study::run_sweep(s, o);
  fmt::print("\n{}\nwrote {}/{}/sweep.md and sweep.csv\n", r.table, s.out_dir, s.name);
  return 0;
}

}  // namespace hz::cli
