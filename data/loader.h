// Horizon data: the deterministic, resumable, rank-sharded token loader.
//
// Letters: B batch size, T sequence length (seq_len).
//
// Packing. The shard's documents form one token stream, each followed by EOS, in shard order:
//   stream = doc0, EOS, doc1, EOS, ..., doc_{n-1}, EOS        (length n_tokens + n_docs)
// Chunk c is stream[c*T, c*T + T + 1): T + 1 tokens, so consecutive chunks overlap by one token.
// inputs = chunk[0, T), targets = chunk[1, T + 1): targets[t] is the token that follows inputs[t].
// There are (stream_len - 1) / T chunks; the tail that does not fill a chunk is never used.
//
// Order. Epoch e permutes the chunk indices by a Fisher-Yates shuffle driven by
// hz::Generator(seed, /*stream=*/e) (data/sampling.h; shuffle = false: the identity). Rank r of
// `world` takes the permuted positions r, r + world, r + 2 world, ..., keeping the first
// chunks_per_epoch() = total_chunks / world of them so every rank has the same count (the tail of
// the permutation is dropped). A batch is the rank's next B chunks; a batch that runs past the end
// of an epoch continues at the start of the next (reshuffled) epoch.
//
// State. LoaderCursor {epoch, index} is the whole state: index = how many of this rank's chunks of
// `epoch` were consumed (always < chunks_per_epoch() after next()). restore(cursor) reproduces
// exactly the batches that followed the moment cursor() was taken, for the same shard, seq_len,
// batch size, seed, rank, world and shuffle flag.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "data/shard.h"

namespace hz::data {

struct Batch {
  Tensor tokens;   // (B, T) I64: inputs
  Tensor targets;  // (B, T) I64: targets[b, t] is the token after tokens[b, t]
  Tensor weights;  // (B, T) F32: loss weight of each target (all 1 for corpus batches)
  // The documents of the batch, as cumulative lengths over the flattened B T tokens (varlen
  // kernels' cu_seqlens): 0, the start of every document inside a sequence, every b T, B T. A
  // document is its tokens and the EOS that ends it, so the EOS predicts the next document's first
  // token from its own document only; a document cut by the end of a chunk continues as the first
  // document of the chunk that follows in the stream. Empty for batches without documents
  // (synthetic tasks): one per sequence. attention/documents.h turns it into the mask and positions.
  std::vector<int64_t> cu_seqlens;
};

struct LoaderCursor {
  int64_t epoch = 0;
  int64_t index = 0;
};

class Loader {
 public:
  // Throws hz::ValueError for bad sizes, rank outside [0, world), or a shard with fewer than
  // world * batch_size chunks (not one batch per rank).
  Loader(std::shared_ptr<const Shard> shard, int64_t seq_len, int64_t batch_size, uint64_t seed,
         int64_t rank = 0, int64_t world = 1, int32_t eos = 257, bool shuffle = true);

  Batch next();
  LoaderCursor cursor() const { return cursor_; }
  // Throws hz::ValueError when the cursor does not fit this loader (negative, or index above
  // chunks_per_epoch()).
  void restore(const LoaderCursor& c);

  int64_t chunks_per_epoch() const { return per_rank_; }  // per rank
  int64_t total_chunks() const { return n_chunks_; }       // all ranks, one epoch
  // This rank's chunk indices for `epoch`, in the order next() serves them.
  std::vector<int64_t> rank_chunks(int64_t epoch) const;
  int64_t seq_len() const { return T_; }
  int64_t batch_size() const { return B_; }

 private:
  std::shared_ptr<const Shard> shard_;
  int64_t T_, B_;
  uint64_t seed_;
  int64_t rank_, world_;
  int32_t eos_;
  bool shuffle_;
  int64_t n_chunks_ = 0, per_rank_ = 0;
  std::vector<int64_t> stream_starts_;  // stream position of each document's first token (+ end)
  LoaderCursor cursor_;
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> cached_chunks_;
};

// Validation batches: chunks 0, 1, 2, ... in order (packing as above, no shuffle, no ranks), B per
// batch, the last partial batch dropped; at most max_batches batches (<= 0: all), from batch `first`
// on (the earlier ones passed over). Throws hz::ValueError when the shard does not fill a single
// batch after the first `first`.
std::vector<Batch> eval_batches(const Shard& shard, int64_t seq_len, int64_t batch_size,
                                int64_t max_batches, int32_t eos = 257, int64_t first = 0);

}  // namespace hz::data
