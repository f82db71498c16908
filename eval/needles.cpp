#include "eval/needles.h"

#include <fmt/core.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/file.h"
#include "data/needles.h"
#include "eval/generate.h"

namespace hz::eval {

void for_each_needle_cell(const data::Tokenizer& tok, const EvalOptions& o,
                          const std::function<void(const std::vector<NeedleItem>&)>& cell,
                          std::vector<std::string>& skipped) {
  HZ_CHECK(o.needles.samples >= 1, ValueError, "needles: samples per cell must be >= 1");
  const auto& verses = data::bible_verses();
  for (const std::string& given : o.needles.tasks) {
    const data::NeedleTask task = data::parse_needle_task(given);
    const std::string tname = data::name(task);  // an earlier name reports under the current one
    for (int64_t L : o.lengths) {
      for (size_t di = 0; di < o.needles.depths.size(); ++di) {
        std::vector<NeedleItem> items;
        bool skip = false;
        for (int64_t s = 0; s < o.needles.samples; ++s) {
          const uint64_t stream = static_cast<uint64_t>(task) * 1000000000ull + static_cast<uint64_t>(L) * 10000ull +
                                  di * 100ull + static_cast<uint64_t>(s);
          Generator g(o.seed + 104729, stream);
          // the budget depends on the answer, drawn inside make_needle: size it on a copy first
          Generator probe = g;
          NeedleItem it{tname, L, s, o.needles.depths[di], {}, 0};
          try {
            it.example = data::make_needle(tok, verses, task, o.needles.format, probe, L, it.depth, 0);
            it.max_new_tokens = static_cast<int64_t>(it.example.answer.size()) + 4;
            it.example = data::make_needle(tok, verses, task, o.needles.format, g, L, it.depth, it.max_new_tokens);
          } catch (const ValueError& e) {
            skipped.push_back(fmt::format("{} at length {}: {}", tname, L, e.what()));
            skip = true;
            break;
          }
          items.push_back(std::move(it));
        }
        if (skip) break;  // the pair is too short: no cell of it
        cell(items);
      }
    }
  }
}

NeedleReport evaluate_needles(nn::Transformer& m, const EvalOptions& o) {
  NeedleReport rep;
  if (o.needles.tasks.empty()) return rep;
  const auto tok = data::make_tokenizer(o.tokenizer);
  // the retrieval heads of each (task, length), pooled over its depths and samples, in grid order
  std::vector<std::pair<std::string, int64_t>> pairs;
  std::map<std::pair<std::string, int64_t>, std::vector<RetrievalHead>> heads;
  for_each_needle_cell(*tok, o, [&](const std::vector<NeedleItem>& items) {
    NeedleCell cell;
    cell.task = items.front().task;
    cell.length = items.front().length;
    cell.depth = items.front().depth;
    double score_sum = 0;
    for (const NeedleItem& it : items) {
      GenerateOptions go;
      go.max_new_tokens = it.max_new_tokens;
      go.stop_token = tok->eos();
      go.train_len = o.train_len;
      go.inference = o.inference;
      const Generation gen = generate(m, it.example.prompt, go);
      const std::string out = tok->decode(gen.tokens);
      const double sc = data::needle_score(out, it.example.answers);
      if (o.needles.retrieval_heads) {
        const std::pair<std::string, int64_t> key{it.task, it.length};
        if (!heads.count(key)) pairs.push_back(key);
        probe_needle_example(m, it.task, it.length, it.example, gen.tokens, gen.capacity,
                             o.train_len > 0 ? o.train_len : m.cfg.train_len, o.inference, heads[key]);
      }
      score_sum += sc;
      cell.correct += sc == 1.0;
      ++cell.samples;
      if (it.sample == 0)
        rep.samples.push_back({it.task, it.length, static_cast<int64_t>(it.example.prompt.size()), it.depth,
                               it.example.answers, out});
      if (o.needles.per_example)
        rep.results.push_back({it.task, it.length, it.sample, it.depth, it.example.answers, out, gen.tokens, sc});
    }
    cell.score = score_sum / std::max<int64_t>(1, cell.samples);
    rep.cells.push_back(cell);
  }, rep.skipped);
  for (const auto& key : pairs) rep.retrieval.insert(rep.retrieval.end(), heads[key].begin(), heads[key].end());
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
  FileSet files{{"needles.csv", csv.str()},
                {"needles.json", j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"}};
  if (!r.results.empty()) {
    // one line per example, keyed as needle_lm_eval_files keys its rows (task, length, depth, sample)
    std::string lines;
    for (const auto& e : r.results)
      lines += nlohmann::json{{"task", e.task}, {"length", e.length}, {"depth", e.depth}, {"sample", e.sample},
                              {"outputs", e.answers}, {"output", e.output}, {"output_tokens", e.output_tokens}, {"score", e.score},
                              {"correct", e.score == 1.0}}
                   .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    files.emplace_back("needles_examples.jsonl", lines);
  }
  return files;
}

void write_needles(const NeedleReport& r, const std::string& dir) {
  const FileSet files = needle_files(r);
  if (!files.empty()) write_files_atomic(dir, files);
}

}  // namespace hz::eval
