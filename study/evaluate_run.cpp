#include "study/evaluate_run.h"

#include <cmath>
#include <map>
#include <optional>

#include "data/shard.h"
#include "eval/eval.h"
#include "eval/needles.h"
#include "eval/probe.h"
#include "io/tensorboard.h"
#include "train/data.h"
#include "train/run_dir.h"

namespace hz::study {

namespace {
// horizon eval's numbers in a TensorBoard event file of the run (at the checkpoint's step), apart
// from the in-run evaluations' "eval/..." tags: horizon_eval/<length>/{loss,ppl,last256_loss},
// passkey/<length>/accuracy, needles/<task>/<length>/accuracy (pooled over depths) and
// needles/<task>/effective_length (eval/needles.h: NoLiMa's definition).
void write_eval_events(const std::string& dir, int64_t step, const eval::EvalReport& rep,
                       const eval::NeedleReport& needles) {
  io::EventWriter w(dir, ".eval");
  for (const auto& l : rep.lengths) {
    const std::string t = "horizon_eval/" + std::to_string(l.length) + "/";
    w.scalar(t + "loss", l.loss, step);
    w.scalar(t + "ppl", l.ppl, step);
    w.scalar(t + "last256_loss", l.last256_loss, step);
  }
  std::map<int64_t, std::pair<int64_t, int64_t>> pk;  // length -> (correct, examples)
  for (const auto& c : rep.passkey) pk[c.length].first += c.correct, pk[c.length].second += c.examples;
  for (const auto& [L, ce] : pk)
    w.scalar("passkey/" + std::to_string(L) + "/accuracy", ce.second ? double(ce.first) / double(ce.second) : 0.0, step);
  std::map<std::string, std::map<int64_t, std::pair<int64_t, int64_t>>> nd;  // task -> length -> (correct, samples)
  for (const auto& c : needles.cells) nd[c.task][c.length].first += c.correct, nd[c.task][c.length].second += c.samples;
  for (const auto& [task, by_len] : nd)
    for (const auto& [L, cs] : by_len)
      w.scalar("needles/" + task + "/" + std::to_string(L) + "/accuracy",
               cs.second ? double(cs.first) / double(cs.second) : 0.0, step);
  for (const auto& [task, L] : eval::effective_lengths(needles))
    w.scalar("needles/" + task + "/effective_length", static_cast<double>(L), step);
  w.flush();
}
}  // namespace

std::string evaluate_run(LoadedRun& run, bool verbose, dist::Communicator* comm,
                         std::vector<eval::RetrievalHead>* retrieval) {
  const bool split = comm && comm->size() > 1, lead = !split || comm->rank() == 0;
  // One evaluation writes the run's results at a time. The lock is for writers: a run directory on
  // read-only storage (a published checkpoint) is evaluated all the same, its tables printed only.
  bool writable = lead;
  std::optional<train::RunLock> lock;
  if (lead) {
    try {
      lock.emplace(run.run_dir, "eval");
    } catch (const train::ReadOnlyDirError&) {
      writable = false;
    }
  }
  run.results_written = false;
  eval::EvalOptions eo = run.recipe.eval_options();
  if (split) {
    eo.context = comm;
    eo.context_exchange = run.recipe.parallel.context_exchange;
    if (!lead) eo.passkey_examples = 0, eo.needles.tasks.clear(), eo.probe_sequences = 0;  // rank 0's alone
  }
  const int64_t T = run.recipe.data.seq_len;
  eval::EvalReport rep;
  std::shared_ptr<const data::Shard> val;
  if (train::is_synthetic(run.recipe.data.source)) {
    HZ_CHECK(eo.passkey_examples > 0 || !eo.needles.tasks.empty() || !lead, ValueError, "the run trained on synthetic '",
             train::name(run.recipe.data.source), "' data, which has no held-out text: set eval.passkey_examples=N or "
             "eval.needle_tasks=[...] to measure retrieval");
    rep.passkey = eval::evaluate_passkey(*run.model, eo, &rep.passkey_retrieval);
  } else {
    val = data::Shard::open((split ? train::prepare_data(run.recipe, *comm, verbose) : train::prepare_data(run.recipe, verbose)).second);
    rep = eval::evaluate(*run.model, *val, eo);
    // a loss that is not a number is no result (a NaN loses every comparison: the length's best
    // stays at +inf): refuse instead of writing it
    for (size_t i = 0; i < rep.lengths.size(); ++i)
      eval::require_finite(rep.lengths[i].loss, run.checkpoint,
                           "the validation loss at length " +
                               std::to_string(i < eo.lengths.size() ? eo.lengths[i] : rep.lengths[i].length));
  }
  if (!lead) return "";
  // every result of this evaluation is one set, written when all are known: an interrupted
  // evaluation leaves the previous set whole (core/file.h)
  std::string out = eval::report_table(rep, T);
  eval::NeedleReport needles = eval::evaluate_needles(*run.model, eo);
  // the passkey grid's heads first, then the needle tasks' (one table and one file)
  needles.retrieval.insert(needles.retrieval.begin(), rep.passkey_retrieval.begin(), rep.passkey_retrieval.end());
  for (auto& h : needles.retrieval) h.step = run.step;
  FileSet files = eval::report_files(rep, T, eval::effective_lengths(needles));
  // the recipe this evaluation ran with (config.yaml and the overrides given to it: inference-time
  // fields such as freeze_scopes, rope_scaling, eval.*), which horizon report describes the run by
  files.emplace_back("eval_recipe.yaml", train::to_yaml(run.recipe));
  out += eval::needle_table(needles);
  for (auto& f : eval::needle_files(needles)) files.push_back(std::move(f));
  // the retrieval heads of the checkpoints evaluated before this one (horizon eval --all-checkpoints),
  // then this one's: one file over the steps
  if (retrieval) {
    retrieval->insert(retrieval->end(), needles.retrieval.begin(), needles.retrieval.end());
    out += eval::retrieval_table(needles.retrieval);
    for (auto& f : eval::retrieval_files(*retrieval)) files.push_back(std::move(f));
  } else {
    out += eval::retrieval_table(needles.retrieval);
    for (auto& f : eval::retrieval_files(needles.retrieval)) files.push_back(std::move(f));
  }
  if (eo.probe_sequences > 0 && val) {
    const auto probes = eval::position_probe(*run.model, *val, T, eo.probe_sequences, eo.seed, T);
    out += eval::probe_table(probes);
    for (auto& f : eval::probe_files(probes)) files.push_back(std::move(f));
  }
  if (writable) {
    write_files_atomic(run.run_dir, files, eval::result_file_names());  // and a stale result of another goes
    if (run.recipe.metrics.tensorboard && io::tensorboard_available())
      write_eval_events(run.run_dir, run.step, rep, needles);
  }
  run.results_written = writable;
  return out;
}

}  // namespace hz::study
