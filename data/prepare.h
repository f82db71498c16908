// Horizon data: corpus -> token shards.
//
// prepare_corpus() splits the documents into train and validation BY DOCUMENT (no document is cut),
// tokenizes them and writes, under out_dir (created if needed):
//   train.shard, val.shard  token shards (data/shard.h), documents in corpus order
//   meta.json               tokenizer name, vocab size and specials, seed, val_fraction, and per
//                           split the shard file, document and token counts and document names
// The split is a pure function of (number of documents, val_fraction, seed): document indices
// 0..n-1 are shuffled (Fisher-Yates, hz::Generator(seed, stream 0), data/sampling.h) and the first
// n_val = round(val_fraction * n) of the permutation are validation, where n_val is raised to 1
// when val_fraction > 0 and n >= 2, and capped at n - 1 so training keeps a document.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/corpus.h"
#include "data/tokenizer.h"

namespace hz::data {

struct PrepareResult {
  std::string train_path, val_path;  // out_dir/train.shard, out_dir/val.shard
  int64_t train_docs = 0, val_docs = 0, train_tokens = 0, val_tokens = 0;
};

// The document indices (ascending) that go to validation; the rest go to training.
std::vector<int64_t> split_validation_docs(int64_t n_docs, double val_fraction, uint64_t seed);

// Throws hz::ValueError for an empty corpus, val_fraction outside [0, 1) or an empty out_dir.
PrepareResult prepare_corpus(const std::vector<Document>& docs, const Tokenizer& tok,
                             const std::string& out_dir, double val_fraction, uint64_t seed);

}  // namespace hz::data
