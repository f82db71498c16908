// Horizon data: the components of a Hugging Face tokenizer.json pipeline (used by
// data/hf_tokenizer.cpp): normalizers, pre-tokenizers, decoders and the added-token vocabulary,
// read from the file's JSON and run with the semantics of the `tokenizers` library (the file
// named in each comment), on UTF-8 bytes. What each accepts is listed in data/hf_tokenizer.h.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "data/unicode.h"

namespace hz::data::hf {

using json = nlohmann::json;

// Reads a tokenizer.json's values; every error names the file and the JSON path.
struct JsonReader {
  std::string file;

  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw ValueError(file + ": " + path + ": " + what);
  }
  [[noreturn]] void unsupported(const std::string& path, const std::string& kind, const std::string& accepted) const {
    throw ValueError(file + ": " + path + " '" + kind + "' is not supported by Horizon (it reads " + accepted +
                     "); see data/hf_tokenizer.h");
  }
  const json& at(const json& j, const char* key, const std::string& path) const {
    if (!j.is_object() || !j.contains(key)) fail(path, std::string("missing key '") + key + "'");
    return j.at(key);
  }
  std::string str(const json& j, const char* key, const std::string& path) const {
    const json& v = at(j, key, path);
    if (!v.is_string()) fail(path + "." + key, "expected a string, got " + std::string(v.type_name()));
    return v.get<std::string>();
  }
  std::optional<std::string> opt_str(const json& j, const char* key, const std::string& path) const {
    if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
    return str(j, key, path);
  }
  bool flag(const json& j, const char* key, bool dflt, const std::string& path) const {
    if (!j.contains(key) || j.at(key).is_null()) return dflt;
    if (!j.at(key).is_boolean()) fail(path + "." + key, "expected true or false");
    return j.at(key).get<bool>();
  }
  // A token id: a JSON integer in [0, bound) (bound: what the vocabulary's size allows), parsed as
  // 64-bit so an id of 2^32 + 5 is refused instead of wrapping to 5.
  int32_t id(const json& v, const std::string& path, int64_t bound) const {
    if (!v.is_number_integer()) fail(path, "expected an integer token id, got " + std::string(v.type_name()));
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      fail(path, "token id " + v.dump() + " is out of range");
    const int64_t x = v.get<int64_t>();
    if (x < 0 || x >= bound)
      fail(path, "token id " + std::to_string(x) + " is out of range: ids must be in [0, " + std::to_string(bound) +
                     ") for this vocabulary");
    return static_cast<int32_t>(x);
  }
  int64_t integer(const json& j, const char* key, const std::string& path) const {
    const json& v = at(j, key, path);
    if (!v.is_number_integer()) fail(path + "." + key, "expected an integer");
    return v.get<int64_t>();
  }
  std::string type(const json& j, const std::string& path) const {
    if (!j.is_object()) fail(path, "expected an object");
    return str(j, "type", path);
  }
  // {"String": s} or {"Regex": r} -> (pattern, literal)
  std::pair<std::string, bool> pattern(const json& j, const std::string& path) const {
    const json& p = at(j, "pattern", path);
    if (p.is_object() && p.contains("String")) return {str(p, "String", path + ".pattern"), true};
    if (p.is_object() && p.contains("Regex")) return {str(p, "Regex", path + ".pattern"), false};
    fail(path + ".pattern", "expected {\"String\": ...} or {\"Regex\": ...}");
  }
  uint32_t single_char(const std::string& s, const std::string& path) const {
    size_t i = 0;
    if (s.empty() || unicode::invalid_utf8_offset(s) != unicode::npos) fail(path, "expected one character");
    const uint32_t cp = unicode::next_codepoint(s, i);
    if (i != s.size()) fail(path, "expected one character, got '" + s + "'");
    return cp;
  }
};

// Limits on a tokenizer.json (and tokenizer_config.json), checked before parsing: at most 256 MiB
// (real ones: up to ~35 MB) and nested at most 64 deep (core/json_guard.h).
constexpr uint64_t kMaxTokenizerJsonBytes = 256ull << 20;

// The JSON of a file; throws hz::ValueError for a missing file, one over the limits or invalid JSON.
json parse_json_file(const std::string& path);

// normalizer: NFC / NFD / NFKC / NFKD, Lowercase, Replace, Prepend, Strip, StripAccents (Sequence
// flattened), applied in order to each stretch of text between added tokens
// (tokenizers/src/normalizers/).
class Normalizers {
 public:
  Normalizers();
  ~Normalizers();
  void read(const JsonReader& rd, const json& j, const std::string& path);  // null: none
  bool empty() const { return steps_.empty(); }
  // at_origin: whether the first character still comes from the start of the input (only Strip
  // can move it; Metaspace's "first" scheme reads it).
  std::string apply(std::string_view s, bool& at_origin) const;

 private:
  struct Step;
  std::vector<Step> steps_;
};

// pre_tokenizer: ByteLevel, Split, Digits, Punctuation, WhitespaceSplit, Metaspace (Sequence
// flattened), each splitting every piece of the previous step (tokenizers/src/pre_tokenizers/,
// tokenizers/src/tokenizer/normalizer.rs NormalizedString::split for the split behaviours).
class PreTokenizers {
 public:
  PreTokenizers();
  ~PreTokenizers();
  void read(const JsonReader& rd, const json& j, const std::string& path);  // null: none
  // The last step is ByteLevel: words are raw bytes the model sees as GPT-2's characters.
  bool byte_level() const;
  // word(w) for every non-empty pre-token of s, in order. at_origin: s starts the input text.
  void split(std::string_view s, bool at_origin, const std::function<void(std::string_view)>& word) const;

 private:
  struct Step;
  void run(size_t stage, std::string_view s, bool at_origin, const std::function<void(std::string_view)>& word) const;
  std::vector<Step> steps_;
};

// decoder: ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, BPEDecoder (Sequence
// flattened) (tokenizers/src/decoders/), on bytes: where the library replaces bytes that are not
// valid UTF-8 by U+FFFD, the bytes are kept (data/tokenizer.h).
class Decoders {
 public:
  Decoders();
  ~Decoders();
  void read(const JsonReader& rd, const json& j, const std::string& path);  // null: none
  bool empty() const { return steps_.empty(); }
  // The chain over the tokens' strings, joined. literal[i]: token i is an added token outside the
  // model's vocabulary, whose content is text rather than byte-level characters.
  std::string decode(std::vector<std::string> toks, const std::vector<char>& literal) const;

 private:
  struct Step;
  static void run_step(const Step& d, std::vector<std::string>& toks, const std::vector<char>& literal);
  std::vector<Step> steps_;
};

struct AddedToken {
  int32_t id = 0;
  std::string content;
  std::string match;  // what is searched: content, or its normalized form for normalized tokens
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

// The added tokens of a file, found in text as the library finds them
// (tokenizers/src/tokenizer/added_vocabulary.rs find_matches): leftmost-longest, a single_word
// token only between non-word characters, lstrip / rstrip taking the whitespace beside it.
class AddedVocabulary {
 public:
  struct Piece {
    size_t b, e;
    int32_t id;  // -1: text between added tokens
  };
  AddedVocabulary();
  ~AddedVocabulary();
  void add(const AddedToken& t);  // a later token with an id already used replaces the earlier
  void build();                   // after the last add: the search structures
  // normalized = false: the tokens with "normalized": false, searched in raw text; true: the
  // others, searched in normalized text. Pieces cover s in order; empty s gives none.
  void split(std::string_view s, bool normalized, std::vector<Piece>& out) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  std::optional<int32_t> id_of(const std::string& content) const;
  bool is_special_content(const std::string& token) const { return special_.count(token) > 0; }

 private:
  class Matcher;
  std::vector<AddedToken> tokens_;
  std::map<std::string, int32_t> by_content_;
  std::map<int32_t, size_t> by_id_;  // -> index in tokens_
  std::set<std::string> special_;
  std::unique_ptr<Matcher> raw_, normalized_;
};

}  // namespace hz::data::hf
