#include "study/sweep.h"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/file.h"
#include "core/json_guard.h"
#include "study/evaluate_run.h"
#include "study/hf_models.h"
#include "study/load_run.h"
#include "train/checkpoint.h"
#include "train/run_dir.h"
#include "train/trainer.h"

namespace fs = std::filesystem;

namespace hz::study {

namespace {

[[noreturn]] void fail(const std::string& file, const YAML::Node& n, const std::string& what) {
  throw train::RecipeError(file + ":" + std::to_string(n.Mark().line + 1) + ": " + what);
}

std::vector<std::string> string_list(const std::string& file, const YAML::Node& n, const std::string& key) {
  std::vector<std::string> out;
  if (!n.IsDefined() || n.IsNull()) return out;
  if (!n.IsSequence()) fail(file, n, key + ": expected a list of key.path=value strings");
  for (const auto& x : n) {
    if (!x.IsScalar()) fail(file, x, key + ": expected key.path=value strings");
    out.push_back(x.Scalar());
  }
  return out;
}

// "p03-nope-swa_rope" from the point index and its grid values: [A-Za-z0-9._] kept, runs of
// anything else become one '-', at most 40 characters of values.
std::string point_name(int64_t i, const std::vector<std::string>& values) {
  std::string slug;
  for (const auto& v : values) {
    for (char c : v) {
      const bool keep = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_';
      if (keep) slug += c;
      else if (!slug.empty() && slug.back() != '-') slug += '-';
    }
    if (!slug.empty() && slug.back() != '-') slug += '-';
  }
  while (!slug.empty() && slug.back() == '-') slug.pop_back();
  if (slug.size() > 40) slug.resize(40);
  return fmt::format("p{:02d}", i) + (slug.empty() ? "" : "-" + slug);
}

std::string yaml_text(const YAML::Node& n) {
  YAML::Emitter e;
  e.SetSeqFormat(YAML::Flow);
  e.SetMapFormat(YAML::Flow);
  e << n;
  return e.c_str();
}

}  // namespace

SweepSpec load_sweep(const std::string& path, const std::vector<std::string>& extra) {
  SweepSpec s;
  s.file = path;
  YAML::Node root;
  {
    std::ifstream in = open_input_stream(path);  // a regular file (core/file.h)
    if (!in) throw train::RecipeError("cannot open grid file '" + path + "'");
    std::ostringstream text;
    text << in.rdbuf();
    root = train::load_yaml_document(text.str(), path);
  }
  if (!root.IsMap()) throw train::RecipeError(path + ": a grid file is a map with recipe, name, grid, ...");
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (!it->first.IsScalar()) fail(path, it->first, "a key must be a name, not a list or map");
    const std::string k = it->first.Scalar();
    if (k != "recipe" && k != "name" && k != "out_dir" && k != "overrides" && k != "grid" && k != "eval")
      fail(path, it->first, "unknown key '" + k + "'; known keys: recipe, name, out_dir, overrides, grid, eval");
  }
  if (!root["recipe"] || !root["recipe"].IsScalar()) throw train::RecipeError(path + ": 'recipe: PATH' is missing");
  s.recipe = root["recipe"].Scalar();
  if (!fs::exists(s.recipe) && fs::exists(fs::path(path).parent_path() / s.recipe))
    s.recipe = (fs::path(path).parent_path() / s.recipe).string();
  if (root["name"]) s.name = root["name"].Scalar();
  if (s.name.empty() || s.name.find('/') != std::string::npos) fail(path, root["name"], "name must be a plain name");
  if (root["out_dir"]) s.out_dir = root["out_dir"].Scalar();
  s.overrides = string_list(path, root["overrides"], "overrides");
  s.overrides.insert(s.overrides.end(), extra.begin(), extra.end());
  s.eval_overrides = string_list(path, root["eval"], "eval");
  const YAML::Node g = root["grid"];
  if (!g || !g.IsMap() || g.size() == 0) throw train::RecipeError(path + ": 'grid:' must map at least one key path to a list of values");
  for (auto it = g.begin(); it != g.end(); ++it) {
    if (!it->first.IsScalar()) fail(path, it->first, "grid: a key must be a key path, not a list or map");
    const std::string key = it->first.Scalar();
    if (!it->second.IsSequence() || it->second.size() == 0) fail(path, it->second, "grid." + key + ": expected a non-empty list of values");
    std::vector<std::string> vals;
    // a Node of its own: ranging over it->second would bind to a member of the iterator's
    // temporary proxy, which is gone before the loop runs (AddressSanitizer: stack-use-after-scope)
    const YAML::Node values = it->second;
    for (const auto& v : values) vals.push_back(yaml_text(v));
    s.grid.push_back({key, vals});
  }
  // every point must be a valid recipe before anything runs
  for (const SweepPoint& p : expand(s)) {
    try {
      load_recipe(s.recipe, p.overrides);
    } catch (const ValueError& e) {
      throw train::RecipeError(path + ": point " + std::to_string(p.index) + " (" + fmt::format("{}", fmt::join(p.values, ", ")) +
                        "): " + e.what());
    }
  }
  return s;
}

std::vector<SweepPoint> expand(const SweepSpec& s) {
  std::vector<SweepPoint> pts;
  int64_t total = 1;
  for (const auto& [k, v] : s.grid) total *= static_cast<int64_t>(v.size());
  for (int64_t i = 0; i < total; ++i) {
    SweepPoint p;
    p.index = i;
    p.overrides = s.overrides;
    int64_t rest = i;
    std::vector<std::string> vals(s.grid.size());
    for (int64_t d = static_cast<int64_t>(s.grid.size()) - 1; d >= 0; --d) {  // last key fastest
      const auto& v = s.grid[d].second;
      vals[d] = v[rest % static_cast<int64_t>(v.size())];
      rest /= static_cast<int64_t>(v.size());
    }
    for (size_t d = 0; d < s.grid.size(); ++d) p.overrides.push_back(s.grid[d].first + "=" + vals[d]);
    p.values = vals;
    p.name = point_name(i, vals);
    p.dir = s.out_dir + "/" + s.name + "/" + p.name;
    p.overrides.push_back("run.out_dir=" + s.out_dir + "/" + s.name);
    p.overrides.push_back("run.name=" + p.name);
    pts.push_back(p);
  }
  return pts;
}

namespace {
// A finished point's record (sweep_point.json), when it is readable and was written for the same
// overrides; false otherwise (the point is run again).
bool read_record(const std::string& record, const SweepPoint& p, SweepRow& row) {
  std::string text;  // a record is ~1 KB; bounded like every JSON Horizon reads (core/json_guard.h)
  if (!read_file_capped(record, 1 << 20, text).empty() || !json_depth_problem(text).empty()) return false;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  try {
    if (!j.is_object() || j.at("overrides") != nlohmann::json(p.overrides)) return false;
    row.final_train_loss = j.at("final_train_loss").get<double>();
    row.lengths = j.at("lengths").get<std::vector<int64_t>>();
    row.loss = j.at("loss").get<std::vector<double>>();
    row.last256 = j.at("last256").get<std::vector<double>>();
  } catch (const nlohmann::json::exception&) {
    return false;
  }
  return row.loss.size() == row.lengths.size() && row.last256.size() == row.lengths.size();
}
}  // namespace

SweepResult run_sweep(const SweepSpec& s, const SweepOptions& o) {
  SweepResult res;
  const train::RunLock lock(s.out_dir + "/" + s.name, "sweep");  // one sweep per directory
  for (const SweepPoint& p : expand(s)) {
    SweepRow row;
    row.point = p;
    const std::string record = p.dir + "/sweep_point.json";
    if (fs::exists(record)) {  // finished earlier: reuse its results
      if (read_record(record, p, row)) {
        row.skipped = true;
        if (!o.quiet) fmt::print("[sweep] point {} finished earlier: skipped\n", p.index);
        res.rows.push_back(row);
        continue;
      }
      if (!o.quiet) fmt::print("[sweep] point {}: {} is from another grid or unreadable: running the point again\n",
                               p.index, record);
      fs::remove(record);
    }
    std::vector<std::string> ov = p.overrides;
    if (!train::find_latest_checkpoint(p.dir + "/checkpoints").empty()) ov.push_back("checkpoint.resume=latest");
    const train::Recipe r = load_recipe(s.recipe, ov);
    if (!o.quiet) fmt::print("[sweep] point {} of {}: {}\n", p.index, expand(s).size(), fmt::join(p.values, ", "));
    train::TrainOptions to;
    to.quiet = o.quiet;
    to.before_step = o.before_step;
    if (p.index == o.interrupt_point) to.stop_after = o.interrupt_after;
    const train::TrainResult tr = study::train(r, to);
    row.resumed_from = tr.start_step;
    if (tr.end_step < r.train.steps) {  // interrupted (tests): stop the sweep here
      res.interrupted = true;
      res.rows.push_back(row);
      return res;
    }
    // evaluation of the finished point, with the grid's eval overrides
    std::vector<std::string> eov = s.eval_overrides;
    LoadedRun run = load_run(p.dir, eov);
    const std::string tables = evaluate_run(run, false);
    if (!o.quiet) fmt::print("{}", tables);
    if (fs::exists(p.dir + "/eval.json")) {
      std::ifstream ef = open_input_stream(p.dir + "/eval.json");
      const nlohmann::json ev = nlohmann::json::parse(ef);  // kept alive: the loop reads into it
      for (const auto& l : ev.at("lengths")) {
        row.lengths.push_back(l.at("length").get<int64_t>());
        row.loss.push_back(l.at("loss").get<double>());
        row.last256.push_back(l.at("last256_loss").get<double>());
      }
    }
    // the last logged training loss of the run (metrics.jsonl holds every invocation's lines)
    {
      std::ifstream mf = open_input_stream(p.dir + "/metrics.jsonl");
      for (std::string line; std::getline(mf, line);) {
        const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
        if (!j.is_discarded() && j.contains("loss")) row.final_train_loss = j["loss"].get<double>();
      }
    }
    nlohmann::json j;
    j["overrides"] = p.overrides;
    j["values"] = p.values;
    j["final_train_loss"] = row.final_train_loss;
    j["lengths"] = row.lengths;
    j["loss"] = row.loss;
    j["last256"] = row.last256;
    write_file_atomic(record, j.dump(1) + "\n");  // the record is complete or absent
    res.rows.push_back(row);
  }
  // the collected table
  std::ostringstream md, csv;
  md << "| point |";
  csv << "point";
  for (const auto& [k, v] : s.grid) {
    md << " " << k << " |";
    csv << "," << k;
  }
  md << " final train loss |";
  csv << ",final_train_loss";
  const std::vector<int64_t> lengths = res.rows.empty() ? std::vector<int64_t>{} : res.rows.front().lengths;
  for (int64_t L : lengths) {
    md << " loss@" << L << " | last256@" << L << " |";
    csv << ",loss_" << L << ",last256_" << L;
  }
  md << "\n|---|";
  csv << "\n";
  for (size_t i = 0; i < s.grid.size() + 1 + 2 * lengths.size(); ++i) md << "---|";
  md << "\n";
  for (const auto& row : res.rows) {
    md << "| " << row.point.name << " |";
    csv << row.point.name;
    for (const auto& v : row.point.values) {
      md << " " << v << " |";
      csv << ",\"" << v << "\"";
    }
    md << fmt::format(" {:.4f} |", row.final_train_loss);
    csv << fmt::format(",{:.6f}", row.final_train_loss);
    for (size_t k = 0; k < row.loss.size(); ++k) {
      md << fmt::format(" {:.4f} | {:.4f} |", row.loss[k], row.last256[k]);
      csv << fmt::format(",{:.6f},{:.6f}", row.loss[k], row.last256[k]);
    }
    md << "\n";
    csv << "\n";
  }
  res.table = md.str();
  const std::string dir = s.out_dir + "/" + s.name;
  write_file_atomic(dir + "/sweep.md", "# sweep " + s.name + " (" + s.recipe + ")\n\n" + res.table);
  write_file_atomic(dir + "/sweep.csv", csv.str());
  return res;
}

}  // namespace hz::study
