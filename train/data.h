// Horizon: a run's data. The token shards of the recipe's data section, prepared on first use into
// a cache directory named after the source, the tokenizer, the corpus fields, the seed and the
// split (so changing any of them prepares new shards), and the training stream of one rank over
// them (or over a synthetic task) with the cursor a checkpoint saves.
#pragma once
#include <cmath>
#include <memory>
#include <string>
#include <utility>

#include "data/loader.h"
#include "data/shard.h"
#include "data/synthetic.h"
#include "distributed/communicator.h"
#include "train/recipe.h"

namespace hz::train {

// Token shards for the recipe's data section (prepared on first use); returns {train, val} paths.
std::pair<std::string, std::string> prepare_data(const Recipe& r, bool verbose);
// The same on every rank of comm: rank 0 prepares (verbose there), the others wait, then read.
std::pair<std::string, std::string> prepare_data(const Recipe& r, dist::Communicator& comm, bool verbose);

// Training data behind one interface: shards (bible / files) or synthetic retrieval.
// A corpus run with a retrieval mixture (data.mix_task, data.mix_share s) also holds `mix`: micro-
// batch m is the task's when floor((m + 1) s) > floor(m s), so the task's batches are spread evenly
// and m alone says which source each batch came from and where the task's stream is (floor(m s)
// batches in); the corpus cursor, saved in checkpoints as before, moves on the corpus's batches only.
struct TrainData {
  std::unique_ptr<data::Loader> shard_loader;
  std::unique_ptr<data::SyntheticLoader> synth;
  std::shared_ptr<const data::Shard> val;
  std::unique_ptr<data::SyntheticLoader> mix;
  double mix_share = 0;
  int64_t mix_batch = 0;  // examples per batch of the task
  int64_t micro = 0;      // micro-batches drawn so far
  bool mixed(int64_t m) const {
    return mix && std::floor(static_cast<double>(m + 1) * mix_share) > std::floor(static_cast<double>(m) * mix_share);
  }
  data::Batch next() {
    if (shard_loader && mix) return mixed(micro++) ? mix->next() : shard_loader->next();
    return shard_loader ? shard_loader->next() : synth->next();
  }
  // After a restore: the run had drawn m micro-batches (steps x train.grad_accum); puts the
  // mixture's task stream where those left it.
  void set_micro(int64_t m) {
    micro = m;
    if (mix)
      mix->restore({0, static_cast<int64_t>(std::floor(static_cast<double>(m) * mix_share)) * mix_batch});
  }
  data::LoaderCursor cursor() const { return shard_loader ? shard_loader->cursor() : synth->cursor(); }
  void restore(const data::LoaderCursor& c) {
    if (shard_loader) shard_loader->restore(c);
    else synth->restore(c);
  }
  // Resuming a cursor saved under `old_world` ranks (checkpoint.elastic): the shard loader goes on
  // from the same global position of the epoch's permutation, old_world x c.index chunks, rounded
  // up to a whole share of the new world (the next epoch when none is left); a synthetic stream,
  // the same on every rank, goes on at c.index.
  void restore_resharded(const data::LoaderCursor& c, int64_t old_world, int64_t world) {
    if (!shard_loader) return synth->restore(c);
    const int64_t consumed = old_world * c.index, index = (consumed + world - 1) / world;
    shard_loader->restore(index < shard_loader->chunks_per_epoch() ? data::LoaderCursor{c.epoch, index}
                                                                   : data::LoaderCursor{c.epoch + 1, 0});
  }
};

// The training data of this rank (data-parallel rank comm.rank() / parallel.context of
// comm.size() / parallel.context: the ranks of a context-parallel group read the same batches):
// the tokenizer's vocabulary is
// checked against model.vocab_size; a synthetic source generates its examples; otherwise rank 0
// prepares the shards (progress on the console when verbose), every rank waits for it, then reads
// its share of the training split through a deterministic loader and holds the validation split.
TrainData open_train_data(const Recipe& r, dist::Communicator& comm, bool verbose);

}  // namespace hz::train
