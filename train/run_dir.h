// Horizon: a run directory <out_dir>/<run.name>/ and what the trainer writes into it:
//   config.yaml     the fully resolved recipe (rewritten on every start, resume included)
//   train.log       every progress line (also printed to stdout unless quiet)
//   metrics.jsonl   one JSON object per logged step and per evaluation
//   checkpoints/    step_<N>.h5, the last `keep_last` kept (train/checkpoint.h)
//   events.out.tfevents.*  TensorBoard event files (metrics.tensorboard): one per start, the
//                   numbers of metrics.jsonl at their steps and the recipe as text (io/tensorboard.h)
//   .lock           while a run trains in it: the holder's host and pid (RunLock below)
//   .eval.lock      while `horizon eval` (or a sweep's evaluation) writes its results in it
// Only rank 0 writes; on the other ranks every method is a no-op.
#pragma once
#include <fmt/core.h>

#include <fstream>
#include <memory>
#include <string>

#include "io/tensorboard.h"
#include "train/checkpoint.h"
#include "train/recipe.h"

namespace hz::train {

// One run per directory: <dir>/.lock, held with flock(2) for as long as the object lives and
// holding "host pid". A second run on the directory is refused (ValueError naming the holder);
// a lock file whose holder is gone (the kernel drops a flock with its process: killed, crashed)
// is taken over, and stale() says whose it was. Released (file removed) by the destructor, so
// also when a run ends with an error. `role` names other writers that need one holder at a time
// but may work beside a training run: "eval" locks <dir>/.eval.lock (evaluating a checkpoint while
// the run goes on training is allowed; two evaluations writing the same eval.json are not), and
// "sweep" a sweep's own directory.
// The lock cannot be created because the directory is not writable (read-only storage, no write
// permission): an evaluation goes on without writing; a run cannot.
struct ReadOnlyDirError : ValueError { using ValueError::ValueError; };

class RunLock {
 public:
  explicit RunLock(const std::string& dir, const std::string& role = "run");
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  const std::string& path() const { return path_; }
  // "host pid" of the holder whose stale lock was taken over ("" when the directory was free)
  const std::string& stale() const { return stale_; }

 private:
  std::string path_, stale_;
  int fd_ = -1;
};

class RunDir {
 public:
  // Creates the directories (lead only). Resuming (resumed_step > 0) appends to train.log and
  // metrics.jsonl, first dropping metrics records of steps after resumed_step (steps the resumed
  // run trains again: one record per step).
  // With metrics.tensorboard (and a build that has the writer) a new TensorBoard event file holds
  // the resolved recipe as text and, at a resume, a session start at resumed_step + 1; every
  // metrics record then goes there too.
  RunDir(const Recipe& r, bool lead, bool quiet, int64_t resumed_step);
  ~RunDir();

  const std::string& path() const { return dir_; }
  std::string checkpoint_dir() const { return dir_ + "/checkpoints"; }

  // One progress line: stdout (line-buffered by the CLI) and train.log.
  template <class... A>
  void log(const char* f, A&&... a) {
    if (!lead_) return;
    const std::string s = fmt::format(fmt::runtime(f), std::forward<A>(a)...);
    if (!quiet_) fmt::print("{}\n", s);
    log_ << s << "\n";
    log_.flush();
  }
  void metrics(const std::string& json_line);  // appends one line to metrics.jsonl (and its numbers to TensorBoard)
  // Writes checkpoints/step_<step>.h5 atomically and prunes to keep_last.
  void save(int64_t step, const CheckpointData& c, int64_t keep_last);

 private:
  std::string dir_;
  bool lead_, quiet_;
  std::ofstream log_, metrics_;
  std::unique_ptr<io::EventWriter> events_;
};

}  // namespace hz::train
