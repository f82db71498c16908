#include "data/loader.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"
#include "data/sampling.h"

namespace hz::data {

namespace {

// stream_starts[d] = off[d] + d: where document d begins in the EOS-separated stream;
// stream_starts[n_docs] = n_tokens + n_docs = the stream length.
std::vector<int64_t> make_stream_starts(const Shard& s) {
  const auto& off = s.doc_offsets();
  std::vector<int64_t> st(off.size());
  for (size_t d = 0; d < off.size(); ++d) st[d] = off[d] + static_cast<int64_t>(d);
  return st;
}

int64_t count_chunks(int64_t stream_len, int64_t T) { return stream_len >= 1 ? (stream_len - 1) / T : 0; }

// Writes chunk c (T + 1 stream tokens) as inputs in[0, T) and targets tgt[0, T).
void fill_chunk(const Shard& s, const std::vector<int64_t>& st, int64_t c, int64_t T, int32_t eos,
                int64_t* in, int64_t* tgt) {
  const auto& off = s.doc_offsets();
  const int32_t* tok = s.tokens().data();
  const int64_t p0 = c * T;
  // the document holding stream position p0: the last d with st[d] <= p0
  int64_t d = static_cast<int64_t>(std::upper_bound(st.begin(), st.end(), p0) - st.begin()) - 1;
  int64_t local = p0 - st[d];
  for (int64_t k = 0; k <= T; ++k) {
    const int64_t len = off[d + 1] - off[d];
    int64_t v;
    if (local < len) {
      v = tok[off[d] + local];
      ++local;
    } else {  // local == len: the EOS after document d
      v = eos;
      ++d;
      local = 0;
    }
    if (k < T) in[k] = v;
    if (k > 0) tgt[k - 1] = v;
  }
}

Batch make_batch(const Shard& s, const std::vector<int64_t>& st, const std::vector<int64_t>& chunks,
                 int64_t T, int32_t eos) {
  const int64_t B = static_cast<int64_t>(chunks.size());
  Batch b;
  b.tokens = Tensor::empty({B, T}, DType::I64);
  b.targets = Tensor::empty({B, T}, DType::I64);
  b.weights = Tensor::ones({B, T}, DType::F32);
  int64_t* in = b.tokens.data<int64_t>();
  int64_t* tg = b.targets.data<int64_t>();
  b.cu_seqlens.push_back(0);
  for (int64_t i = 0; i < B; ++i) {
    fill_chunk(s, st, chunks[i], T, eos, in + i * T, tg + i * T);
    // the documents starting inside chunk c: stream starts in (c T, c T + T)
    const int64_t p0 = chunks[i] * T;
    for (auto it = std::upper_bound(st.begin(), st.end(), p0); it != st.end() && *it < p0 + T; ++it)
      b.cu_seqlens.push_back(i * T + (*it - p0));
    b.cu_seqlens.push_back((i + 1) * T);
  }
  return b;
}

}  // namespace

Loader::Loader(std::shared_ptr<const Shard> shard, int64_t seq_len, int64_t batch_size, uint64_t seed,
               int64_t rank, int64_t world, int32_t eos, bool shuffle)
    : shard_(std::move(shard)), T_(seq_len), B_(batch_size), seed_(seed), rank_(rank), world_(world),
      eos_(eos), shuffle_(shuffle) {
  HZ_CHECK(shard_ != nullptr, ValueError, "Loader: the shard is null; open one with data::Shard::open");
  HZ_CHECK(T_ >= 1, ValueError, "Loader: seq_len must be >= 1, got ", T_);
  HZ_CHECK(B_ >= 1, ValueError, "Loader: batch_size must be >= 1, got ", B_);
  HZ_CHECK(world_ >= 1, ValueError, "Loader: world size must be >= 1, got ", world_);
  HZ_CHECK(rank_ >= 0 && rank_ < world_, ValueError, "Loader: rank ", rank_, " is outside [0, ", world_, ")");
  HZ_CHECK(eos_ >= 0, ValueError, "Loader: eos id must be >= 0, got ", eos_);
  stream_starts_ = make_stream_starts(*shard_);
  const int64_t stream_len = stream_starts_.back();
  n_chunks_ = count_chunks(stream_len, T_);
  per_rank_ = n_chunks_ / world_;
  HZ_CHECK(per_rank_ >= B_, ValueError, "Loader: shard '", shard_->path(), "' is too small: ", shard_->n_tokens(),
           " tokens + ", shard_->n_docs(), " EOS give ", n_chunks_, " chunks of seq_len + 1 = ", T_ + 1,
           " tokens, i.e. ", per_rank_, " per rank for ", world_, " rank(s), but a batch needs ", B_,
           "; use a smaller seq_len or batch size, fewer ranks, or a larger corpus");
}

std::vector<int64_t> Loader::rank_chunks(int64_t epoch) const {
  HZ_CHECK(epoch >= 0, ValueError, "Loader: epoch must be >= 0, got ", epoch);
  std::vector<int64_t> perm(static_cast<size_t>(n_chunks_));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  if (shuffle_) {
    Generator g(seed_, static_cast<uint64_t>(epoch));
    shuffle_in_place(perm, g);
  }
  std::vector<int64_t> mine(static_cast<size_t>(per_rank_));
  for (int64_t k = 0; k < per_rank_; ++k) mine[static_cast<size_t>(k)] = perm[static_cast<size_t>(rank_ + k * world_)];
  return mine;
}

Batch Loader::next() {
  std::vector<int64_t> chunks;
  chunks.reserve(static_cast<size_t>(B_));
  for (int64_t i = 0; i < B_; ++i) {
    if (cursor_.index >= per_rank_) {
      ++cursor_.epoch;
      cursor_.index = 0;
    }
    if (cached_epoch_ != cursor_.epoch) {
      cached_chunks_ = rank_chunks(cursor_.epoch);
      cached_epoch_ = cursor_.epoch;
    }
    chunks.push_back(cached_chunks_[static_cast<size_t>(cursor_.index++)]);
  }
  if (cursor_.index >= per_rank_) {  // keep the cursor normalised: index < chunks_per_epoch()
    ++cursor_.epoch;
    cursor_.index = 0;
  }
  return make_batch(*shard_, stream_starts_, chunks, T_, eos_);
}

void Loader::restore(const LoaderCursor& c) {
  HZ_CHECK(c.epoch >= 0 && c.index >= 0 && c.index <= per_rank_, ValueError, "Loader: cannot restore cursor {epoch ",
           c.epoch, ", index ", c.index, "}: this loader has ", per_rank_,
           " chunks per epoch per rank; was the checkpoint made with another shard, seq_len or world size?");
  cursor_ = c;
  if (cursor_.index == per_rank_) {
    ++cursor_.epoch;
    cursor_.index = 0;
  }
}

std::vector<Batch> eval_batches(const Shard& shard, int64_t seq_len, int64_t batch_size, int64_t max_batches,
                                int32_t eos, int64_t first) {
  HZ_CHECK(seq_len >= 1, ValueError, "eval_batches: seq_len must be >= 1, got ", seq_len);
  HZ_CHECK(batch_size >= 1, ValueError, "eval_batches: batch_size must be >= 1, got ", batch_size);
  HZ_CHECK(eos >= 0, ValueError, "eval_batches: eos id must be >= 0, got ", eos);
  const std::vector<int64_t> st = make_stream_starts(shard);
  const int64_t n_chunks = count_chunks(st.back(), seq_len);
  int64_t n_batches = n_chunks / batch_size;
  HZ_CHECK(n_batches >= 1, ValueError, "eval_batches: shard '", shard.path(), "' (", shard.n_tokens(), " tokens, ",
           shard.n_docs(), " documents) gives ", n_chunks, " chunks of seq_len + 1 = ", seq_len + 1,
           " tokens, fewer than one batch of ", batch_size,
           "; use a smaller eval seq_len or batch size, or a larger validation split");
  HZ_CHECK(first >= 0 && first < n_batches, ValueError, "eval_batches: shard '", shard.path(), "' gives ", n_batches,
           " batches of ", batch_size, " x ", seq_len + 1, " tokens; none is left after passing over the first ", first);
  n_batches -= first;
  if (max_batches > 0) n_batches = std::min(n_batches, max_batches);
  std::vector<Batch> out;
  out.reserve(static_cast<size_t>(n_batches));
  std::vector<int64_t> chunks(static_cast<size_t>(batch_size));
  for (int64_t b = first; b < first + n_batches; ++b) {
    std::iota(chunks.begin(), chunks.end(), b * batch_size);
    out.push_back(make_batch(shard, st, chunks, seq_len, eos));
  }
  return out;
}

}  // namespace hz::data
