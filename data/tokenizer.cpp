#include "data/tokenizer.h"

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/file.h"
#include "data/hf_tokenizer.h"
#include "data/shard.h"
#include "data/sp_tokenizer.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace hz::data {

Tokenizer::~Tokenizer() = default;

namespace {
constexpr const char* kByteSpecialNames[3] = {"<|bos|>", "<|eos|>", "<|pad|>"};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

std::vector<int32_t> ByteTokenizer::encode(const std::string& text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::vector<int32_t> ByteTokenizer::encode_with_specials(const std::string& text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() + 1);
  ids.push_back(kBos);
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

namespace {
std::string byte_decode(const std::vector<int32_t>& ids, bool keep_specials) {
  std::string out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    HZ_CHECK(id >= 0 && id < ByteTokenizer::kVocab, ValueError, "byte tokenizer: id ", id, " at position ", i,
             " is outside the vocabulary [0, ", ByteTokenizer::kVocab, "); were these ids made by another tokenizer?");
    if (id < 256) out.push_back(static_cast<char>(static_cast<unsigned char>(id)));
    else if (keep_specials) out += kByteSpecialNames[id - 256];
  }
  return out;
}
}  // namespace

std::string ByteTokenizer::decode(const std::vector<int32_t>& ids) const { return byte_decode(ids, false); }
std::string ByteTokenizer::decode_with_specials(const std::vector<int32_t>& ids) const { return byte_decode(ids, true); }

std::string ByteTokenizer::id_to_token(int32_t id) const {
  HZ_CHECK(id >= 0 && id < kVocab, ValueError, "byte tokenizer: no token has id ", id, " (ids run from 0 to ",
           kVocab - 1, ")");
  return id < 256 ? std::string(1, static_cast<char>(static_cast<unsigned char>(id))) : kByteSpecialNames[id - 256];
}

std::optional<int32_t> ByteTokenizer::token_to_id(std::string_view token) const {
  if (token.size() == 1) return static_cast<unsigned char>(token[0]);
  for (int k = 0; k < 3; ++k)
    if (token == kByteSpecialNames[k]) return 256 + k;
  return std::nullopt;
}

const std::vector<std::string>& tokenizer_names() {
  static const std::vector<std::string> names{"byte", "PATH/tokenizer.json (Hugging Face BPE)",
                                              "PATH.model (SentencePiece)"};
  return names;
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec) {
  if (spec == "byte") return std::make_unique<ByteTokenizer>();
  if (ends_with(spec, ".json")) return load_hf_tokenizer(spec);
  if (ends_with(spec, ".model")) return load_sentencepiece(spec);
  std::string known;
  for (const auto& n : tokenizer_names()) known += (known.empty() ? "" : ", ") + n;
  if (std::filesystem::is_directory(spec) && std::filesystem::exists(spec + "/tokenizer.json"))
    known += "; did you mean " + spec + "/tokenizer.json?";
  throw ValueError(detail::concat_msg("unknown tokenizer '", spec, "'; known tokenizers: ", known));
}

std::vector<std::vector<int32_t>> encode_batch(const Tokenizer& tok, int64_t n,
                                               const std::function<const std::string&(int64_t)>& text_at,
                                               const std::function<void(const EncodeProgress&)>& progress) {
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(n));
  std::atomic<int64_t> texts_done{0}, bytes_done{0};
  std::string first_error;
  int64_t first_index = -1;
  std::atomic<bool> failed{false};
  auto last = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) {
    if (failed.load(std::memory_order_relaxed)) continue;
    try {
      const std::string& text = text_at(i);
      out[static_cast<size_t>(i)] = tok.encode(text);
      bytes_done += static_cast<int64_t>(text.size());
      ++texts_done;
    } catch (const std::exception& e) {
#pragma omp critical(hz_encode_batch_error)
      if (!failed.exchange(true)) first_error = e.what(), first_index = i;
    }
#ifdef _OPENMP
    const bool reporter = omp_get_thread_num() == 0;
#else
    const bool reporter = true;
#endif
    if (progress && reporter) {
      const auto now = std::chrono::steady_clock::now();
      if (now - last >= std::chrono::seconds(1)) {
        last = now;
        progress({texts_done.load(), bytes_done.load()});
      }
    }
  }
  if (failed) throw EncodeBatchError(first_index, first_error);
  return out;
}

std::string tokenizer_tag(const Tokenizer& tok) {
  const std::string fp = tok.fingerprint();
  if (fp == "byte") return "byte";
  std::filesystem::path p(tok.name());
  std::string stem = p.filename() == "tokenizer.json" && p.has_parent_path() ? p.parent_path().filename().string()
                                                                            : p.stem().string();
  std::string tag;
  for (char c : stem) tag.push_back(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' ? c : '_');
  if (tag.empty()) tag = "tokenizer";
  char hash[17];
  std::snprintf(hash, sizeof(hash), "%016llx", static_cast<unsigned long long>(fnv1a64(fp.data(), fp.size())));
  return tag + "-" + std::string(hash, 8);
}

std::string file_fingerprint(const std::string& path) {
  std::ifstream in = open_input_stream(path);  // a regular file (core/file.h)
  HZ_CHECK(in.good(), ValueError, "cannot read '", path, "'");
  uint64_t h = kFnvOffset;
  char buf[1 << 16];
  while (in) {
    in.read(buf, sizeof(buf));
    h = fnv1a64(buf, static_cast<size_t>(in.gcount()), h);
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

}  // namespace hz::data
