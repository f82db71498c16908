#include "train/data.h"

#include <filesystem>
#include <tuple>

#include <fmt/core.h>

#include "data/prepare.h"
#include "data/tokenizer.h"
#include "distributed/parallel.h"

namespace fs = std::filesystem;

namespace hz::train {

namespace {

// <out_dir>/_data/<source>-<tokenizer tag>[-<corpus hash>]-s<seed>-v<val_fraction>: the tokenizer
// tag holds a hash of the tokenizer file, the corpus hash one of the fields that choose the
// documents (file globs, text field, token format), so changing either prepares new shards.
std::string cache_dir(const Recipe& r, const data::Tokenizer& tok) {
  if (!r.data.cache_dir.empty()) return r.data.cache_dir;
  std::string corpus;
  if (r.data.source != DataSource::Bible) {
    std::string key = std::string(name(r.data.source)) + "\n" + r.data.text_field + "\n" + r.data.token_format;
    for (const auto& f : r.data.files) key += "\nf:" + f;
    for (const auto& f : r.data.val_files) key += "\nv:" + f;
    corpus = fmt::format("-{:08x}", static_cast<uint32_t>(data::fnv1a64(key.data(), key.size())));
  }
  return r.run.out_dir + "/_data/" + name(r.data.source) + "-" + data::tokenizer_tag(tok) + corpus + "-s" +
         std::to_string(r.run.seed) + "-v" + fmt::format("{:g}", r.data.val_fraction);
}

std::unique_ptr<data::Tokenizer> recipe_tokenizer(const Recipe& r) {
  HZ_CHECK(!r.data.tokenizer.empty(), ValueError, "data.tokenizer is empty: the model came from a Hugging Face directory "
           "without tokenizer.json or tokenizer.model; set data.tokenizer to the tokenizer it was trained with");
  return data::make_tokenizer(r.data.tokenizer);
}

}  // namespace

std::pair<std::string, std::string> prepare_data(const Recipe& r, bool verbose) {
  const auto tok = recipe_tokenizer(r);
  const std::string dir = cache_dir(r, *tok);
  const std::string train_path = dir + "/train.shard", val_path = dir + "/val.shard";
  if (fs::exists(train_path) && fs::exists(val_path) && fs::exists(dir + "/meta.json")) return {train_path, val_path};
  HZ_CHECK(!is_synthetic(r.data.source), ValueError, "prepare_data: source '", name(r.data.source),
           "' is synthetic and needs no shards");
  data::CorpusSpec spec;
  spec.source = name(r.data.source);
  spec.files = r.data.files;
  spec.val_files = r.data.val_files;
  spec.text_field = r.data.text_field;
  spec.token_format = r.data.token_format;
  spec.val_fraction = r.data.val_fraction;
  spec.seed = static_cast<uint64_t>(r.run.seed);
  data::ProgressFn progress;
  if (verbose)
    progress = [](const data::PrepareProgress& p) {  // large inputs only: the first report comes after a second
      if (p.seconds < 1.0) return;
      if (p.stage == "tokenizing")
        fmt::print(stderr, "  tokenizing: {}/{} documents, {:.1f}/{:.1f} MB, {:.1f} MB/s, {:.0f} s\n", p.docs_done,
                   p.docs_total, p.bytes_done / 1e6, p.bytes_total / 1e6, p.bytes_done / 1e6 / p.seconds, p.seconds);
      else
        fmt::print(stderr, "  {} ({:.0f} s)\n", p.stage, p.seconds);
    };
  const data::PrepareResult p = data::prepare_source(spec, *tok, dir, progress);
  if (verbose) {
    const std::string bpt = p.bytes_per_token() > 0 ? fmt::format("{:.3f} bytes/token", p.bytes_per_token())
                                                     : std::string("pre-tokenized");
    fmt::print("prepared {} with tokenizer {}: {} train docs / {} tokens, {} val docs / {} tokens, {}, {:.1f} s -> {}\n",
               name(r.data.source), tok->name(), p.train_docs, p.train_tokens, p.val_docs, p.val_tokens, bpt, p.seconds, dir);
  }
  return {p.train_path, p.val_path};
}

std::pair<std::string, std::string> prepare_data(const Recipe& r, dist::Communicator& comm, bool verbose) {
  if (comm.rank() == 0) prepare_data(r, verbose);  // one rank tokenizes; the others wait, then read the shards
  comm.barrier();
  return prepare_data(r, false);
}

TrainData open_train_data(const Recipe& r, dist::Communicator& comm, bool verbose) {
  TrainData d;
  const auto tok = std::shared_ptr<const data::Tokenizer>(recipe_tokenizer(r));
  HZ_CHECK(tok->vocab_size() <= r.model.cfg.vocab_size, ValueError, "model.vocab_size (", r.model.cfg.vocab_size,
           ") is smaller than the vocabulary of tokenizer ", tok->name(), " (", tok->vocab_size(),
           " ids): set model.vocab_size to at least ", tok->vocab_size());
  // each data-parallel replica reads its own share; the ranks of a context group read the same
  const dist::ParallelDims dims(comm.size(), comm.rank(), static_cast<int>(r.parallel.context));
  if (is_synthetic(r.data.source)) {
    d.synth = std::make_unique<data::SyntheticLoader>(name(r.data.source), tok, r.data.seq_len, r.data.batch_size,
                                                      r.run.seed, dims.data_rank(), dims.data());
    return d;
  }
  std::string tp, vp;
  try {
    std::tie(tp, vp) = prepare_data(r, comm, verbose);
  } catch (const ValueError& e) {  // a glob that matches nothing, an unreadable file: name the key
    const std::string m = e.what();
    if (m.rfind("data.", 0) == 0) throw;
    throw ValueError(std::string(r.data.val_files.empty() ? "data.files" : "data.files / data.val_files") + ": " + m);
  }
  try {
    d.shard_loader = std::make_unique<data::Loader>(data::Shard::open(tp), r.data.seq_len, r.data.batch_size,
                                                    r.run.seed, dims.data_rank(), dims.data(), tok->eos(), true);
  } catch (const ValueError& e) {  // name what the user gave (the .bin / .jsonl files), not only the cache
    std::string given;
    for (const auto& f : r.data.files) given += (given.empty() ? "" : ", ") + f;
    throw ValueError(detail::concat_msg(given.empty() ? "data.source " + std::string(name(r.data.source))
                                                      : "data.files [" + given + "]",
                                        ": ", e.what(), " (the shard is prepared from them)"));
  }
  d.val = data::Shard::open(vp);
  if (!r.data.mix_task.empty()) {
    d.mix = std::make_unique<data::SyntheticLoader>(r.data.mix_task, tok, r.data.seq_len, r.data.batch_size, r.run.seed,
                                                    dims.data_rank(), dims.data());
    d.mix_share = r.data.mix_share;
    d.mix_batch = r.data.batch_size;
  }
  // a run that evaluates needs one validation batch at the training length: refused before training,
  // not reported as "no validation split" at its end
  const int64_t eb = r.eval.opts.batch_size > 0 ? r.eval.opts.batch_size : r.data.batch_size;
  if (r.eval.final || r.eval.every > 0) {
    try {
      (void)data::eval_batches(*d.val, r.data.seq_len, eb, 1, tok->eos());
    } catch (const ValueError& e) {
      throw ValueError(detail::concat_msg("eval.batch_size ", eb, " x data.seq_len ", r.data.seq_len, ": ", e.what(),
                                          " (or set eval.final=false and eval.every=0: the run then never evaluates)"));
    }
  }
  return d;
}

}  // namespace hz::train
