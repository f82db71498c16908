#include "eval/lm_eval_export.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "data/needles.h"
#include "eval/needles.h"

namespace hz::eval {

extern const char* const kLmEvalNeedlesPy;  // eval/lm_eval/horizon_needles.py (scripts/cmake/embed_text.cmake)

namespace {

std::string quoted(const std::string& s) {  // a JSON string is a YAML double-quoted scalar
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

struct TaskRows {
  std::string lines;
  int64_t rows = 0, max_gen_toks = 0;
};

std::string task_yaml(const std::string& needle_task, const std::string& name, const std::string& data_file,
                      const TaskRows& t) {
  std::string y = fmt::format(
      "# Horizon's needle task {} as horizon eval answers it ({} examples; written by horizon eval\n"
      "# --export-lm-eval): greedy decoding that stops only at EOS, at most each row's max_gen_toks new\n"
      "# tokens (NeedleTask in horizon_needles.py), scored by exact containment of the outputs.\n"
      "task: {}\n"
      "class: !function horizon_needles.NeedleTask\n"
      "dataset_path: \"\"\n"
      "dataset_name: \"\"\n"
      "custom_dataset: !function horizon_needles.dataset\n"
      "dataset_kwargs:\n"
      "  data_file: {}\n"
      "output_type: generate_until\n"
      "test_split: test\n"
      "doc_to_text: input\n"
      "doc_to_target: answer\n"
      "target_delimiter: \"\"\n"
      "generation_kwargs:\n"
      "  until: []\n"
      "  do_sample: false\n"
      "  temperature: 0.0\n"
      "  max_gen_toks: {}\n"
      "process_results: !function horizon_needles.process_results\n"
      "metric_list:\n",
      needle_task, t.rows, name, quoted(data_file), t.max_gen_toks);
  for (const char* m : {"acc", "score"})
    y += fmt::format("  - metric: {}\n    aggregation: mean\n    higher_is_better: true\n", m);
  y += "metadata:\n  version: 1.0\n";
  return y;
}

}  // namespace

LmEvalExport needle_lm_eval_files(const EvalOptions& o) {
  HZ_CHECK(!o.needles.tasks.empty(), ValueError,
           "eval.needle_tasks is empty: no needle task to export (e.g. eval.needle_tasks=[niah_single_2])");
  const auto tok = data::make_tokenizer(o.tokenizer);
  LmEvalExport out;
  std::map<std::string, TaskRows> by_task;  // needle task -> its rows
  std::vector<std::string> order;
  for_each_needle_cell(*tok, o, [&](const std::vector<NeedleItem>& items) {
    for (const NeedleItem& it : items) {
      if (!by_task.count(it.task)) order.push_back(it.task);
      TaskRows& t = by_task[it.task];
      const nlohmann::json row{{"index", out.examples},
                               {"task", it.task},
                               {"length", it.length},
                               {"depth", it.depth},
                               {"sample", it.sample},
                               {"input", it.example.prompt_text},
                               {"outputs", it.example.answers},
                               {"answer", it.example.answer_text},
                               {"input_tokens", static_cast<int64_t>(it.example.prompt.size())},
                               {"max_gen_toks", it.max_new_tokens}};
      t.lines += row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
      t.max_gen_toks = std::max(t.max_gen_toks, it.max_new_tokens);
      ++t.rows;
      ++out.examples;
    }
  }, out.skipped);
  HZ_CHECK(out.examples > 0, ValueError, "no needle example fits the lengths ", fmt::format("{}", fmt::join(o.lengths, ", ")),
           ": ", out.skipped.empty() ? std::string("none asked") : out.skipped.front());
  std::string group = fmt::format(
      "# Horizon's needle grid (horizon eval --export-lm-eval): every task's examples, accuracy pooled\n"
      "group: {}\ntask:\n", kLmEvalNeedleGroup);
  for (const std::string& task : order) {
    const std::string name = "horizon_" + task, data_file = name + ".jsonl";
    out.files.emplace_back(data_file, by_task[task].lines);
    out.files.emplace_back(name + ".yaml", task_yaml(task, name, data_file, by_task[task]));
    out.tasks.push_back(name);
    group += "  - " + name + "\n";
  }
  group += "aggregate_metric_list:\n";
  for (const char* m : {"acc", "score"})
    group += fmt::format("  - metric: {}\n    aggregation: mean\n    weight_by_size: true\n", m);
  group += "metadata:\n  version: 1.0\n";
  out.files.emplace_back(std::string(kLmEvalNeedleGroup) + ".yaml", group);
  out.files.emplace_back("horizon_needles.py", kLmEvalNeedlesPy);
  return out;
}

}  // namespace hz::eval
