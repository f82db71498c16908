#include "eval/needles.h"

#include <fmt/core.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/file.h"
#include "data/needles.h"
#include "eval/generate.h"

namespace hz::eval {

NeedleReport evaluate_needles(nn::Transformer& m, const EvalOptions& o) {
  NeedleReport rep;
  if (o.needles.tasks.empty()) return rep;
  HZ_CHECK(o.needles.samples >= 1, ValueError, "needles: samples per cell must be >= 1");
  const auto tok = data::make_tokenizer(o.tokenizer);
  const data::NeedleFormat fmt_ = o.needles.format;
  const auto& verses = data::bible_verses();
  for (const std::string& given : o.needles.tasks) {
    const data::NeedleTask task = data::parse_needle_task(given);
    const std::string tname = data::name(task);  // an earlier name reports under the current one
    for (int64_t L : o.lengths) {
      for (size_t di = 0; di < o.needles.depths.size(); ++di) {
        NeedleCell cell;
        cell.task = tname;
        cell.length = L;
        cell.depth = o.needles.depths[di];
        double score_sum = 0;
        bool skip = false;
        for (int64_t s = 0; s < o.needles.samples && !skip; ++s) {
          const uint64_t stream = static_cast<uint64_t>(task) * 1000000000ull + static_cast<uint64_t>(L) * 10000ull +
                                  di * 100ull + static_cast<uint64_t>(s);
          Generator g(o.seed + 104729, stream);
          // the budget depends on the answer, drawn inside make_needle: size it on a copy first
          Generator probe = g;
          data::NeedleExample ex;
          try {
            ex = data::make_needle(*tok, verses, task, fmt_, probe, L, cell.depth, 0);
            const int64_t budget = static_cast<int64_t>(ex.answer.size()) + 4;
            ex = data::make_needle(*tok, verses, task, fmt_, g, L, cell.depth, budget);
          } catch (const ValueError& e) {
            rep.skipped.push_back(fmt::format("{} at length {}: {}", tname, L, e.what()));
            skip = true;
            break;
          }
          GenerateOptions go;
          go.max_new_tokens = static_cast<int64_t>(ex.answer.size()) + 4;
          go.stop_token = tok->eos();
          go.train_len = o.train_len;
          go.inference = o.inference;
          const Generation gen = generate(m, ex.prompt, go);
          const std::string out = tok->decode(gen.tokens);
          const double sc = data::needle_score(out, ex.answers);
          score_sum += sc;
          cell.correct += sc == 1.0;
          ++cell.samples;
          if (s == 0)
            rep.samples.push_back({tname, L, static_cast<int64_t>(ex.prompt.size()), cell.depth, ex.answers, out});
        }
        if (skip) break;
        cell.score = score_sum / std::max<int64_t>(1, cell.samples);
        rep.cells.push_back(cell);
      }
    }
  }
  return rep;
}

int64_t effective_length(const std::map<int64_t, double>& accuracy_by_length) {
  if (accuracy_by_length.empty()) return 0;
  const double base = accuracy_by_length.begin()->second;
  if (base <= 0) return 0;
  int64_t effective = 0;
  for (const auto& [L, acc] : accuracy_by_length) {
    if (acc < kEffectiveShare * base) break;
    effective = L;
  }
  return effective;
}

std::map<std::string, int64_t> effective_lengths(const NeedleReport& r) {
  std::map<std::string, std::map<int64_t, std::pair<int64_t, int64_t>>> pooled;  // task -> L -> (correct, samples)
  for (const auto& c : r.cells) {
    auto& p = pooled[c.task][c.length];
    p.first += c.correct;
    p.second += c.samples;
  }
  std::map<std::string, int64_t> out;
  for (const auto& [task, byL] : pooled) {
    std::map<int64_t, double> acc;
    for (const auto& [L, cs] : byL) acc[L] = cs.second ? static_cast<double>(cs.first) / static_cast<double>(cs.second) : 0.0;
    out[task] = effective_length(acc);
  }
  return out;
}

std::string needle_table(const NeedleReport& r) {
  std::ostringstream os;
  if (r.cells.empty() && r.skipped.empty()) return "";
  os << "\nneedles (greedy decoding, exact containment): accuracy = all values found, score = share found\n";
  os << fmt::format("{:<20} {:>8} {:>7} {:>8} {:>9} {:>8}\n", "task", "length", "depth", "samples", "accuracy", "score");
  for (const auto& c : r.cells)
    os << fmt::format("{:<20} {:>8} {:>7.2f} {:>8} {:>8.1f}% {:>8.3f}\n", c.task, c.length, c.depth, c.samples,
                      100.0 * c.correct / std::max<int64_t>(1, c.samples), c.score);
  for (const auto& [task, L] : effective_lengths(r))
    os << fmt::format("effective length of {} (accuracy >= 85% of its shortest length's): {}\n", task, L);
  for (const auto& s : r.skipped) os << "skipped: " << s << "\n";
  return os.str();
}

FileSet needle_files(const NeedleReport& r) {
  if (r.cells.empty() && r.skipped.empty()) return {};
  std::ostringstream csv;
  csv << "task,length,depth,samples,correct,accuracy,score\n";
  nlohmann::json j;
  j["cells"] = nlohmann::json::array();
  for (const auto& c : r.cells) {
    const double acc = static_cast<double>(c.correct) / std::max<int64_t>(1, c.samples);
    csv << fmt::format("{},{},{},{},{},{:.4f},{:.4f}\n", c.task, c.length, c.depth, c.samples, c.correct, acc, c.score);
    j["cells"].push_back({{"task", c.task}, {"length", c.length}, {"depth", c.depth}, {"samples", c.samples},
                          {"correct", c.correct}, {"accuracy", acc}, {"score", c.score}});
  }
  j["examples"] = nlohmann::json::array();
  for (const auto& s : r.samples)
    j["examples"].push_back({{"task", s.task}, {"length", s.length}, {"depth", s.depth}, {"prompt_tokens", s.prompt_tokens},
                             {"answers", s.answers}, {"output", s.output}});
  j["skipped"] = r.skipped;
  j["effective_length"] = effective_lengths(r);
  return {{"needles.csv", csv.str()},
          {"needles.json", j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"}};
}

void write_needles(const NeedleReport& r, const std::string& dir) {
  const FileSet files = needle_files(r);
  if (!files.empty()) write_files_atomic(dir, files);
}

}  // namespace hz::eval
