// eval/lm_eval_export: the needle grid as lm-eval-harness tasks holds the very examples
// evaluate_needles answers (keys, answers, prompt, budget: greedy decoding of a row's input within
// its max_gen_toks gives the tokens horizon eval generated), and refuses an export with no example.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "eval/generate.h"
#include "eval/lm_eval_export.h"
#include "eval/needles.h"
#include "tests/eval/small_model.h"

using namespace hz;
using namespace hz::eval;

namespace {


EvalOptions grid() {
  EvalOptions o;
  o.train_len = 16;
  o.lengths = {120, 400};
  o.needles.tasks = {"passkey", "niah_multikey"};  // the earlier name: rows under niah_multikey_1
  o.needles.samples = 2;
  o.needles.depths = {0.0, 1.0};
  o.needles.format = data::NeedleFormat::Short;
  o.needles.per_example = true;
  return o;
}

const std::string& file(const FileSet& files, const std::string& name) {
  for (const auto& [n, text] : files)
    if (n == name) return text;
  throw std::runtime_error("no file " + name);
}

std::vector<nlohmann::json> rows(const std::string& jsonl) {
  std::vector<nlohmann::json> out;
  std::istringstream in(jsonl);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace

TEST(NeedleLmEval, RowsAreTheExamplesHorizonEvalAnswers) {
  nn::Transformer m(hzt::small_model(), 5);
  const EvalOptions o = grid();
  const NeedleReport r = evaluate_needles(m, o);
  const LmEvalExport ex = needle_lm_eval_files(o);
  // passkey: 2 lengths x 2 depths x 2; multi-key (4 needles) does not fit 120 byte tokens
  ASSERT_EQ(r.results.size(), 12u);
  EXPECT_EQ(ex.examples, 12);
  EXPECT_EQ(ex.tasks, (std::vector<std::string>{"horizon_passkey", "horizon_niah_multikey_1"}));
  EXPECT_EQ(ex.skipped, r.skipped);
  std::vector<nlohmann::json> all = rows(file(ex.files, "horizon_passkey.jsonl"));
  for (auto& row : rows(file(ex.files, "horizon_niah_multikey_1.jsonl"))) all.push_back(row);
  ASSERT_EQ(all.size(), r.results.size());
  const auto tok = data::make_tokenizer(o.tokenizer);
  std::map<std::string, int64_t> most;  // task -> its YAML's max_gen_toks
  for (size_t i = 0; i < all.size(); ++i) {
    const nlohmann::json& row = all[i];
    const NeedleResult& e = r.results[i];
    SCOPED_TRACE(row.dump());
    EXPECT_EQ(row.at("index").get<size_t>(), i);
    EXPECT_EQ(row.at("task").get<std::string>(), e.task);
    EXPECT_EQ(row.at("length").get<int64_t>(), e.length);
    EXPECT_EQ(row.at("depth").get<double>(), e.depth);
    EXPECT_EQ(row.at("sample").get<int64_t>(), e.sample);
    EXPECT_EQ(row.at("outputs").get<std::vector<std::string>>(), e.answers);
    const std::string input = row.at("input").get<std::string>(), answer = row.at("answer").get<std::string>();
    const int64_t budget = row.at("max_gen_toks").get<int64_t>();
    EXPECT_EQ(budget, static_cast<int64_t>(tok->encode(answer).size()) + 4);
    const std::vector<int32_t> prompt = tok->encode(input);
    EXPECT_EQ(row.at("input_tokens").get<int64_t>(), static_cast<int64_t>(prompt.size()));
    EXPECT_LE(static_cast<int64_t>(prompt.size()) + budget, e.length);
    EXPECT_DOUBLE_EQ(data::needle_score(answer, e.answers), 1.0);
    // the row's prompt and budget are the ones horizon eval decoded
    GenerateOptions go;
    go.max_new_tokens = budget;
    go.stop_token = tok->eos();
    go.train_len = o.train_len;
    EXPECT_EQ(generate(m, prompt, go).tokens, e.output_tokens);
    most[e.task] = std::max(most[e.task], budget);
  }
  for (const auto& [task, budget] : most) {
    const std::string y = file(ex.files, "horizon_" + task + ".yaml");
    EXPECT_NE(y.find("task: horizon_" + task + "\n"), std::string::npos) << y;
    EXPECT_NE(y.find("data_file: \"horizon_" + task + ".jsonl\"\n"), std::string::npos) << y;
    EXPECT_NE(y.find("  until: []\n"), std::string::npos) << y;  // only EOS stops, as horizon eval
    EXPECT_NE(y.find("  max_gen_toks: " + std::to_string(budget) + "\n"), std::string::npos) << y;
  }
  const std::string group = file(ex.files, "horizon_needles.yaml");
  EXPECT_NE(group.find("  - horizon_passkey\n  - horizon_niah_multikey_1\n"), std::string::npos) << group;
  // the Python the YAMLs name is the source file, compiled in
  std::ifstream py(std::string(HZ_SOURCE_DIR) + "/eval/lm_eval/horizon_needles.py");
  std::stringstream src;
  src << py.rdbuf();
  EXPECT_EQ(file(ex.files, "horizon_needles.py"), src.str());
  // horizon eval's per-example file: one line per example, only when asked for
  const FileSet written = needle_files(r);
  const std::vector<nlohmann::json> lines = rows(file(written, "needles_examples.jsonl"));
  ASSERT_EQ(lines.size(), r.results.size());
  EXPECT_EQ(lines[3].at("output_tokens").get<std::vector<int32_t>>(), r.results[3].output_tokens);
  EXPECT_EQ(lines[3].at("correct").get<bool>(), r.results[3].score == 1.0);
  EvalOptions quiet = o;
  quiet.needles.per_example = false;
  const NeedleReport q = evaluate_needles(m, quiet);
  EXPECT_TRUE(q.results.empty());
  for (const auto& [name, text] : needle_files(q)) EXPECT_NE(name, "needles_examples.jsonl");
}

TEST(NeedleLmEval, RefusesAnExportWithoutExamples) {
  EvalOptions o = grid();
  o.needles.tasks.clear();
  EXPECT_THROW(needle_lm_eval_files(o), ValueError);
  o = grid();
  o.needles.tasks = {"niah_multikey_1"};
  o.lengths = {120};  // four needles do not fit
  try {
    needle_lm_eval_files(o);
    FAIL() << "exported no example without a word";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("no needle example fits the lengths 120"), std::string::npos) << e.what();
  }
}
