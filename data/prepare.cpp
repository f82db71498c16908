#include "data/prepare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/rng.h"
#include "data/sampling.h"
#include "data/shard.h"

namespace hz::data {

namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  return out + "\"";
}

void write_text_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    HZ_CHECK(out.good(), Error, "cannot create '", tmp, "'; check that the directory is writable");
    out << text;
    out.flush();
    HZ_CHECK(out.good(), Error, "writing '", tmp, "' failed; is the disk full?");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  HZ_CHECK(!ec, Error, "cannot rename '", tmp, "' to '", path, "': ", ec.message());
}

}  // namespace

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

PrepareResult prepare_corpus(const std::vector<Document>& docs, const Tokenizer& tok,
                             const std::string& out_dir, double val_fraction, uint64_t seed) {
  HZ_CHECK(!docs.empty(), ValueError, "prepare_corpus: the corpus has no documents");
  HZ_CHECK(!out_dir.empty(), ValueError, "prepare_corpus: give an output directory");
  const int64_t n = static_cast<int64_t>(docs.size());
  const std::vector<int64_t> val_idx = split_validation_docs(n, val_fraction, seed);
  std::vector<char> is_val(static_cast<size_t>(n), 0);
  for (int64_t i : val_idx) is_val[static_cast<size_t>(i)] = 1;

  std::vector<std::vector<int32_t>> train_tok, val_tok;
  std::vector<std::string> train_names, val_names;
  PrepareResult r;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int32_t> ids = tok.encode(docs[static_cast<size_t>(i)].text);
    const int64_t len = static_cast<int64_t>(ids.size());
    if (is_val[static_cast<size_t>(i)]) {
      r.val_tokens += len;
      val_names.push_back(docs[static_cast<size_t>(i)].name);
      val_tok.push_back(std::move(ids));
    } else {
      r.train_tokens += len;
      train_names.push_back(docs[static_cast<size_t>(i)].name);
      train_tok.push_back(std::move(ids));
    }
  }
  r.train_docs = static_cast<int64_t>(train_tok.size());
  r.val_docs = static_cast<int64_t>(val_tok.size());

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  HZ_CHECK(!ec, Error, "cannot create output directory '", out_dir, "': ", ec.message());
  const std::filesystem::path dir(out_dir);
  r.train_path = (dir / "train.shard").string();
  r.val_path = (dir / "val.shard").string();
  write_shard(r.train_path, train_tok);
  write_shard(r.val_path, val_tok);

  std::ostringstream js;
  js.precision(17);
  const auto names_json = [&](const std::vector<std::string>& names) {
    std::string s = "[";
    for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + json_string(names[i]);
    return s + "]";
  };
  js << "{\n"
     << "  \"format\": \"HZSHARD1\",\n"
     << "  \"tokenizer\": " << json_string(tok.name()) << ",\n"
     << "  \"vocab_size\": " << tok.vocab_size() << ",\n"
     << "  \"bos\": " << tok.bos() << ",\n"
     << "  \"eos\": " << tok.eos() << ",\n"
     << "  \"pad\": " << tok.pad() << ",\n"
     << "  \"seed\": " << seed << ",\n"
     << "  \"val_fraction\": " << val_fraction << ",\n"
     << "  \"train\": {\"shard\": \"train.shard\", \"docs\": " << r.train_docs << ", \"tokens\": " << r.train_tokens
     << ", \"documents\": " << names_json(train_names) << "},\n"
     << "  \"val\": {\"shard\": \"val.shard\", \"docs\": " << r.val_docs << ", \"tokens\": " << r.val_tokens
     << ", \"documents\": " << names_json(val_names) << "}\n"
     << "}\n";
  write_text_atomically((dir / "meta.json").string(), js.str());
  return r;
}

}  // namespace hz::data
