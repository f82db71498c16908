// Horizon data tests: the packed, shuffled, rank-sharded, resumable loader and eval batches.
//
// The test shard holds unique token ids (1000 + global token index) so every chunk is identified by
// its contents; the expected stream (documents joined by EOS) is rebuilt here independently.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/loader.h"
#include "data/shard.h"
#include "tests/data/data_test_util.h"

namespace {

using hz::data::Batch;
using hz::data::Loader;
using hz::data::LoaderCursor;

constexpr int32_t kEos = 7;

struct Fixture {
  hzdt::TempDir dir;
  std::shared_ptr<const hz::data::Shard> shard;
  std::vector<int64_t> stream;  // doc0, EOS, doc1, EOS, ...

  explicit Fixture(const std::vector<int>& lengths) {
    std::vector<std::vector<int32_t>> docs;
    int32_t next = 1000;
    for (int len : lengths) {
      std::vector<int32_t> d;
      for (int i = 0; i < len; ++i) d.push_back(next++);
      for (int32_t t : d) stream.push_back(t);
      stream.push_back(kEos);
      docs.push_back(d);
    }
    hz::data::write_shard(dir.file("s.shard"), docs);
    shard = hz::data::Shard::open(dir.file("s.shard"));
  }
  int64_t n_chunks(int64_t T) const { return (static_cast<int64_t>(stream.size()) - 1) / T; }
};

// Lengths summing with EOS to a stream of 400 tokens: 22 documents (one empty).
const std::vector<int> kLengths{13, 0, 29, 5, 40, 1, 17, 33, 8, 21, 2, 19, 26, 11, 30, 4, 23, 9, 37, 15, 12, 23};

std::vector<int64_t> row(const hz::Tensor& t, int64_t b) {
  const int64_t T = t.size(1);
  const int64_t* p = t.data<int64_t>() + b * T;
  return std::vector<int64_t>(p, p + T);
}

// The chunk index whose inputs/targets this row of the batch holds (-1 when none matches).
int64_t chunk_of(const Fixture& f, const Batch& batch, int64_t b) {
  const int64_t T = batch.tokens.size(1);
  const auto in = row(batch.tokens, b), tg = row(batch.targets, b);
  for (int64_t c = 0; c < f.n_chunks(T); ++c) {
    if (std::equal(in.begin(), in.end(), f.stream.begin() + c * T) &&
        std::equal(tg.begin(), tg.end(), f.stream.begin() + c * T + 1))
      return c;
  }
  return -1;
}

std::vector<int64_t> chunks_of(const Fixture& f, const Batch& batch) {
  std::vector<int64_t> out;
  for (int64_t b = 0; b < batch.tokens.size(0); ++b) out.push_back(chunk_of(f, batch, b));
  return out;
}

bool same_batch(const Batch& a, const Batch& b) {
  return a.tokens.to_vector() == b.tokens.to_vector() && a.targets.to_vector() == b.targets.to_vector() &&
         a.weights.to_vector() == b.weights.to_vector() && a.cu_seqlens == b.cu_seqlens;
}

TEST(Loader, StreamSizeOfTheFixture) {
  Fixture f(kLengths);
  EXPECT_EQ(f.stream.size(), 400u);
  EXPECT_EQ(f.shard->n_docs(), 22);
}

TEST(Loader, TargetsAreInputsShiftedByOneAndEosSeparatesDocuments) {
  Fixture f(kLengths);
  const int64_t T = 16, B = 3;
  Loader ld(f.shard, T, B, /*seed=*/1, 0, 1, kEos, /*shuffle=*/false);
  EXPECT_EQ(ld.total_chunks(), (400 - 1) / 16);
  for (int step = 0; step < 4; ++step) {
    const Batch b = ld.next();
    ASSERT_EQ(b.tokens.shape(), (hz::Shape{B, T}));
    ASSERT_EQ(b.targets.shape(), (hz::Shape{B, T}));
    ASSERT_EQ(b.weights.shape(), (hz::Shape{B, T}));
    EXPECT_EQ(b.tokens.dtype(), hz::DType::I64);
    EXPECT_EQ(b.targets.dtype(), hz::DType::I64);
    EXPECT_EQ(b.weights.dtype(), hz::DType::F32);
    for (double w : b.weights.to_vector()) EXPECT_EQ(w, 1.0);
    for (int64_t r = 0; r < B; ++r) {
      const auto in = row(b.tokens, r), tg = row(b.targets, r);
      for (int64_t t = 0; t + 1 < T; ++t) EXPECT_EQ(tg[t], in[t + 1]);
      // unshuffled: chunk step * B + r, read from the independently built stream
      const int64_t c = step * B + r;
      EXPECT_EQ(chunk_of(f, b, r), c);
      for (int64_t t = 0; t < T; ++t) {
        const int64_t want = f.stream[static_cast<size_t>(c * T + t)];
        EXPECT_EQ(in[t], want);
      }
    }
  }
  // documents 0 (13 tokens) and 1 (empty): stream positions 13 and 14 are both EOS
  EXPECT_EQ(f.stream[13], kEos);
  EXPECT_EQ(f.stream[14], kEos);
  Loader seq(f.shard, 16, 1, 1, 0, 1, kEos, false);
  const auto in0 = row(seq.next().tokens, 0);
  EXPECT_EQ(in0[12], 1012);
  EXPECT_EQ(in0[13], kEos);
  EXPECT_EQ(in0[14], kEos);
  EXPECT_EQ(in0[15], 1013);  // document 2 starts right after
}

// The documents of a batch (cumulative lengths over B T) cut exactly after each EOS: a document is
// its tokens and its EOS (the empty document is its EOS alone), and every sequence end is a cut.
TEST(Loader, DocumentBoundariesAreTheEosCuts) {
  Fixture f(kLengths);
  for (int64_t T : {int64_t(7), int64_t(16), int64_t(64)}) {
    Loader ld(f.shard, T, 3, /*seed=*/5, 0, 1, kEos);
    for (int step = 0; step < 6; ++step) {
      const Batch b = ld.next();
      std::vector<int64_t> want{0};
      for (int64_t r = 0; r < 3; ++r) {
        const auto in = row(b.tokens, r);
        for (int64_t t = 1; t < T; ++t)
          if (in[t - 1] == kEos) want.push_back(r * T + t);
        want.push_back((r + 1) * T);
      }
      EXPECT_EQ(b.cu_seqlens, want) << "T " << T << " step " << step;
    }
  }
  // eval batches carry them too
  for (const Batch& b : eval_batches(*f.shard, 16, 2, 3, kEos)) {
    ASSERT_GE(b.cu_seqlens.size(), 3u);
    EXPECT_EQ(b.cu_seqlens.back(), 32);
  }
}

TEST(Loader, DeterministicForASeedAndShuffledByIt) {
  Fixture f(kLengths);
  Loader a(f.shard, 10, 4, 42, 0, 1, kEos), b(f.shard, 10, 4, 42, 0, 1, kEos), c(f.shard, 10, 4, 43, 0, 1, kEos);
  bool any_diff = false;
  for (int i = 0; i < 12; ++i) {  // crosses epochs (39 chunks, 4 per batch)
    const Batch x = a.next(), y = b.next(), z = c.next();
    EXPECT_TRUE(same_batch(x, y)) << i;
    any_diff |= !same_batch(x, z);
    for (int64_t ch : chunks_of(f, x)) EXPECT_GE(ch, 0);
  }
  EXPECT_TRUE(any_diff);
  // the shuffle is a permutation of all chunks, not the identity
  const auto e0 = a.rank_chunks(0);
  std::vector<int64_t> sorted = e0, iota(e0.size());
  std::sort(sorted.begin(), sorted.end());
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(sorted, iota);
  EXPECT_NE(e0, iota);
}

TEST(Loader, RanksSeeDisjointChunksWhoseUnionIsTheSingleRankEpoch) {
  Fixture f(kLengths);
  const int64_t T = 9, B = 2;  // 399 / 9 = 44 chunks: 22 per rank
  Loader one(f.shard, T, B, 5, 0, 1, kEos);
  Loader r0(f.shard, T, B, 5, 0, 2, kEos), r1(f.shard, T, B, 5, 1, 2, kEos);
  ASSERT_EQ(one.total_chunks(), 44);
  ASSERT_EQ(r0.chunks_per_epoch(), 22);
  ASSERT_EQ(r1.chunks_per_epoch(), 22);
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    std::vector<int64_t> s0, s1, s_one;
    for (int i = 0; i < 11; ++i) {  // one epoch each: 22 / B batches on the ranks, 44 / B on one
      for (int64_t c : chunks_of(f, r0.next())) s0.push_back(c);
      for (int64_t c : chunks_of(f, r1.next())) s1.push_back(c);
      for (int64_t c : chunks_of(f, one.next())) s_one.push_back(c);
      for (int64_t c : chunks_of(f, one.next())) s_one.push_back(c);
    }
    std::set<int64_t> a(s0.begin(), s0.end()), b(s1.begin(), s1.end()), u;
    EXPECT_EQ(a.size(), 22u);
    EXPECT_EQ(b.size(), 22u);
    for (int64_t c : a) EXPECT_EQ(b.count(c), 0u) << "chunk " << c << " on both ranks";
    u = a;
    u.insert(b.begin(), b.end());
    EXPECT_EQ(u, std::set<int64_t>(s_one.begin(), s_one.end())) << "epoch " << epoch;
    EXPECT_EQ(u.size(), 44u);
    // interleaving: rank r takes permuted positions r, r + 2, ...
    for (size_t k = 0; k < s0.size(); ++k) {
      EXPECT_EQ(s0[k], s_one[2 * k]);
      EXPECT_EQ(s1[k], s_one[2 * k + 1]);
    }
    EXPECT_EQ(r0.cursor().epoch, epoch + 1);
    EXPECT_EQ(r0.cursor().index, 0);
  }
}

TEST(Loader, UnevenChunkCountDropsTheTailSoRanksMatch) {
  Fixture f(kLengths);
  const int64_t T = 10;  // 39 chunks over 3 ranks: 13 each; over 2 ranks: 19 each, one dropped
  for (int64_t world : {2, 3}) {
    std::set<int64_t> seen;
    const int64_t per = 39 / world;
    for (int64_t r = 0; r < world; ++r) {
      Loader ld(f.shard, T, 1, 11, r, world, kEos);
      EXPECT_EQ(ld.chunks_per_epoch(), per);
      for (int64_t i = 0; i < per; ++i) {
        const int64_t c = chunk_of(f, ld.next(), 0);
        EXPECT_TRUE(seen.insert(c).second) << "chunk " << c << " twice";
      }
    }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), per * world);
  }
}

TEST(Loader, CursorRestoreContinuesIdentically) {
  Fixture f(kLengths);
  // 399 / 12 = 33 chunks, 16 per rank of 2: 5 + 3 batches of 3 cross an epoch boundary
  Loader ld(f.shard, 12, 3, 77, 1, 2, kEos);
  for (int i = 0; i < 5; ++i) ld.next();
  const LoaderCursor saved = ld.cursor();
  EXPECT_EQ(saved.epoch, 0);
  EXPECT_EQ(saved.index, 15);
  std::vector<Batch> first;
  for (int i = 0; i < 3; ++i) first.push_back(ld.next());
  EXPECT_EQ(ld.cursor().epoch, 1);
  ld.restore(saved);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(same_batch(ld.next(), first[i])) << i;
  // a fresh loader restored from the cursor does the same (the cursor is the whole state)
  Loader fresh(f.shard, 12, 3, 77, 1, 2, kEos);
  fresh.restore(saved);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(same_batch(fresh.next(), first[i])) << i;
  EXPECT_EQ(fresh.cursor().epoch, ld.cursor().epoch);
  EXPECT_EQ(fresh.cursor().index, ld.cursor().index);
  // cursors that do not fit are refused
  EXPECT_THROW(fresh.restore({0, 17}), hz::ValueError);
  EXPECT_THROW(fresh.restore({-1, 0}), hz::ValueError);
}

TEST(Loader, EpochsReshuffle) {
  Fixture f(kLengths);
  Loader ld(f.shard, 8, 7, 3, 0, 1, kEos);  // 399 / 8 = 49 chunks = 7 batches of 7 per epoch
  ASSERT_EQ(ld.chunks_per_epoch(), 49);
  std::vector<int64_t> e0, e1;
  for (int i = 0; i < 7; ++i)
    for (int64_t c : chunks_of(f, ld.next())) e0.push_back(c);
  EXPECT_EQ(ld.cursor().epoch, 1);
  for (int i = 0; i < 7; ++i)
    for (int64_t c : chunks_of(f, ld.next())) e1.push_back(c);
  EXPECT_NE(e0, e1);  // another order...
  std::vector<int64_t> s0 = e0, s1 = e1;
  std::sort(s0.begin(), s0.end());
  std::sort(s1.begin(), s1.end());
  EXPECT_EQ(s0, s1);  // ...of the same chunks, each once
  EXPECT_EQ(std::set<int64_t>(e0.begin(), e0.end()).size(), 49u);
  EXPECT_EQ(e0, ld.rank_chunks(0));
  EXPECT_EQ(e1, ld.rank_chunks(1));
  // without shuffle every epoch is 0, 1, 2, ...
  Loader plain(f.shard, 8, 7, 3, 0, 1, kEos, false);
  std::vector<int64_t> iota(49);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(plain.rank_chunks(0), iota);
  EXPECT_EQ(plain.rank_chunks(5), iota);
}

TEST(Loader, TooSmallShardAndBadArgumentsAreRefused) {
  Fixture f({10, 10});  // stream 22: 21 / 5 = 4 chunks
  const std::string msg = hzdt::error_message<hz::ValueError>([&] { Loader(f.shard, 5, 3, 1, 0, 2, kEos); });
  EXPECT_NE(msg.find("too small"), std::string::npos) << msg;
  EXPECT_NE(msg.find(f.shard->path()), std::string::npos) << msg;
  EXPECT_NO_THROW(Loader(f.shard, 5, 2, 1, 1, 2, kEos));
  EXPECT_THROW(Loader(f.shard, 0, 1, 1), hz::ValueError);
  EXPECT_THROW(Loader(f.shard, 5, 0, 1), hz::ValueError);
  EXPECT_THROW(Loader(f.shard, 5, 1, 1, 2, 2), hz::ValueError);
  EXPECT_THROW(Loader(nullptr, 5, 1, 1), hz::ValueError);
}

TEST(EvalBatches, SequentialLastPartialDroppedAndCapped) {
  Fixture f(kLengths);
  const int64_t T = 16, B = 4;  // 24 chunks -> 6 batches
  const auto all = hz::data::eval_batches(*f.shard, T, B, 0, kEos);
  ASSERT_EQ(all.size(), 6u);
  for (size_t i = 0; i < all.size(); ++i) {
    std::vector<int64_t> want(B);
    std::iota(want.begin(), want.end(), static_cast<int64_t>(i) * B);
    EXPECT_EQ(chunks_of(f, all[i]), want) << i;
  }
  EXPECT_EQ(hz::data::eval_batches(*f.shard, T, 5, -1, kEos).size(), 4u);  // 24 / 5, partial dropped
  const auto two = hz::data::eval_batches(*f.shard, T, B, 2, kEos);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_TRUE(same_batch(two[1], all[1]));
  EXPECT_THROW(hz::data::eval_batches(*f.shard, 200, 3, 0, kEos), hz::ValueError);
}

}  // namespace
