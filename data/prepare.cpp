#include "data/prepare.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file.h"
#include "core/rng.h"
#include "data/sampling.h"
#include "data/shard.h"
#include "data/token_files.h"

namespace hz::data {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// One split's documents, already tokenized.
struct Split {
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::string> names;
  int64_t tokens = 0, bytes = 0;
};

// Writes train/val shards and meta.json; fills the result's paths and counts.
PrepareResult write_splits(const Split& train, const Split& val, const Tokenizer& tok, const std::string& out_dir,
                           double val_fraction, uint64_t seed, const ProgressFn& progress, Clock::time_point t0) {
  PrepareResult r;
  r.train_docs = static_cast<int64_t>(train.ids.size());
  r.val_docs = static_cast<int64_t>(val.ids.size());
  r.train_tokens = train.tokens;
  r.val_tokens = val.tokens;
  r.train_bytes = train.bytes;
  r.val_bytes = val.bytes;
  if (progress) progress({"writing", r.train_docs + r.val_docs, r.train_docs + r.val_docs, 0, 0, since(t0)});
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  HZ_CHECK(!ec, Error, "cannot create output directory '", out_dir, "': ", ec.message());
  const std::filesystem::path dir(out_dir);
  r.train_path = (dir / "train.shard").string();
  r.val_path = (dir / "val.shard").string();
  write_shard(r.train_path, train.ids);
  write_shard(r.val_path, val.ids);

  using ojson = nlohmann::ordered_json;
  const auto split_json = [](const Split& s, const char* file) {
    ojson j;
    j["shard"] = file;
    j["docs"] = s.ids.size();
    j["tokens"] = s.tokens;
    j["text_bytes"] = s.bytes;
    if (static_cast<int64_t>(s.names.size()) <= kMaxListedNames) j["documents"] = s.names;
    else j["documents"] = nullptr;  // too many to list
    return j;
  };
  ojson meta;
  meta["format"] = "HZSHARD1";
  meta["tokenizer"] = tok.name();
  meta["tokenizer_fingerprint"] = tok.fingerprint();
  meta["vocab_size"] = tok.vocab_size();
  meta["bos"] = tok.bos();
  meta["eos"] = tok.eos();
  meta["pad"] = tok.pad();
  meta["seed"] = seed;
  meta["val_fraction"] = val_fraction;
  meta["train"] = split_json(train, "train.shard");
  meta["val"] = split_json(val, "val.shard");
  write_file_atomic((dir / "meta.json").string(), meta.dump(2) + "\n");
  r.seconds = since(t0);
  return r;
}

// Tokenizes text documents into a split (in parallel over documents).
Split tokenize_split(const std::vector<const Document*>& docs, const Tokenizer& tok, const ProgressFn& progress,
                     Clock::time_point t0, int64_t docs_before, int64_t docs_total, int64_t bytes_before,
                     int64_t bytes_total) {
  Split s;
  std::function<void(const EncodeProgress&)> on_progress;
  if (progress)
    on_progress = [&](const EncodeProgress& p) {
      progress({"tokenizing", docs_before + p.texts_done, docs_total, bytes_before + p.bytes_done, bytes_total, since(t0)});
    };
  try {
    s.ids = encode_batch(tok, static_cast<int64_t>(docs.size()),
                         [&](int64_t i) -> const std::string& { return docs[static_cast<size_t>(i)]->text; }, on_progress);
  } catch (const EncodeBatchError& e) {
    throw ValueError("document '" + docs[static_cast<size_t>(e.index)]->name + "': " + e.cause);
  }
  for (size_t i = 0; i < docs.size(); ++i) {
    s.names.push_back(docs[i]->name);
    s.tokens += static_cast<int64_t>(s.ids[i].size());
    s.bytes += static_cast<int64_t>(docs[i]->text.size());
  }
  return s;
}

PrepareResult prepare_text(const std::vector<Document>& docs, const std::vector<Document>* val_docs,
                           const Tokenizer& tok, const std::string& out_dir, double val_fraction, uint64_t seed,
                           const ProgressFn& progress, Clock::time_point t0) {
  HZ_CHECK(!docs.empty(), ValueError, "prepare_corpus: the corpus has no documents");
  HZ_CHECK(!out_dir.empty(), ValueError, "prepare_corpus: give an output directory");
  std::vector<const Document*> train, val;
  if (val_docs != nullptr) {
    for (const Document& d : docs) train.push_back(&d);
    for (const Document& d : *val_docs) val.push_back(&d);
  } else {
    const int64_t n = static_cast<int64_t>(docs.size());
    std::vector<char> is_val(static_cast<size_t>(n), 0);
    for (int64_t i : split_validation_docs(n, val_fraction, seed)) is_val[static_cast<size_t>(i)] = 1;
    for (int64_t i = 0; i < n; ++i) (is_val[static_cast<size_t>(i)] ? val : train).push_back(&docs[static_cast<size_t>(i)]);
  }
  int64_t bytes_total = 0;
  for (const auto* d : train) bytes_total += static_cast<int64_t>(d->text.size());
  int64_t train_bytes = bytes_total;
  for (const auto* d : val) bytes_total += static_cast<int64_t>(d->text.size());
  const int64_t docs_total = static_cast<int64_t>(train.size() + val.size());
  const Split tr = tokenize_split(train, tok, progress, t0, 0, docs_total, 0, bytes_total);
  const Split va = tokenize_split(val, tok, progress, t0, static_cast<int64_t>(train.size()), docs_total, train_bytes,
                                  bytes_total);
  return write_splits(tr, va, tok, out_dir, val_fraction, seed, progress, t0);
}

// Reads token files into named documents (cut at the tokenizer's EOS / BOS).
std::vector<std::pair<std::string, std::vector<int32_t>>> read_token_docs(const std::vector<std::string>& globs,
                                                                         TokenFormat fmt, const Tokenizer& tok) {
  std::vector<std::pair<std::string, std::vector<int32_t>>> docs;
  const std::vector<int32_t> delimiters{tok.eos(), tok.bos()};
  for (const std::string& path : expand_globs(globs, "token files")) {
    const TokenFile f = read_token_file(path, fmt, tok.vocab_size());
    int64_t k = 0;
    for (auto& d : split_documents(f.tokens, delimiters)) docs.emplace_back(path + "#" + std::to_string(k++), std::move(d));
  }
  return docs;
}

Split token_split(std::vector<std::pair<std::string, std::vector<int32_t>>>& docs, const std::vector<int64_t>& pick) {
  Split s;
  for (int64_t i : pick) {
    auto& [name, ids] = docs[static_cast<size_t>(i)];
    s.tokens += static_cast<int64_t>(ids.size());
    s.names.push_back(name);
    s.ids.push_back(std::move(ids));
  }
  return s;
}

}  // namespace

double PrepareResult::bytes_per_token() const {
  const int64_t t = train_tokens + val_tokens, b = train_bytes + val_bytes;
  return t > 0 && b > 0 ? static_cast<double>(b) / static_cast<double>(t) : 0.0;
}

std::vector<int64_t> split_validation_docs(int64_t n_docs, double val_fraction, uint64_t seed) {
  HZ_CHECK(n_docs >= 0, ValueError, "split_validation_docs: n_docs must be >= 0, got ", n_docs);
  HZ_CHECK(val_fraction >= 0.0 && val_fraction < 1.0, ValueError, "val_fraction must be in [0, 1), got ",
           val_fraction);
  std::vector<int64_t> idx(static_cast<size_t>(n_docs));
  for (int64_t i = 0; i < n_docs; ++i) idx[static_cast<size_t>(i)] = i;
  Generator g(seed, /*stream=*/0);
  shuffle_in_place(idx, g);
  int64_t n_val = std::llround(val_fraction * static_cast<double>(n_docs));
  if (val_fraction > 0.0 && n_docs >= 2) n_val = std::max<int64_t>(n_val, 1);
  n_val = std::min<int64_t>(n_val, std::max<int64_t>(n_docs - 1, 0));
  std::vector<int64_t> val(idx.begin(), idx.begin() + n_val);
  std::sort(val.begin(), val.end());
  return val;
}

PrepareResult prepare_corpus(const std::vector<Document>& docs, const Tokenizer& tok, const std::string& out_dir,
                             double val_fraction, uint64_t seed, const ProgressFn& progress) {
  return prepare_text(docs, nullptr, tok, out_dir, val_fraction, seed, progress, Clock::now());
}

const std::vector<std::string>& corpus_sources() {
  static const std::vector<std::string> s{"bible", "files", "jsonl", "tokens"};
  return s;
}

PrepareResult prepare_source(const CorpusSpec& spec, const Tokenizer& tok, const std::string& out_dir,
                             const ProgressFn& progress) {
  const auto t0 = Clock::now();
  HZ_CHECK(!out_dir.empty(), ValueError, "prepare_source: give an output directory");
  if (progress) progress({"reading", 0, 0, 0, 0, 0.0});
  if (spec.source == "tokens") {
    const TokenFormat fmt = parse_token_format(spec.token_format);
    auto docs = read_token_docs(spec.files, fmt, tok);
    HZ_CHECK(!docs.empty(), ValueError, "the token files hold no tokens outside document delimiters");
    std::vector<int64_t> train_idx, val_idx;
    Split train, val;
    if (!spec.val_files.empty()) {
      auto vdocs = read_token_docs(spec.val_files, fmt, tok);
      for (size_t i = 0; i < docs.size(); ++i) train_idx.push_back(static_cast<int64_t>(i));
      for (size_t i = 0; i < vdocs.size(); ++i) val_idx.push_back(static_cast<int64_t>(i));
      train = token_split(docs, train_idx);
      val = token_split(vdocs, val_idx);
    } else {
      const int64_t n = static_cast<int64_t>(docs.size());
      val_idx = split_validation_docs(n, spec.val_fraction, spec.seed);
      std::vector<char> is_val(static_cast<size_t>(n), 0);
      for (int64_t i : val_idx) is_val[static_cast<size_t>(i)] = 1;
      for (int64_t i = 0; i < n; ++i)
        if (!is_val[static_cast<size_t>(i)]) train_idx.push_back(i);
      train = token_split(docs, train_idx);
      val = token_split(docs, val_idx);
    }
    return write_splits(train, val, tok, out_dir, spec.val_fraction, spec.seed, progress, t0);
  }
  const auto load = [&](const std::vector<std::string>& globs) {
    if (spec.source == "bible") return load_bible_kjv();
    if (spec.source == "files") return load_text_files(globs);
    if (spec.source == "jsonl") return load_jsonl(globs, spec.text_field);
    std::string known;
    for (const auto& s : corpus_sources()) known += " " + s;
    throw ValueError("unknown corpus source '" + spec.source + "'; known:" + known);
  };
  const std::vector<Document> docs = load(spec.files);
  HZ_CHECK(!docs.empty(), ValueError, "the corpus (", spec.source, ") has no documents");
  if (!spec.val_files.empty()) {
    HZ_CHECK(spec.source != "bible", ValueError, "val_files cannot be combined with the bible source");
    const std::vector<Document> val = load(spec.val_files);
    return prepare_text(docs, &val, tok, out_dir, spec.val_fraction, spec.seed, progress, t0);
  }
  return prepare_text(docs, nullptr, tok, out_dir, spec.val_fraction, spec.seed, progress, t0);
}

}  // namespace hz::data
