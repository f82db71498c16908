#include "study/report.h"

#include <fmt/core.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "attention/accounting.h"
#include "core/file.h"
#include "core/json_guard.h"
#include "eval/needles.h"
#include "eval/order_awareness.h"
#include "train/recipe.h"
#include "train/trainer.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace hz::study {

namespace {

// ---- a run's result files, read as untrusted input ---------------------------------------------
// Every value the report takes from a run (eval.json, metrics.jsonl, the CSVs horizon eval writes) is
// checked here: a file that is not what Horizon writes (empty, not JSON, a string where a number
// belongs, a row with a cell missing) is a ValueError naming the file, the line and the value, which
// make_report turns into leaving that run out. At most kMaxRunFileBytes per file, JSON nested at most
// 64 deep (core/json_guard.h), before anything is parsed.
constexpr uint64_t kMaxRunFileBytes = 1ull << 30;

[[noreturn]] void bad_file(const std::string& path, int64_t line, const std::string& what) {
  throw ValueError(path + (line > 0 ? ":" + std::to_string(line) : std::string()) + ": " + what);
}

// The text of a result file; false when it does not exist.
bool read_result_file(const std::string& path, std::string& text) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return false;
  const std::string why = read_file_capped(path, kMaxRunFileBytes, text);
  if (!why.empty()) bad_file(path, 0, why);
  return true;
}

json parse_json_text(const std::string& text, const std::string& path, int64_t line) {
  if (const std::string deep = json_depth_problem(text); !deep.empty()) bad_file(path, line, deep);
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) bad_file(path, line, text.empty() ? "empty, not JSON" : "not valid JSON");
  return j;
}

// A cell as a message shows it: at most 40 bytes, those outside printable ASCII as \xNN (a message
// goes into report.json, which must stay UTF-8).
std::string shown(const std::string& cell) {
  std::string out;
  for (size_t i = 0; i < cell.size() && i < 40; ++i) {
    const unsigned char c = static_cast<unsigned char>(cell[i]);
    out += c >= 0x20 && c < 0x7f ? std::string(1, static_cast<char>(c)) : fmt::format("\\x{:02x}", c);
  }
  return out + (cell.size() > 40 ? "..." : "");
}
std::string shown(const json& v) { return shown(v.dump(-1, ' ', false, json::error_handler_t::replace)); }

// A whole cell or JSON value as a finite number / a non-negative integer.
double parse_number(const std::string& cell, const std::string& path, int64_t line, const std::string& what) {
  double v = 0;
  const char* end = cell.data() + cell.size();
  const auto [at, ec] = std::from_chars(cell.data(), end, v);
  if (cell.empty() || ec != std::errc() || at != end || !std::isfinite(v))
    bad_file(path, line, what + " is '" + shown(cell) + "', not a finite number");
  return v;
}
// Lengths as a recipe's eval.lengths allows them: [2, 2^24] (the report computes each one's attention FLOPs).
constexpr int64_t kMinLength = 2, kMaxLength = int64_t{1} << 24;
int64_t parse_count(const std::string& cell, const std::string& path, int64_t line, const std::string& what,
                    int64_t lo = 0, int64_t hi = INT64_MAX) {
  int64_t v = 0;
  const char* end = cell.data() + cell.size();
  const auto [at, ec] = std::from_chars(cell.data(), end, v);
  if (cell.empty() || ec != std::errc() || at != end || v < lo || v > hi)
    bad_file(path, line, what + " is '" + shown(cell) + "', not a whole number in [" + std::to_string(lo) + ", " +
                             std::to_string(hi) + "]");
  return v;
}
double json_number(const json& j, const char* key, const std::string& path, int64_t line) {
  if (!j.contains(key)) bad_file(path, line, std::string("no \"") + key + "\"");
  const json& v = j[key];
  if (!v.is_number() || !std::isfinite(v.get<double>()))
    bad_file(path, line, std::string("\"") + key + "\" is " + shown(v) + ", not a finite number");
  return v.get<double>();
}
int64_t json_count(const json& j, const char* key, const std::string& path, int64_t line, int64_t lo = 0,
                   int64_t hi = INT64_MAX) {
  if (!j.contains(key)) bad_file(path, line, std::string("no \"") + key + "\"");
  const json& v = j[key];
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) ||
      v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    bad_file(path, line, std::string("\"") + key + "\" is " + shown(v) + ", not a whole number in [" +
                             std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v.get<int64_t>();
}

// A CSV with a header line, as horizon eval writes it (numbers and plain names, no quoting); absent: no rows.
struct Csv {
  std::string path;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::vector<int64_t> lines;  // each row's line in the file
  size_t column(const std::string& name) const {
    for (size_t i = 0; i < header.size(); ++i)
      if (header[i] == name) return i;
    bad_file(path, 1, "no column '" + name + "' in the header");
  }
  double num(size_t r, const std::string& col) const { return parse_number(rows[r][column(col)], path, lines[r], col); }
  int64_t count(size_t r, const std::string& col, int64_t lo = 0, int64_t hi = INT64_MAX) const {
    return parse_count(rows[r][column(col)], path, lines[r], col, lo, hi);
  }
  int64_t length(size_t r) const { return count(r, "length", kMinLength, kMaxLength); }
  const std::string& str(size_t r, const std::string& col) const { return rows[r][column(col)]; }
};

Csv read_csv(const std::string& path) {
  Csv c;
  c.path = path;
  std::string text;
  if (!read_result_file(path, text)) return c;
  auto split = [](const std::string& line) {
    std::vector<std::string> out;
    size_t at = 0;
    for (size_t comma; (comma = line.find(',', at)) != std::string::npos; at = comma + 1) out.push_back(line.substr(at, comma - at));
    out.push_back(line.substr(at));
    return out;
  };
  std::istringstream in(text);
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (n == 1) {
      c.header = split(line);
      continue;
    }
    if (line.empty()) continue;
    std::vector<std::string> cells = split(line);
    if (cells.size() != c.header.size())
      bad_file(path, n, std::to_string(cells.size()) + " cells where the header names " + std::to_string(c.header.size()));
    c.rows.push_back(std::move(cells));
    c.lines.push_back(n);
  }
  if (n == 0) bad_file(path, 0, "empty: no header line");
  return c;
}

std::string method_of(const nn::ModelConfig& c) {
  std::set<std::string> seen;
  std::string s;
  for (const auto& n : c.layer_kind_names()) {
    if (!seen.insert(n).second) continue;
    s += (s.empty() ? "" : "; ") + c.kind(n).attn.describe();
  }
  return s;
}

// The inference-time options the run is evaluated with (eval.*), appended to its method: "" when none.
std::string inference_of(const eval::InferenceOptions& o) {
  std::string s;
  auto add = [&](const std::string& x) { s += (s.empty() ? "" : ", ") + x; };
  if (o.rope_scaling) add(std::string("rope_scaling ") + attn::name(*o.rope_scaling));
  if (!o.longrope_long_factors.empty()) add("its own long factors");
  if (o.lampe) add("lampe");
  if (o.drope_c != 0) add(fmt::format("drope_c {:g}", o.drope_c));
  if (o.swan_a > 0) add(fmt::format("swan_a {:g}", o.swan_a));
  return s.empty() ? s : ", evaluated with " + s;
}

// The positions the run trained with (train.positions), appended to its method: "" for indices.
std::string positions_of(const data::PositionOptions& p) {
  if (p.scheme == data::PositionScheme::Index) return "";
  return fmt::format(", trained with {} positions to {}", data::name(p.scheme), p.max) +
         (p.scheme == data::PositionScheme::PoSE ? fmt::format(" ({} chunks)", p.chunks) : "");
}

// The plot script: --script PATH when given, else the copy installed with this binary (the build copies
// scripts/tools/report_plots.py beside it; an install puts it in <prefix>/share/horizon) and no other:
// never one that happens to sit in the working directory.
std::string find_script(const std::string& given) {
  if (!given.empty()) return given;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  HZ_CHECK(!ec, ValueError, "report: cannot find this program's own path (/proc/self/exe: ", ec.message(),
           "); pass --script PATH");
  const fs::path beside = exe.parent_path() / "report_plots.py";
  const fs::path installed = exe.parent_path().parent_path() / "share" / "horizon" / "report_plots.py";
  for (const fs::path& p : {beside, installed})
    if (fs::is_regular_file(p, ec)) return p.string();
  throw ValueError("report: the plot script is not installed with " + exe.string() + " (looked for " + beside.string() +
                   " and " + installed.string() + "); rebuild, or pass --script PATH");
}

// Runs argv[0] (searched in PATH when it names no directory) with argv as its argument vector, no shell
// between: a quote or $(...) in a directory name stays part of the name. SIGXFSZ back to its default
// in the child (horizon ignores it). Returns the exit status, or -1 with `why` when it could not run or
// ended by a signal.
int run_program(const std::vector<std::string>& args, std::string& why) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGXFSZ);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0], nullptr, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    why = std::string("cannot run it: ") + std::strerror(rc);
    return -1;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) {
      why = std::string("waitpid: ") + std::strerror(errno);
      return -1;
    }
  if (WIFSIGNALED(status)) {
    why = std::string("killed by ") + strsignal(WTERMSIG(status));
    return -1;
  }
  why = "exit status " + std::to_string(WEXITSTATUS(status));
  return WEXITSTATUS(status);
}

}  // namespace

namespace {

// The two-sided 95% quantile of Student's t with df degrees of freedom (df >= 1).
double t975(int64_t df) {
  static const double q[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                             2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
                             2.080,  2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
  return df <= 30 ? q[df - 1] : df <= 60 ? 2.000 : df <= 120 ? 1.980 : 1.960;
}
}  // namespace

// Mean and the half-width of its 95% confidence interval (t-distribution over the n values; 0 for one).
std::pair<double, double> mean_ci95(const std::vector<double>& v) {
  const auto n = static_cast<int64_t>(v.size());
  if (n == 0) return {std::nan(""), std::nan("")};
  double mean = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(n);
  if (n == 1) return {mean, 0.0};
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  const double sd = std::sqrt(ss / static_cast<double>(n - 1));
  return {mean, t975(n - 1) * sd / std::sqrt(static_cast<double>(n))};
}

namespace {
// Runs of one method trained with several seeds (recipes equal but for run.seed, names and
// directories): mean and 95% interval of the loss and last-256 loss at each length and of each
// needle task's accuracy, and the effective length of the mean accuracy. Adds data["groups"];
// returns the markdown section ("" when no method has two seeds).
std::string seed_groups(json& data, const std::set<int64_t>& all_lengths) {
  std::vector<std::string> keys;
  std::map<std::string, std::vector<size_t>> members;
  for (size_t i = 0; i < data["runs"].size(); ++i) {
    const std::string k = data["runs"][i]["group_key"].get<std::string>();
    if (!members.count(k)) keys.push_back(k);
    members[k].push_back(i);
  }
  json groups = json::array();
  std::ostringstream md;
  // two methods of one description: named with what tells them apart, their layer order (the same
  // kinds stacked otherwise) or their training steps
  std::map<std::string, std::set<std::string>> orders;
  std::map<std::string, std::set<int64_t>> steps;
  for (const std::string& k : keys) {
    if (members[k].size() < 2) continue;
    const json& run0 = data["runs"][members[k][0]];
    orders[run0["method"].get<std::string>()].insert(run0["layers"].get<std::string>());
    steps[run0["method"].get<std::string>()].insert(run0["steps"].get<int64_t>());
  }
  std::map<std::string, int> named;
  for (const std::string& k : keys) {
    const auto& idx = members[k];
    if (idx.size() < 2) continue;
    json g;
    const json& run0 = data["runs"][idx[0]];
    const std::string described = run0["method"].get<std::string>();
    std::string name = described;
    if (orders[described].size() > 1) name += " [layers " + run0["layers"].get<std::string>() + "]";
    if (steps[described].size() > 1) name += ", " + std::to_string(run0["steps"].get<int64_t>()) + " steps";
    if (named[name]++) name += " #" + std::to_string(named[name]);
    g["name"] = name;
    g["runs"] = json::array();
    g["seeds"] = json::array();
    for (size_t i : idx) g["runs"].push_back(data["runs"][i]["name"]), g["seeds"].push_back(data["runs"][i]["seed"]);
    g["lengths"] = json::array();
    for (int64_t L : all_lengths) {
      std::vector<double> loss, last;
      for (size_t i : idx)
        if (data["runs"][i].contains("lengths"))
          for (const auto& l : data["runs"][i]["lengths"])
            if (l["length"].get<int64_t>() == L) loss.push_back(l["loss"].get<double>()), last.push_back(l["last256_loss"].get<double>());
      if (loss.size() != idx.size()) continue;  // a seed without this length: no interval
      const auto [lm, lc] = mean_ci95(loss);
      const auto [am, ac] = mean_ci95(last);
      g["lengths"].push_back({{"length", L}, {"loss_mean", lm}, {"loss_ci95", lc}, {"last256_mean", am}, {"last256_ci95", ac}});
    }
    // needles: each seed's accuracy and partial-credit score per (task, length) pooled over depths,
    // then mean and interval
    std::map<std::string, std::map<int64_t, std::vector<double>>> acc, score;
    for (size_t i : idx) {
      struct Pool {
        double correct = 0, scored = 0, samples = 0;
      };
      std::map<std::string, std::map<int64_t, Pool>> pooled;
      for (const auto& c : data["runs"][i]["needles"]) {
        Pool& p = pooled[c["task"].get<std::string>()][c["length"].get<int64_t>()];
        const double n = c["samples"].get<double>();
        p.correct += c["accuracy"].get<double>() * n;
        p.scored += c["score"].get<double>() * n;
        p.samples += n;
      }
      for (const auto& [task, byL] : pooled)
        for (const auto& [L, p] : byL) {
          acc[task][L].push_back(p.samples > 0 ? p.correct / p.samples : 0.0);
          score[task][L].push_back(p.samples > 0 ? p.scored / p.samples : 0.0);
        }
    }
    g["needles"] = json::array();
    g["effective_length"] = json::object();
    for (const auto& [task, byL] : acc) {
      std::map<int64_t, double> mean;
      for (const auto& [L, v] : byL) {
        if (v.size() != idx.size()) continue;
        const auto [m, c] = mean_ci95(v);
        const auto [sm, sc] = mean_ci95(score[task][L]);
        mean[L] = m;
        g["needles"].push_back({{"task", task}, {"length", L}, {"accuracy_mean", m}, {"accuracy_ci95", c},
                                {"score_mean", sm}, {"score_ci95", sc}});
      }
      g["effective_length"][task] = eval::effective_length(mean);
    }
    groups.push_back(g);
  }
  data["groups"] = groups;
  for (auto& run : data["runs"]) run.erase("group_key");  // the recipe text served the grouping only
  if (groups.empty()) return "";
  md << "## Seeds: mean and 95% interval\n\nRuns whose recipes differ only in `run.seed` (and the checkpoint they "
     << "start from) are one method; "
     << "each cell is the mean over its seeds +- the half-width of the 95% interval (Student's t). Intervals that "
        "do not overlap separate two methods (a conservative test); overlapping ones do not settle it at this "
        "number of seeds.\n\n| method | seeds |";
  for (int64_t L : all_lengths) md << " loss@" << L << " |";
  for (int64_t L : all_lengths) md << " last256@" << L << " |";
  md << "\n|---|---|";
  for (size_t i = 0; i < 2 * all_lengths.size(); ++i) md << "---|";
  md << "\n";
  for (const auto& g : groups) {
    md << "| " << g["name"].get<std::string>() << " | " << g["seeds"].size() << " |";
    for (const char* key : {"loss", "last256"})
      for (int64_t L : all_lengths) {
        std::string cell = "-";
        for (const auto& l : g["lengths"])
          if (l["length"].get<int64_t>() == L)
            cell = fmt::format("{:.4f} +- {:.4f}", l[std::string(key) + "_mean"].get<double>(),
                               l[std::string(key) + "_ci95"].get<double>());
        md << " " << cell << " |";
      }
    md << "\n";
  }
  bool any_needles = false;
  for (const auto& g : groups) any_needles |= !g["needles"].empty();
  if (any_needles) {
    // one row per (method, task): the mean +- interval of `key` at each length, then the effective
    // length when `effective`
    auto needle_table = [&](const std::string& key, bool effective) {
      md << "| method | task |";
      for (int64_t L : all_lengths) md << " " << L << " |";
      md << (effective ? " effective length |" : "") << "\n|---|---|";
      for (size_t i = 0; i < all_lengths.size() + (effective ? 1 : 0); ++i) md << "---|";
      md << "\n";
      for (const auto& g : groups)
        for (const auto& [task, eff] : g["effective_length"].items()) {
          md << "| " << g["name"].get<std::string>() << " | " << task << " |";
          for (int64_t L : all_lengths) {
            std::string cell = "-";
            for (const auto& c : g["needles"])
              if (c["task"] == task && c["length"].get<int64_t>() == L)
                cell = fmt::format("{:.0f}% +- {:.0f}", 100 * c[key + "_mean"].get<double>(),
                                   100 * c[key + "_ci95"].get<double>());
            md << " " << cell << " |";
          }
          if (effective) md << " " << eff.get<int64_t>() << " |";
          md << "\n";
        }
    };
    md << "\n";
    needle_table("accuracy", true);
    // partial credit: retrieval that finds part of an answer (some of the passkey's digits) shows here
    // before any whole answer does
    md << "\nPartial credit, the same cells for each task's score (the share of an answer's values found; "
          "for passkey_argmax the share of the passkey's digits whose argmax is right, chance 10%):\n\n";
    needle_table("score", false);
  }
  md << "\n";
  return md.str();
}
}  // namespace

std::map<std::string, std::map<int64_t, double>> needle_accuracy(const json& needles) {
  std::map<std::string, std::map<int64_t, std::pair<double, int>>> acc;
  for (const auto& c : needles) {
    auto& a = acc[c["task"].get<std::string>()][c["length"].get<int64_t>()];
    a.first += c["accuracy"].get<double>();
    a.second += 1;
  }
  std::map<std::string, std::map<int64_t, double>> mean;
  for (const auto& [task, byL] : acc)
    for (const auto& [L, a] : byL) mean[task][L] = a.first / a.second;
  return mean;
}

json read_run_results(const std::string& dir) {
  json run;
  // training curve: a line that is not JSON (one cut short when training stopped) holds no point; a
  // parsed line's step and loss must be numbers
  json curve = json::array();
  {
    const std::string path = dir + "/metrics.jsonl";
    std::string text;
    if (read_result_file(path, text)) {
      std::istringstream in(text);
      int64_t n = 0;
      for (std::string line; std::getline(in, line);) {
        ++n;
        if (!json_depth_problem(line).empty()) bad_file(path, n, json_depth_problem(line));
        const json j = json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.is_object() || !j.contains("loss")) continue;
        curve.push_back({json_count(j, "step", path, n), json_number(j, "loss", path, n)});
      }
    }
  }
  run["train_curve"] = curve;
  run["final_train_loss"] = curve.empty() ? json(nullptr) : curve.back()[1];
  {
    const std::string path = dir + "/eval.json";
    std::string text;
    if (read_result_file(path, text)) {
      const json ev = parse_json_text(text, path, 0);
      if (!ev.is_object() || !ev.contains("lengths") || !ev["lengths"].is_array())
        bad_file(path, 0, "expected an object with a list \"lengths\" (as horizon eval writes it)");
      json lengths = json::array();
      for (size_t i = 0; i < ev["lengths"].size(); ++i) {
        const json& l = ev["lengths"][i];
        const std::string at = path + " (lengths[" + std::to_string(i) + "])";
        if (!l.is_object()) bad_file(at, 0, "expected an object, got " + shown(l));
        json out = {{"length", json_count(l, "length", at, 0, kMinLength, kMaxLength)}, {"loss", json_number(l, "loss", at, 0)},
                    {"last256_loss", json_number(l, "last256_loss", at, 0)}};
        for (const char* key : {"ppl", "tokens", "drope_c", "swan_a"})
          if (l.contains(key)) out[key] = json_number(l, key, at, 0);
        lengths.push_back(out);
      }
      run["lengths"] = lengths;
    }
  }
  std::vector<double> nll;
  const Csv nc = read_csv(dir + "/nll_by_position.csv");
  for (size_t i = 0; i < nc.rows.size(); ++i) nll.push_back(nc.num(i, "nll"));
  run["nll_by_position"] = nll;
  json needles = json::array();
  const Csv nd = read_csv(dir + "/needles.csv");
  for (size_t i = 0; i < nd.rows.size(); ++i) {
    const std::string& task = nd.str(i, "task");  // a name as horizon eval writes it (eval/needles.h)
    if (task.empty() || task.size() > 64 || !std::all_of(task.begin(), task.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
        }))
      bad_file(nd.path, nd.lines[i], "the task '" + shown(task) + "' is not a task name (letters, digits, '_', '-', '.')");
    needles.push_back({{"task", nd.str(i, "task")}, {"length", nd.length(i)}, {"depth", nd.num(i, "depth")},
                       {"accuracy", nd.num(i, "accuracy")}, {"score", nd.num(i, "score")},
                       {"samples", nd.count(i, "samples")}});
  }
  // the passkey grid (eval.passkey_examples: every answer digit the argmax) as one more retrieval task
  const Csv pk = read_csv(dir + "/passkey.csv");
  for (size_t i = 0; i < pk.rows.size(); ++i)
    needles.push_back({{"task", "passkey_argmax"}, {"length", pk.length(i)}, {"depth", pk.num(i, "depth")},
                       {"accuracy", pk.num(i, "accuracy")}, {"score", pk.num(i, "digit_accuracy")},
                       {"samples", pk.count(i, "examples")}});
  run["needles"] = needles;
  json probes = json::array();
  const Csv pr = read_csv(dir + "/probes.csv");
  for (size_t i = 0; i < pr.rows.size(); ++i) probes.push_back({{"layer", pr.count(i, "layer")}, {"r2", pr.num(i, "r2_heldout")}});
  run["probes"] = probes;
  json swan = json::array();
  const Csv sw = read_csv(dir + "/swan_fit.csv");
  for (size_t i = 0; i < sw.rows.size(); ++i)
    swan.push_back({{"length", sw.length(i)}, {"begin", sw.count(i, "begin")}, {"best_a", sw.num(i, "best_a")},
                    {"nll_best", sw.num(i, "nll_best")}, {"nll_off", sw.num(i, "nll_off")}});
  run["swan_fit"] = swan;
  // the retrieval-head probe (eval/retrieval.h): one row per (step, task, length, layer, head)
  json heads = json::array();
  const Csv rh = read_csv(dir + "/retrieval_heads.csv");
  for (size_t i = 0; i < rh.rows.size(); ++i) {
    const std::string& kind = rh.str(i, "layer_kind");
    if (kind != "global" && kind != "windowed" && kind != "mixed")
      bad_file(rh.path, rh.lines[i], "layer_kind is '" + shown(kind) + "', not global, windowed or mixed");
    const double score = rh.num(i, "score"), mass = rh.num(i, "needle_mass");
    if (score < 0 || score > 1) bad_file(rh.path, rh.lines[i], "score " + shown(rh.str(i, "score")) + " is outside [0, 1]");
    heads.push_back({{"step", rh.count(i, "step")}, {"task", rh.str(i, "task")}, {"length", rh.length(i)},
                     {"layer", rh.count(i, "layer", 0, 1 << 20)}, {"layer_kind", kind}, {"head", rh.count(i, "head", 0, 1 << 20)},
                     {"window", rh.count(i, "window")}, {"score", score}, {"needle_mass", mass},
                     {"opportunities", rh.count(i, "opportunities")}});
  }
  run["retrieval_heads"] = heads;
  return run;
}

namespace {

// One run directory as the report reads it (throws Error when it cannot be read).
json read_report_run(const std::string& dir) {
  HZ_CHECK(fs::exists(dir + "/config.yaml"), ValueError, "report: '", dir, "' is not a run directory (no config.yaml)");
  try {
    finish_file_set(dir);  // an evaluation stopped between its renames: its complete files go into place
  } catch (const Error&) {
    // read-only: the previous set is still whole, read it
  }
  HZ_CHECK(fs::exists(dir + "/eval.json") || fs::exists(dir + "/needles.csv"), ValueError, "report: run '", dir,
           "' has not been evaluated; run horizon eval ", dir, " first");
  train::Recipe r = train::load_trained_recipe(dir + "/config.yaml");
  // the run as evaluated: horizon eval writes the recipe it ran with (the training recipe and
  // its overrides, which may change inference-time fields only: freeze_scopes, RoPE scalings,
  // eval.rope_scaling...) beside its results; runs evaluated before it did have config.yaml only
  if (fs::exists(dir + "/eval_recipe.yaml")) {
    const train::Recipe re = train::load_trained_recipe(dir + "/eval_recipe.yaml");
    r.model = re.model;
    r.eval.opts.inference = re.eval.opts.inference;
  }
  const nn::ModelConfig mc = train::model_config_at(r, r.train.steps);  // after DroPE when the run dropped
  json run;
  {  // runs whose resolved recipes differ only in seed, name, directories and checkpointing (each
     // seed of a recalibration starts from that seed's run) are seeds of one method
    train::Recipe k = r;
    // how often it saved, whether it resumed (an interrupted seed continued from its checkpoint)
    // and what it started from are not the method
    k.checkpoint = train::CheckpointSection{};
    k.metrics = train::MetricsSection{};
    // factors searched per run (horizon longrope-search on each seed) come from that seed's run too
    if (!k.eval.opts.inference.longrope_long_factors.empty()) k.eval.opts.inference.longrope_long_factors = {-1.0};
    if (!k.eval.opts.inference.longrope_short_factors.empty()) k.eval.opts.inference.longrope_short_factors = {-1.0};
    k.run.seed = 0;
    k.run.name.clear();
    k.run.out_dir.clear();
    k.data.cache_dir.clear();
    k.source_file.clear();
    run["group_key"] = train::to_yaml(k);
    run["seed"] = r.run.seed;
  }
  run["name"] = fs::path(dir).filename().string();
  if (run["name"].get<std::string>().empty()) run["name"] = fs::path(dir).parent_path().filename().string();
  run["dir"] = dir;
  run["method"] = method_of(mc) + positions_of(r.train.positions) + inference_of(r.eval.opts.inference);
  {
    std::string layers;
    for (const auto& n : mc.layer_kind_names()) layers += (layers.empty() ? "" : ", ") + n;
    run["layers"] = layers;
  }
  run["train_length"] = r.data.seq_len;
  run["steps"] = r.train.steps;
  run["tokenizer"] = r.data.tokenizer;
  const nn::Transformer m(mc, 0);
  run["parameters"] = m.num_parameters();
  run.update(read_run_results(dir));
  return run;
}

// Runs of one directory name (p00-rope-1 of two sweeps) are named with their parent directory too,
// so that tables, report.json and the needle plots keep them apart.
void name_apart(json& runs) {
  std::map<std::string, int> uses;
  for (const auto& run : runs) ++uses[run["name"].get<std::string>()];
  for (auto& run : runs)
    if (uses[run["name"].get<std::string>()] > 1) {
      fs::path d = fs::path(run["dir"].get<std::string>()).lexically_normal();
      if (d.filename().empty()) d = d.parent_path();  // "runs/a/p00/" names p00 too
      run["name"] = d.parent_path().filename().string() + "/" + run["name"].get<std::string>();
    }
}

// Attention FLOPs of a run's model at every evaluated length (forward, all layers, one sequence).
json attention_flops(const json& run, const std::set<int64_t>& all_lengths) {
  const train::Recipe r = train::load_trained_recipe(run["dir"].get<std::string>() + "/config.yaml");
  const nn::Transformer m(train::model_config_at(r, r.train.steps), 0);
  json fl = json::array();
  for (int64_t T : all_lengths) {
    double flops = 0;
    for (const auto& b : m.layers) {
      nn::AttnCall call;
      call.T = T;
      call.train_len = r.data.seq_len;
      flops += attn::attention_cost(b->attn->attn_config(call), b->attn->attn_heads(), T, T, m.cfg.hdim()).flops_fwd;
    }
    fl.push_back({T, flops});
  }
  return fl;
}

// A markdown table's header: "| first | L1 | L2 | ... |" over the lengths, and its rule.
std::string length_header(const std::string& first, const std::set<int64_t>& all_lengths) {
  std::string h = "| " + first + " |";
  for (int64_t L : all_lengths) h += " " + std::to_string(L) + " |";
  h += "\n|---|";
  for (size_t i = 0; i < all_lengths.size(); ++i) h += "---|";
  return h + "\n";
}

std::string main_table(const json& data, const std::set<int64_t>& all_lengths) {
  std::ostringstream main;
  main << "| run | method | params | train T | steps | final train loss |";
  for (int64_t L : all_lengths) main << " loss@" << L << " |";
  for (int64_t L : all_lengths) main << " last256@" << L << " |";
  main << "\n|---|---|---|---|---|---|";
  for (size_t i = 0; i < 2 * all_lengths.size(); ++i) main << "---|";
  main << "\n";
  for (const auto& run : data["runs"]) {
    main << "| " << run["name"].get<std::string>() << " | " << run["method"].get<std::string>() << " | "
         << fmt::format("{:.2f}M", run["parameters"].get<double>() / 1e6) << " | " << run["train_length"] << " | "
         << run["steps"] << " | "
         << (run["final_train_loss"].is_null() ? std::string("-") : fmt::format("{:.4f}", run["final_train_loss"].get<double>()))
         << " |";
    for (const char* key : {"loss", "last256_loss"})
      for (int64_t L : all_lengths) {
        std::string cell = "-";
        if (run.contains("lengths"))
          for (const auto& l : run["lengths"])
            if (l["length"].get<int64_t>() == L) cell = fmt::format("{:.4f}", l[key].get<double>());
        main << " " << cell << " |";
      }
    main << "\n";
  }
  return main.str();
}

// Needles: accuracy per task and length, averaged over depths, and each task's effective length
// (also into data["effective_length"]: run -> task -> length).
std::string needles_section(json& data, const std::set<int64_t>& all_lengths) {
  bool any_needles = false;
  for (const auto& run : data["runs"]) any_needles |= !run["needles"].empty();
  if (!any_needles) return "";
  std::ostringstream md;
  md << "## Needles (greedy decoding, exact containment; passkey_argmax: the passkey grid, every answer digit the "
        "argmax; accuracy averaged over depths)\n\n"
     << "Effective length (NoLiMa's): the longest length up to which every length keeps at least 85% of the run's "
        "own accuracy at its shortest length.\n\n| run | task |";
  for (int64_t L : all_lengths) md << " " << L << " |";
  md << " effective length |\n|---|---|";
  for (size_t i = 0; i < all_lengths.size(); ++i) md << "---|";
  md << "---|\n";
  json data_effective = json::object();
  for (const auto& run : data["runs"]) {
    for (const auto& [task, mean] : needle_accuracy(run["needles"])) {
      md << "| " << run["name"].get<std::string>() << " | " << task << " |";
      for (int64_t L : all_lengths) {
        auto it = mean.find(L);
        md << " " << (it == mean.end() ? std::string("-") : fmt::format("{:.0f}%", 100.0 * it->second)) << " |";
      }
      const int64_t eff = eval::effective_length(mean);
      md << " " << eff << " |\n";
      data_effective[run["name"].get<std::string>()][task] = eff;
    }
  }
  data["effective_length"] = data_effective;
  md << "\n";
  for (const auto& run : data["runs"])
    if (!run["needles"].empty()) {
      std::string file = run["name"].get<std::string>();  // as report_plots.py names it
      std::replace(file.begin(), file.end(), '/', '-');
      md << "![needles " << run["name"].get<std::string>() << "](needles_" << file << ".png)\n\n";
    }
  return md.str();
}

std::string probes_section(const json& data) {
  bool any_probes = false;
  for (const auto& run : data["runs"]) any_probes |= !run["probes"].empty();
  if (!any_probes) return "";
  std::ostringstream md;
  md << "## Position probe (ridge, R^2 on held-out positions; layer 0 = embeddings)\n\n| run |";
  size_t nl = 0;
  for (const auto& run : data["runs"]) nl = std::max(nl, run["probes"].size());
  for (size_t l = 0; l < nl; ++l) md << " L" << l << " |";
  md << "\n|---|";
  for (size_t l = 0; l < nl; ++l) md << "---|";
  md << "\n";
  for (const auto& run : data["runs"]) {
    if (run["probes"].empty()) continue;
    md << "| " << run["name"].get<std::string>() << " |";
    for (const auto& p : run["probes"]) md << fmt::format(" {:.3f} |", p["r2"].get<double>());
    md << "\n";
  }
  md << "\n![probe R^2](probe_r2.png)\n\n";
  return md.str();
}

// Retrieval heads per run and checkpoint step: each head's copies and opportunities pooled over the
// needle tasks and lengths (copies = score x opportunities), the heads scoring at least 0.1 counted
// by their layer's kind, and the best head. Adds each run's "retrieval_by_step".
constexpr double kRetrievalHead = 0.1;
std::string retrieval_section(json& data) {
  bool any = false;
  for (const auto& run : data["runs"]) any |= !run["retrieval_heads"].empty();
  if (!any) return "";
  std::ostringstream md;
  md << "## Retrieval heads (Wu et al. 2024; eval.retrieval_heads)\n\nA head's score pools its copies of needle "
        "tokens over its copy opportunities across the needle tasks and lengths; heads scoring at least "
     << kRetrievalHead << " counted by their layer's kind, per checkpoint step.\n\n"
     << "| run | step | global | windowed | mixed | best head (layer.head, kind) | best score |\n|---|---|---|---|---|---|---|\n";
  for (auto& run : data["runs"]) {
    // step -> (layer, head) -> (copies, opportunities, kind)
    std::map<int64_t, std::map<std::pair<int64_t, int64_t>, std::tuple<double, double, std::string>>> pooled;
    for (const auto& h : run["retrieval_heads"]) {
      auto& t = pooled[h["step"].get<int64_t>()][{h["layer"].get<int64_t>(), h["head"].get<int64_t>()}];
      const double opp = static_cast<double>(h["opportunities"].get<int64_t>());
      std::get<0>(t) += h["score"].get<double>() * opp;
      std::get<1>(t) += opp;
      std::get<2>(t) = h["layer_kind"].get<std::string>();
    }
    json by_step = json::array();
    for (const auto& [step, heads] : pooled) {
      std::map<std::string, int64_t> count{{"global", 0}, {"windowed", 0}, {"mixed", 0}};
      double best = -1;
      std::pair<int64_t, int64_t> at{0, 0};
      std::string best_kind;
      for (const auto& [lh, t] : heads) {
        const double score = std::get<1>(t) > 0 ? std::get<0>(t) / std::get<1>(t) : 0.0;
        count[std::get<2>(t)] += score >= kRetrievalHead;
        if (score > best) best = score, at = lh, best_kind = std::get<2>(t);
      }
      md << fmt::format("| {} | {} | {} | {} | {} | {}.{} ({}) | {:.3f} |\n", run["name"].get<std::string>(), step,
                        count["global"], count["windowed"], count["mixed"], at.first, at.second, best_kind, best);
      by_step.push_back({{"step", step}, {"global", count["global"]}, {"windowed", count["windowed"]},
                         {"mixed", count["mixed"]}, {"best_layer", at.first}, {"best_head", at.second},
                         {"best_kind", best_kind}, {"best_score", best}});
    }
    run["retrieval_by_step"] = by_step;
  }
  md << "\n";
  return md.str();
}

std::string swan_section(const json& data) {
  std::ostringstream md;
  for (const auto& run : data["runs"]) {
    if (run["swan_fit"].empty()) continue;
    md << "## SWAN a per 128-token window: " << run["name"].get<std::string>() << "\n\n| length | window | best a | NLL | NLL without |\n|---|---|---|---|---|\n";
    for (const auto& f : run["swan_fit"])
      md << fmt::format("| {} | {} | {:g} | {:.4f} | {:.4f} |\n", f["length"].get<int64_t>(), f["begin"].get<int64_t>(),
                        f["best_a"].get<double>(), f["nll_best"].get<double>(), f["nll_off"].get<double>());
    md << "\n";
  }
  return md.str();
}

std::string flops_section(const json& data, const std::set<int64_t>& all_lengths) {
  std::ostringstream md;
  md << "## Attention FLOPs (forward, all layers, one sequence; exact visible pairs)\n\n" << length_header("run", all_lengths);
  for (const auto& run : data["runs"]) {
    md << "| " << run["name"].get<std::string>() << " |";
    for (const auto& f : run["attention_flops"]) md << fmt::format(" {:.3g} |", f[1].get<double>());
    md << "\n";
  }
  md << "\n![attention FLOPs](attention_flops.png)\n\n";
  return md.str();
}

// Order awareness (the SCOPE paper's simulation): T = 2^H; its data and its table.
json order_awareness_data(const ReportOptions& o) {
  json oa = json::object();
  for (auto s : {eval::OaScheme::NoPE, eval::OaScheme::Scope, eval::OaScheme::NoPE1, eval::OaScheme::Uniform})
    oa[eval::name(s)] = eval::order_awareness(eval::oa_windows(s, o.oa_T, o.oa_heads), o.oa_T, o.oa_layers, o.oa_trials, 0);
  return {{"T", o.oa_T}, {"heads", o.oa_heads}, {"r", oa}};
}

std::string order_awareness_section(const json& oa, const ReportOptions& o) {
  std::ostringstream md;
  md << "## Order awareness (the SCOPE paper's simulation, T = " << o.oa_T << ", H = " << o.oa_heads << ", " << o.oa_trials
     << " trials; exact integers)\n\n| scheme |";
  for (int64_t l = 1; l <= o.oa_layers; ++l) md << " " << l << " |";
  md << "\n|---|";
  for (int64_t l = 0; l < o.oa_layers; ++l) md << "---|";
  md << "\n";
  for (auto& [s, r] : oa["r"].items()) {
    md << "| " << s << " |";
    for (const auto& x : r) md << fmt::format(" {:.3f} |", x.get<double>());
    md << "\n";
  }
  md << "\n![order awareness](order_awareness.png)\n";
  return md.str();
}

// report_plots.py over report.json: the PNGs beside it.
std::vector<std::string> draw_plots(const ReportOptions& o, const ReportResult& res) {
  std::string py = o.python;
  if (py.empty()) py = std::getenv("HZ_PYTHON") ? std::getenv("HZ_PYTHON") : "/usr/bin/python3";
  const std::vector<std::string> cmd = {py, find_script(o.script), res.json_path, o.out_dir};
  std::string why;
  const int rc = run_program(cmd, why);
  HZ_CHECK(rc == 0, ValueError, "report: the plot script failed (", fmt::format("{}", fmt::join(cmd, " ")), ": ", why,
           "); the plots need matplotlib for ", py,
           " (Debian: apt-get install python3-matplotlib, which scripts/setup.sh installs). The tables are in ",
           res.markdown_path);
  std::vector<std::string> pngs;
  for (const auto& e : fs::directory_iterator(o.out_dir))
    if (e.path().extension() == ".png") pngs.push_back(e.path().string());
  std::sort(pngs.begin(), pngs.end());
  return pngs;
}

}  // namespace

ReportResult make_report(const std::vector<std::string>& runs, const ReportOptions& o) {
  HZ_CHECK(!runs.empty(), ValueError, "report: give at least one run directory");
  HZ_CHECK(!o.out_dir.empty(), ValueError, "report: give the output directory (-o DIR)");
  {
    std::error_code ec;
    fs::create_directories(o.out_dir, ec);
    HZ_CHECK(!ec && fs::is_directory(o.out_dir), ValueError, "report: cannot create the output directory '", o.out_dir,
             "': ", ec ? ec.message() : std::string("a file of that name is in the way"));
  }
  json data;
  data["runs"] = json::array();
  std::set<int64_t> all_lengths;
  // a run that cannot be read (not a run directory, not evaluated, a result file that is not what
  // Horizon writes) is left out, said on stderr and in the report: one broken run of thirty does not
  // stop the report of the other twenty-nine
  json left_out = json::array();
  for (const std::string& dir : runs) try {
    json run = read_report_run(dir);
    if (run.contains("lengths"))
      for (const auto& l : run["lengths"]) all_lengths.insert(l["length"].get<int64_t>());
    data["runs"].push_back(run);
  } catch (const Error& e) {
    left_out.push_back({{"dir", dir}, {"reason", e.what()}});
    fmt::print(stderr, "report: left out {}: {}\n", dir, e.what());
  }
  if (data["runs"].empty()) {
    std::string why;
    for (const auto& l : left_out) why += "\n  " + l["reason"].get<std::string>();
    throw ValueError("report: no run could be read:" + why);
  }
  data["left_out"] = left_out;
  name_apart(data["runs"]);
  for (auto& run : data["runs"]) run["attention_flops"] = attention_flops(run, all_lengths);
  data["order_awareness"] = order_awareness_data(o);

  ReportResult res;
  res.main_table = main_table(data, all_lengths);
  std::ostringstream md;
  md << "# Horizon report\n\n" << data["runs"].size() << " run(s). Losses are held-out nats per token; `last256@L` is the mean loss of "
     << "the last 256 positions at length L (as in the SCOPE paper); lengths beyond `train T` are extrapolation.\n\n";
  md << "## Main table\n\n" << res.main_table << "\n";
  if (!left_out.empty()) {
    md << "Left out (" << left_out.size() << " of " << runs.size() << " runs; fix the file or evaluate the run again):\n\n";
    for (const auto& l : left_out) md << "- `" << l["dir"].get<std::string>() << "`: " << l["reason"].get<std::string>() << "\n";
    md << "\n";
  }
  md << "![loss vs length](loss_vs_length.png)\n\n![NLL by position](nll_by_position.png)\n\n"
     << "![training loss](training_loss.png)\n\n";
  md << seed_groups(data, all_lengths) << needles_section(data, all_lengths) << retrieval_section(data) << probes_section(data)
     << swan_section(data)
     << flops_section(data, all_lengths) << order_awareness_section(data["order_awareness"], o);
  res.json_path = o.out_dir + "/report.json";
  res.markdown_path = o.out_dir + "/README.md";
  // a directory's name need not be UTF-8: its bytes are replaced, never thrown over
  write_file_atomic(res.json_path, data.dump(1, ' ', false, json::error_handler_t::replace) + "\n");
  write_file_atomic(res.markdown_path, md.str());
  if (o.plots) res.pngs = draw_plots(o, res);
  return res;
}

}  // namespace hz::study
