// Horizon: `horizon tokenize` (encode / decode with any tokenizer) and `horizon bench tokenizer`
// (encoding throughput, compared with the `tokenizers` library by scripts/bench/bench_tokenizer.sh).
#include "cli/tokenize.h"
#include "cli/flags.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "core/file.h"
#include "data/corpus.h"
#include "data/tokenizer.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace hz::cli {

namespace {

std::string read_input(const std::string& file) {
  if (file.empty() || file == "-") {
    std::ostringstream ss;
    ss << std::cin.rdbuf();
    return ss.str();
  }
  std::string text;  // a regular file (core/file.h); "-" (above) is standard input
  const std::string why = read_file_capped(file, std::numeric_limits<uint64_t>::max(), text);
  HZ_CHECK(why.empty(), ValueError, "'", file, "': ", why);
  return text;
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::istringstream ss(text);
  std::string word;
  while (ss >> word) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    HZ_CHECK(used == word.size() && v >= INT32_MIN && v <= INT32_MAX, ValueError, "--decode reads token ids: '", word,
             "' (item ", ids.size(), ") is not an integer id");
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

void print_info(const data::Tokenizer& tok) {
  const auto show = [&](int32_t id) { return fmt::format("{} ({})", id, tok.id_to_token(id)); };
  fmt::print("tokenizer: {}\nfingerprint: {}\nvocab_size: {}\nbos: {}\neos: {} (document separator)\npad: {}\n",
             tok.name(), tok.fingerprint(), tok.vocab_size(), show(tok.bos()), show(tok.eos()), show(tok.pad()));
  const auto specials = tok.special_ids();
  fmt::print("special tokens ({}):", specials.size());
  const size_t shown = std::min<size_t>(specials.size(), 32);
  for (size_t i = 0; i < shown; ++i) fmt::print(" {}={}", specials[i], tok.id_to_token(specials[i]));
  if (shown < specials.size()) fmt::print(" ... ({} more)", specials.size() - shown);
  fmt::print("\n");
}

}  // namespace

int tokenize_main(const std::vector<std::string>& args) {
  bool decode = false, add_special = false, info = false, help = false;
  std::vector<std::string> pos;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--decode") decode = true;
    else if (a == "--add-special") add_special = true;
    else if (a == "--info") info = true;
    else if (a == "--help" || a == "-h") help = true;
    else if (a.size() > 1 && a[0] == '-' && a != "-") {
      fmt::print(stderr, "horizon tokenize: unknown option '{}'; see horizon tokenize --help\n", a);
      return 2;
    } else pos.push_back(a);
  }
  if (help || pos.empty() || pos.size() > 2) {
    fmt::print(help ? stdout : stderr,
               "usage: horizon tokenize TOKENIZER [FILE] [--decode] [--add-special] [--info]\n"
               "  TOKENIZER      byte | PATH/tokenizer.json (Hugging Face BPE) | PATH.model (SentencePiece)\n"
               "  Encodes FILE (default: stdin) as one text and prints its ids on one line, separated by spaces.\n"
               "  --decode       read ids (separated by whitespace) and print the text they stand for\n"
               "  --add-special  encode: add the special tokens the tokenizer's post-processor adds (e.g. BOS);\n"
               "                 decode: write special tokens out instead of skipping them\n"
               "  --info         print the vocabulary size, BOS / EOS / PAD and the special tokens\n");
    return help ? 0 : 2;
  }
  const auto tok = data::make_tokenizer(pos[0]);
  if (info) {
    print_info(*tok);
    return 0;
  }
  const std::string input = read_input(pos.size() > 1 ? pos[1] : "");
  if (decode) {
    const std::vector<int32_t> ids = parse_ids(input);
    const std::string text = add_special ? tok->decode_with_specials(ids) : tok->decode(ids);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  const std::vector<int32_t> ids = add_special ? tok->encode_with_specials(input) : tok->encode(input);
  std::string line;
  line.reserve(ids.size() * 6);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) line.push_back(' ');
    line += std::to_string(ids[i]);
  }
  line.push_back('\n');
  std::fwrite(line.data(), 1, line.size(), stdout);
  return 0;
}

int bench_tokenizer_main(const std::vector<std::string>& args) {
  std::vector<std::string> pos;
  std::vector<int> threads{1, 2};
  int reps = 3;
  std::string field = "text";
  bool help = false;
  for (size_t i = 2; i < args.size(); ++i) {
    const std::string& a = args[i];
    const auto next = [&]() -> const std::string& {
      HZ_CHECK(i + 1 < args.size(), ValueError, a, " needs a value");
      return args[++i];
    };
    if (a == "--threads") {
      threads.clear();
      std::stringstream ss(next());
      std::string t;
      while (std::getline(ss, t, ',')) threads.push_back(static_cast<int>(parse_int(t, "--threads", 1, 4096)));
    } else if (a == "--reps") {
      reps = static_cast<int>(parse_int(next(), "--reps", 1, 1 << 20));
    } else if (a == "--text-field") {
      field = next();
    } else if (a == "--help" || a == "-h") {
      pos.clear();
      help = true;
      break;
    } else {
      pos.push_back(a);
    }
  }
  if (pos.size() < 2) {
    fmt::print("{}", "usage: horizon bench tokenizer TOKENIZER FILE.jsonl|FILE... [--threads 1,2] [--reps 3] [--text-field text]\n"
               "  Encodes the documents (one per JSONL line, or one per text file) reps times per thread count,\n"
               "  in parallel over documents, and prints one JSON line per run: MB/s of text, tokens/s.\n");
    return help ? 0 : 2;
  }
  const auto tok = data::make_tokenizer(pos[0]);
  const std::vector<std::string> files(pos.begin() + 1, pos.end());
  const bool jsonl = files[0].size() > 6 && files[0].compare(files[0].size() - 6, 6, ".jsonl") == 0;
  const std::vector<data::Document> docs = jsonl ? data::load_jsonl(files, field) : data::load_text_files(files);
  int64_t bytes = 0;
  for (const auto& d : docs) bytes += static_cast<int64_t>(d.text.size());
  for (int t : threads) {
#ifdef _OPENMP
    omp_set_num_threads(t);
#endif
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      const auto ids = data::encode_batch(*tok, static_cast<int64_t>(docs.size()),
                                          [&](int64_t i) -> const std::string& { return docs[static_cast<size_t>(i)].text; });
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      int64_t tokens = 0;
      for (const auto& v : ids) tokens += static_cast<int64_t>(v.size());
      fmt::print("{{\"impl\": \"horizon\", \"threads\": {}, \"rep\": {}, \"docs\": {}, \"bytes\": {}, \"tokens\": {}, "
                 "\"seconds\": {:.6f}, \"mb_per_s\": {:.3f}}}\n",
                 t, r, docs.size(), bytes, tokens, s, bytes / 1e6 / s);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace hz::cli
