// Horizon: `horizon report RUN... -o DIR` — one markdown page (DIR/README.md) with the tables of
// one or more evaluated runs and PNG plots drawn by scripts/tools/report_plots.py (Debian's
// python3-matplotlib through /usr/bin/python3, or $HZ_PYTHON; the copy installed with the binary,
// run with an argument vector, no shell):
//   main table        method, parameters, steps, final training loss, held-out loss and
//                     last-256 loss at every evaluation length
//   plots             loss and last-256 loss vs length, NLL by position, training loss, needle
//                     accuracy heatmaps (length x depth per task), probe R^2 per layer,
//                     attention FLOPs per method vs length, SCOPE order-awareness curves
//   seeds             runs whose recipes differ only in run.seed (and names, directories, init_from, evaluation LongRoPE factors) are one
//                     method: mean and 95% interval (Student's t) of loss and last-256 loss per
//                     length and of needle accuracy, and the effective length of the mean accuracy
//   other tables      needles (accuracy per task and length, effective length; the passkey grid of
//                     eval.passkey_examples as the task passkey_argmax), probe R^2, SWAN a
//                     per window, attention FLOPs, order awareness
// Every number also goes to DIR/report.json (what the plot script reads).
//
// A run's files are untrusted input (read_run_results): a run that cannot be read (not a run
// directory, not evaluated, an eval.json / metrics.jsonl / CSV that is not what Horizon writes) is
// left out with the file and the reason on stderr, in README.md and in report.json's "left_out";
// the report refuses (ValueError) only when no run is left.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace hz::study {

struct ReportOptions {
  std::string out_dir;
  std::string script;            // "" = report_plots.py installed with the binary (beside it, or ../share/horizon)
  std::string python;            // "" = $HZ_PYTHON or /usr/bin/python3
  int64_t oa_T = 512, oa_heads = 10, oa_layers = 10, oa_trials = 2;
  bool plots = true;
};

struct ReportResult {
  std::string markdown_path, json_path;
  std::vector<std::string> pngs;
  std::string main_table;        // the markdown of the main table
};

ReportResult make_report(const std::vector<std::string>& runs, const ReportOptions& o);
// The results of the evaluated run in `dir` as the report takes them (train_curve, final_train_loss,
// lengths, nll_by_position, needles (passkey.csv's grid as the task passkey_argmax), probes,
// swan_fit): every value checked, at most 1 GiB per file; a ValueError names the file, the line and
// what is wrong. A line of metrics.jsonl that is not JSON (cut short when training stopped) is skipped.
nlohmann::json read_run_results(const std::string& dir);
// Needle accuracy per task and length as the report shows it (read_run_results' "needles"): the mean
// over depths of the cells' accuracies; eval::effective_length of a task's row is its effective length.
std::map<std::string, std::map<int64_t, double>> needle_accuracy(const nlohmann::json& needles);
// The mean of v and the half-width of its 95% confidence interval (Student's t, n - 1 degrees of
// freedom; 0 for a single value).
std::pair<double, double> mean_ci95(const std::vector<double>& v);

}  // namespace hz::study
