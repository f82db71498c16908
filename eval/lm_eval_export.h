// Horizon: the needle grid as an offline lm-eval-harness task folder in RULER's format (lm-eval's
// tasks/ruler: rows with input, outputs, length). For each needle task a JSON-lines dataset of the
// examples evaluate_needles answers (for_each_needle_cell: the same seeds, depths, lengths,
// tokenizer) and a generate_until task YAML (greedy, stopping at EOS, each example's own budget of
// new tokens), scored by exact containment as horizon eval scores; a group over them; and the Python
// the YAMLs name (eval/lm_eval/horizon_needles.py, compiled in). docs/needles.md shows a run.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/file.h"
#include "eval/options.h"

namespace hz::eval {

constexpr const char* kLmEvalNeedleGroup = "horizon_needles";

struct LmEvalExport {
  FileSet files;                      // written into one folder (write_files_atomic)
  std::vector<std::string> tasks;     // lm-eval task names: horizon_<needle task>
  int64_t examples = 0;
  std::vector<std::string> skipped;   // (task, length) pairs too short for the task, with why
};

// Throws ValueError when o asks for no needle task, or when no (task, length) pair fits.
LmEvalExport needle_lm_eval_files(const EvalOptions& o);

}  // namespace hz::eval
