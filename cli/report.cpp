// Horizon: `horizon report RUN... -o DIR` (study/report.h).
#include <fmt/core.h>

#include <algorithm>

#include "cli/commands.h"
#include "cli/flags.h"
#include "core/error.h"
#include "study/report.h"

namespace hz::cli {

int report_main(const std::vector<std::string>& a) {
  if (a.size() < 2 || std::find(a.begin(), a.end(), "--help") != a.end()) {
    fmt::print("{}",
        "usage: horizon report RUN_DIR... -o DIR [--no-plots] [--python PY] [--script PATH]\n"
        "                      [--oa-T 512] [--oa-heads 10] [--oa-layers 10] [--oa-trials 2]\n"
        "  One markdown page DIR/README.md with the runs' tables (evaluate them first with horizon eval)\n"
        "  and PNG plots drawn by scripts/tools/report_plots.py with Debian's python3-matplotlib (the copy\n"
        "  installed with this binary, the build's beside it, unless --script PATH names another).\n");
    return a.size() < 2 ? 2 : 0;
  }
  study::ReportOptions o;
  std::vector<std::string> runs;
  for (size_t i = 1; i < a.size(); ++i) {
    const std::string& s = a[i];
    auto value = [&]() -> std::string {
      HZ_CHECK(i + 1 < a.size(), ValueError, "report: ", s, " needs a value");
      return a[++i];
    };
    if (s == "-o" || s == "--out") o.out_dir = value();
    else if (s == "--no-plots") o.plots = false;
    else if (s == "--python") o.python = value();
    else if (s == "--script") o.script = value();
    else if (s == "--oa-T") o.oa_T = parse_int(value(), "--oa-T", 2, int64_t{1} << 24);
    else if (s == "--oa-heads") o.oa_heads = parse_int(value(), "--oa-heads", 1, 1 << 16);
    else if (s == "--oa-layers") o.oa_layers = parse_int(value(), "--oa-layers", 1, 1 << 16);
    else if (s == "--oa-trials") o.oa_trials = parse_int(value(), "--oa-trials", 1, 1 << 20);
    else if (s.rfind("-", 0) == 0) throw ValueError("report: unknown option " + s + "; see --help");
    else runs.push_back(s);
  }
  const study::ReportResult r = study::make_report(runs, o);
  fmt::print("{}\nwrote {} ({} plots) and {}\n", r.main_table, r.markdown_path, r.pngs.size(), r.json_path);
  return 0;
}

}  // namespace hz::cli
