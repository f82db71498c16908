// Horizon data: corpus -> token shards.
//
// prepare_corpus() splits the documents into train and validation BY DOCUMENT (no document is cut),
// tokenizes them (in parallel over documents, data/tokenizer.h encode_batch: the shards do not
// depend on the thread count) and writes, under out_dir (created if needed):
//   train.shard, val.shard  token shards (data/shard.h), documents in corpus order
//   meta.json               tokenizer name, fingerprint, vocab size and specials, seed,
//                           val_fraction, and per split the shard file, document, token and text
//                           byte counts and (up to kMaxListedNames per split) the document names
// The split is a pure function of (number of documents, val_fraction, seed): document indices
// 0..n-1 are shuffled (Fisher-Yates, hz::Generator(seed, stream 0), data/sampling.h) and the first
// n_val = round(val_fraction * n) of the permutation are validation, where n_val is raised to 1
// when val_fraction > 0 and n >= 2, and capped at n - 1 so training keeps a document. With
// explicit validation documents (CorpusSpec::val_files) there is no split: those are validation.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/corpus.h"
#include "data/tokenizer.h"

namespace hz::data {

constexpr int64_t kMaxListedNames = 10000;  // meta.json lists document names up to this many per split

struct PrepareResult {
  std::string train_path, val_path;  // out_dir/train.shard, out_dir/val.shard
  int64_t train_docs = 0, val_docs = 0, train_tokens = 0, val_tokens = 0;
  int64_t train_bytes = 0, val_bytes = 0;  // UTF-8 text bytes tokenized (0 for pre-tokenized input)
  double seconds = 0;                      // wall time of reading + tokenizing + writing
  // text bytes per token over both splits (0 when the input was pre-tokenized)
  double bytes_per_token() const;
};

// Where prepare() is; called from the calling thread about once a second on large inputs.
struct PrepareProgress {
  std::string stage;  // "reading", "tokenizing", "writing"
  int64_t docs_done = 0, docs_total = 0, bytes_done = 0, bytes_total = 0;
  double seconds = 0;  // since the start
};
using ProgressFn = std::function<void(const PrepareProgress&)>;

// The document indices (ascending) that go to validation; the rest go to training.
std::vector<int64_t> split_validation_docs(int64_t n_docs, double val_fraction, uint64_t seed);

// Throws hz::ValueError for an empty corpus, val_fraction outside [0, 1) or an empty out_dir.
PrepareResult prepare_corpus(const std::vector<Document>& docs, const Tokenizer& tok,
                             const std::string& out_dir, double val_fraction, uint64_t seed,
                             const ProgressFn& progress = {});

// A corpus as a recipe describes it.
struct CorpusSpec {
  std::string source = "bible";          // bible | files | jsonl | tokens
  std::vector<std::string> files;        // globs (files, jsonl, tokens)
  std::vector<std::string> val_files;    // globs of validation documents, same kind ([]: split by val_fraction)
  std::string text_field = "text";       // jsonl
  std::string token_format = "auto";     // tokens: auto | llmc | nanogpt (data/token_files.h)
  double val_fraction = 0.05;
  uint64_t seed = 0;
};
// The corpus-reading sources prepare_source() accepts, in the order messages list them.
const std::vector<std::string>& corpus_sources();

// Reads the corpus (text: bible / files / jsonl, tokenized by `tok`; or token files, checked
// against tok.vocab_size() and cut into documents at tok.eos() / tok.bos()) and prepares shards
// as prepare_corpus() does. Throws hz::ValueError for an unknown source, files that do not
// exist or do not parse (file and line), ids outside the vocabulary, or an empty corpus.
PrepareResult prepare_source(const CorpusSpec& spec, const Tokenizer& tok, const std::string& out_dir,
                             const ProgressFn& progress = {});

}  // namespace hz::data
