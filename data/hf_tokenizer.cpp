#include "data/hf_tokenizer.h"

#include <algorithm>
#include <cctype>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "data/bpe.h"
#include "data/regex.h"
#include "data/unicode.h"

namespace hz::data {

namespace {

using json = nlohmann::json;
namespace uc = unicode;

// GPT-2's pre-tokenization regex, which the ByteLevel pre-tokenizer applies when use_regex is set.
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// ---- reading the JSON ---------------------------------------------------------------------------

struct Reader {
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
    if (s.empty() || uc::invalid_utf8_offset(s) != uc::npos) fail(path, "expected one character");
    const uint32_t cp = uc::next_codepoint(s, i);
    if (i != s.size()) fail(path, "expected one character, got '" + s + "'");
    return cp;
  }
};

json parse_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  HZ_CHECK(in.good(), ValueError, "cannot open tokenizer file '", path,
           "'; give data.tokenizer as byte, a path to a tokenizer.json or to a SentencePiece .model");
  try {
    return json::parse(in);
  } catch (const json::parse_error& e) {
    throw ValueError(detail::concat_msg("'", path, "' is not valid JSON (", e.what(),
                                        "); is it a complete tokenizer.json?"));
  }
}

// ---- splitting: the library's SplitDelimiterBehavior over (range, is_match) lists -----------------

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct Span {
  size_t b, e;
  bool match;
};

// Turns `spans` (covering a string, in order) into the pieces the behaviour keeps, dropping empty ones.
void apply_behavior(const std::vector<Span>& spans, Behavior beh, std::vector<std::pair<size_t, size_t>>& out) {
  out.clear();
  switch (beh) {
    case Behavior::Isolated:
      for (const Span& s : spans) out.emplace_back(s.b, s.e);
      break;
    case Behavior::Removed:
      for (const Span& s : spans)
        if (!s.match) out.emplace_back(s.b, s.e);
      break;
    case Behavior::Contiguous: {
      bool prev = false;
      for (const Span& s : spans) {
        if (s.match == prev && !out.empty()) out.back().second = s.e;
        else out.emplace_back(s.b, s.e);
        prev = s.match;
      }
      break;
    }
    case Behavior::MergedWithPrevious: {
      bool prev = false;
      for (const Span& s : spans) {
        if (s.match && !prev && !out.empty()) out.back().second = s.e;
        else out.emplace_back(s.b, s.e);
        prev = s.match;
      }
      break;
    }
    case Behavior::MergedWithNext: {
      bool prev = false;
      for (size_t k = spans.size(); k-- > 0;) {
        const Span& s = spans[k];
        if (s.match && !prev && !out.empty()) out.back().first = s.b;
        else out.emplace_back(s.b, s.e);
        prev = s.match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
  }
  out.erase(std::remove_if(out.begin(), out.end(), [](const auto& p) { return p.first == p.second; }), out.end());
}

// The library's find_matches for a regex: gaps and matches (empty matches included), in order.
void regex_spans(const Regex& re, std::string_view s, bool invert, std::vector<std::pair<size_t, size_t>>& tmp,
                 std::vector<Span>& spans) {
  spans.clear();
  if (s.empty()) {
    spans.push_back({0, 0, invert});
    return;
  }
  tmp.clear();
  re.find_all(s, tmp);
  size_t prev = 0;
  for (const auto& [b, e] : tmp) {
    if (prev != b) spans.push_back({prev, b, invert});
    spans.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != s.size()) spans.push_back({prev, s.size(), invert});
}

// The library's find_matches for a character predicate: every matching character on its own.
template <class Pred>
void char_spans(std::string_view s, Pred pred, std::vector<Span>& spans) {
  spans.clear();
  size_t last = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t b = i;
    const uint32_t cp = uc::next_codepoint(s, i);
    if (pred(cp)) {
      if (last < b) spans.push_back({last, b, false});
      spans.push_back({b, i, true});
      last = i;
    }
  }
  if (last < s.size()) spans.push_back({last, s.size(), false});
}

Behavior parse_behavior(const Reader& rd, const json& j, const std::string& path) {
  const std::string b = rd.str(j, "behavior", path);
  if (b == "Removed") return Behavior::Removed;
  if (b == "Isolated") return Behavior::Isolated;
  if (b == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::MergedWithNext;
  if (b == "Contiguous") return Behavior::Contiguous;
  rd.fail(path + ".behavior", "unknown behavior '" + b + "'");
}

// ---- normalizers ------------------------------------------------------------------------------

struct Normalizer {
  enum class Kind { NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend, Strip, StripAccents } kind;
  std::unique_ptr<Regex> regex;
  std::string content;
  bool left = false, right = false;
};

void read_normalizer(const Reader& rd, const json& j, const std::string& path, std::vector<Normalizer>& out) {
  if (j.is_null()) return;
  const std::string t = rd.type(j, path);
  Normalizer n{};
  if (t == "Sequence") {
    const json& list = rd.at(j, "normalizers", path);
    for (size_t i = 0; i < list.size(); ++i) read_normalizer(rd, list[i], path + ".normalizers[" + std::to_string(i) + "]", out);
    return;
  }
  if (t == "NFC") n.kind = Normalizer::Kind::NFC;
  else if (t == "NFD") n.kind = Normalizer::Kind::NFD;
  else if (t == "NFKC") n.kind = Normalizer::Kind::NFKC;
  else if (t == "NFKD") n.kind = Normalizer::Kind::NFKD;
  else if (t == "Lowercase") n.kind = Normalizer::Kind::Lowercase;
  else if (t == "StripAccents") n.kind = Normalizer::Kind::StripAccents;
  else if (t == "Replace") {
    n.kind = Normalizer::Kind::Replace;
    const auto [pat, literal] = rd.pattern(j, path);
    n.regex = std::make_unique<Regex>(pat, literal, rd.file + ": " + path);
    n.content = rd.str(j, "content", path);
  } else if (t == "Prepend") {
    n.kind = Normalizer::Kind::Prepend;
    n.content = rd.str(j, "prepend", path);
  } else if (t == "Strip") {
    n.kind = Normalizer::Kind::Strip;
    n.left = rd.flag(j, "strip_left", false, path);
    n.right = rd.flag(j, "strip_right", false, path);
  } else {
    rd.unsupported(path, "normalizer " + t,
                   "NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend, Strip, StripAccents and Sequence; "
                   "for a SentencePiece 'Precompiled' normalizer give the .model file instead");
  }
  out.push_back(std::move(n));
}

// Applies the normalizers in order. at_origin: whether the first character still comes from the
// start of the input (only Strip can move it; Metaspace's "first" scheme reads it).
std::string normalize(const std::vector<Normalizer>& ns, std::string_view in, bool& at_origin) {
  std::string s(in);
  std::vector<std::pair<size_t, size_t>> matches;
  for (const Normalizer& n : ns) {
    switch (n.kind) {
      case Normalizer::Kind::NFC: s = uc::normalize(s, uc::NormalForm::NFC); break;
      case Normalizer::Kind::NFD: s = uc::normalize(s, uc::NormalForm::NFD); break;
      case Normalizer::Kind::NFKC: s = uc::normalize(s, uc::NormalForm::NFKC); break;
      case Normalizer::Kind::NFKD: s = uc::normalize(s, uc::NormalForm::NFKD); break;
      case Normalizer::Kind::Lowercase: s = uc::lowercase(s); break;
      case Normalizer::Kind::Prepend:
        if (!s.empty()) s.insert(0, n.content);
        break;
      case Normalizer::Kind::Replace: {
        matches.clear();
        n.regex->find_all(s, matches);
        if (matches.empty()) break;
        std::string r;
        size_t prev = 0;
        for (const auto& [b, e] : matches) {
          r.append(s, prev, b - prev);
          r += n.content;
          prev = e;
        }
        r.append(s, prev, std::string::npos);
        s = std::move(r);
        break;
      }
      case Normalizer::Kind::Strip: {
        size_t b = 0, e = s.size();
        if (n.left) {
          size_t i = 0;
          while (i < s.size()) {
            size_t j = i;
            if (!uc::is_whitespace(uc::next_codepoint(s, j))) break;
            i = j;
          }
          b = i;
        }
        if (n.right) {
          while (e > b) {
            size_t j = e - 1;
            while (j > b && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) --j;
            size_t k = j;
            if (!uc::is_whitespace(uc::next_codepoint(s, k))) break;
            e = j;
          }
        }
        if (b > 0) at_origin = false;
        s = s.substr(b, e - b);
        break;
      }
      case Normalizer::Kind::StripAccents: {
        std::string r;
        for (size_t i = 0; i < s.size();) {
          const size_t b = i;
          if (!uc::is_combining_mark(uc::next_codepoint(s, i))) r.append(s, b, i - b);
        }
        s = std::move(r);
        break;
      }
    }
  }
  return s;
}

// ---- pre-tokenizers --------------------------------------------------------------------------

struct PreTokenizer {
  enum class Kind { ByteLevel, Split, Digits, Punctuation, WhitespaceSplit, Metaspace } kind;
  bool add_prefix_space = false;     // ByteLevel
  std::unique_ptr<Regex> regex;      // Split; ByteLevel with use_regex (GPT-2's pattern)
  Behavior behavior = Behavior::Isolated;
  bool invert = false;
  bool individual_digits = false;    // Digits
  uint32_t replacement = 0;          // Metaspace
  std::string replacement_str;
  enum class Prepend { Always, First, Never } prepend = Prepend::Always;
  bool split = true;
};

void read_pre_tokenizer(const Reader& rd, const json& j, const std::string& path, std::vector<PreTokenizer>& out) {
  if (j.is_null()) return;
  const std::string t = rd.type(j, path);
  if (t == "Sequence") {
    const json& list = rd.at(j, "pretokenizers", path);
    for (size_t i = 0; i < list.size(); ++i)
      read_pre_tokenizer(rd, list[i], path + ".pretokenizers[" + std::to_string(i) + "]", out);
    return;
  }
  if (!out.empty() && out.back().kind == PreTokenizer::Kind::ByteLevel)
    rd.unsupported(path, "pre-tokenizer " + t + " after ByteLevel",
                   "pipelines whose ByteLevel pre-tokenizer is the last step, as every byte-level BPE has it");
  PreTokenizer p{};
  if (t == "ByteLevel") {
    p.kind = PreTokenizer::Kind::ByteLevel;
    p.add_prefix_space = rd.flag(j, "add_prefix_space", true, path);
    if (rd.flag(j, "use_regex", true, path)) p.regex = std::make_unique<Regex>(kGpt2Pattern, false, rd.file + ": " + path);
  } else if (t == "Split") {
    p.kind = PreTokenizer::Kind::Split;
    const auto [pat, literal] = rd.pattern(j, path);
    p.regex = std::make_unique<Regex>(pat, literal, rd.file + ": " + path);
    p.behavior = parse_behavior(rd, j, path);
    p.invert = rd.flag(j, "invert", false, path);
  } else if (t == "Digits") {
    p.kind = PreTokenizer::Kind::Digits;
    p.individual_digits = rd.flag(j, "individual_digits", false, path);
  } else if (t == "Punctuation") {
    p.kind = PreTokenizer::Kind::Punctuation;
    p.behavior = j.contains("behavior") ? parse_behavior(rd, j, path) : Behavior::Isolated;
  } else if (t == "WhitespaceSplit") {
    p.kind = PreTokenizer::Kind::WhitespaceSplit;
  } else if (t == "Metaspace") {
    p.kind = PreTokenizer::Kind::Metaspace;
    p.replacement_str = rd.str(j, "replacement", path);
    p.replacement = rd.single_char(p.replacement_str, path + ".replacement");
    if (j.contains("prepend_scheme")) {
      const std::string s = rd.str(j, "prepend_scheme", path);
      if (s == "always") p.prepend = PreTokenizer::Prepend::Always;
      else if (s == "first") p.prepend = PreTokenizer::Prepend::First;
      else if (s == "never") p.prepend = PreTokenizer::Prepend::Never;
      else rd.fail(path + ".prepend_scheme", "unknown scheme '" + s + "'");
    } else {  // files written before prepend_scheme existed
      p.prepend = rd.flag(j, "add_prefix_space", true, path) ? PreTokenizer::Prepend::Always : PreTokenizer::Prepend::Never;
    }
    p.split = rd.flag(j, "split", true, path);
  } else {
    rd.unsupported(path, "pre-tokenizer " + t,
                   "ByteLevel, Split, Digits, Punctuation, WhitespaceSplit, Metaspace and Sequence");
  }
  out.push_back(std::move(p));
}

// ---- decoders ---------------------------------------------------------------------------------

struct Decoder {
  enum class Kind { ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, BPE } kind;
  std::unique_ptr<Regex> regex;
  std::string content;        // Replace: replacement; Strip: the character; BPE: suffix
  int64_t start = 0, stop = 0;
  std::string replacement;    // Metaspace
  bool prepend = true;        // Metaspace: prepend_scheme != never
};

void read_decoder(const Reader& rd, const json& j, const std::string& path, std::vector<Decoder>& out) {
  if (j.is_null()) return;
  const std::string t = rd.type(j, path);
  if (t == "Sequence") {
    const json& list = rd.at(j, "decoders", path);
    for (size_t i = 0; i < list.size(); ++i) read_decoder(rd, list[i], path + ".decoders[" + std::to_string(i) + "]", out);
    return;
  }
  Decoder d{};
  if (t == "ByteLevel") d.kind = Decoder::Kind::ByteLevel;
  else if (t == "ByteFallback") d.kind = Decoder::Kind::ByteFallback;
  else if (t == "Fuse") d.kind = Decoder::Kind::Fuse;
  else if (t == "Replace") {
    d.kind = Decoder::Kind::Replace;
    const auto [pat, literal] = rd.pattern(j, path);
    d.regex = std::make_unique<Regex>(pat, literal, rd.file + ": " + path);
    d.content = rd.str(j, "content", path);
  } else if (t == "Strip") {
    d.kind = Decoder::Kind::Strip;
    d.content = rd.str(j, "content", path);
    rd.single_char(d.content, path + ".content");
    d.start = rd.integer(j, "start", path);
    d.stop = rd.integer(j, "stop", path);
  } else if (t == "Metaspace") {
    d.kind = Decoder::Kind::Metaspace;
    d.replacement = rd.str(j, "replacement", path);
    rd.single_char(d.replacement, path + ".replacement");
    if (j.contains("prepend_scheme")) d.prepend = rd.str(j, "prepend_scheme", path) != "never";
    else d.prepend = rd.flag(j, "add_prefix_space", true, path);
  } else if (t == "BPEDecoder") {
    d.kind = Decoder::Kind::BPE;
    d.content = j.contains("suffix") ? rd.str(j, "suffix", path) : "</w>";
  } else {
    rd.unsupported(path, "decoder " + t, "ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, BPEDecoder and Sequence");
  }
  out.push_back(std::move(d));
}

// One decoder step over the token strings (the library's decode_chain), on bytes. literal[i]: token
// i is an added token outside the model's vocabulary, whose content is text, not byte-level
// characters (only read while the tokens are still one per id, i.e. by a leading ByteLevel step).
void run_decoder(const Decoder& d, std::vector<std::string>& toks, const std::vector<char>& literal) {
  switch (d.kind) {
    case Decoder::Kind::ByteLevel: {
      std::string all;
      const bool per_id = literal.size() == toks.size();
      for (size_t ti = 0; ti < toks.size(); ++ti) {
        const std::string& t = toks[ti];
        if (per_id && literal[ti]) {  // the library maps "café" to "caf\xE9" here; Horizon keeps the text
          all += t;
          continue;
        }
        const size_t mark = all.size();
        bool ok = true;
        for (size_t i = 0; i < t.size() && ok;) {
          const int b = uc::codepoint_to_byte(uc::next_codepoint(t, i));
          if (b < 0) ok = false;
          else all.push_back(static_cast<char>(b));
        }
        if (!ok) {  // a token that is not byte-level text (an added token): its own bytes
          all.resize(mark);
          all += t;
        }
      }
      toks.assign(1, std::move(all));
      break;
    }
    case Decoder::Kind::Replace: {
      std::vector<std::pair<size_t, size_t>> m;
      for (std::string& t : toks) {
        m.clear();
        d.regex->find_all(t, m);
        if (m.empty()) continue;
        std::string r;
        size_t prev = 0;
        for (const auto& [b, e] : m) {
          r.append(t, prev, b - prev);
          r += d.content;
          prev = e;
        }
        r.append(t, prev, std::string::npos);
        t = std::move(r);
      }
      break;
    }
    case Decoder::Kind::ByteFallback: {
      // "<0xXX>" tokens become their bytes; the library writes U+FFFD for a run that is not valid
      // UTF-8, Horizon keeps the bytes (see data/tokenizer.h)
      std::vector<std::string> out;
      std::string bytes;
      bool in_run = false;
      for (std::string& t : toks) {
        const bool is_byte = t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
                             std::isxdigit(static_cast<unsigned char>(t[3])) && std::isxdigit(static_cast<unsigned char>(t[4]));
        if (is_byte) {
          bytes.push_back(static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
          in_run = true;
          continue;
        }
        if (in_run) out.push_back(std::move(bytes)), bytes.clear(), in_run = false;
        out.push_back(std::move(t));
      }
      if (in_run) out.push_back(std::move(bytes));
      toks = std::move(out);
      break;
    }
    case Decoder::Kind::Fuse: {
      std::string all;
      for (const std::string& t : toks) all += t;
      toks.assign(1, std::move(all));
      break;
    }
    case Decoder::Kind::Strip: {
      const size_t c = d.content.size();
      for (std::string& t : toks) {
        size_t b = 0, e = t.size();
        for (int64_t k = 0; k < d.start && b + c <= e && t.compare(b, c, d.content) == 0; ++k) b += c;
        for (int64_t k = 0; k < d.stop && e >= b + c && t.compare(e - c, c, d.content) == 0; ++k) e -= c;
        t = t.substr(b, e - b);
      }
      break;
    }
    case Decoder::Kind::Metaspace: {
      for (size_t i = 0; i < toks.size(); ++i) {
        std::string r;
        const std::string& t = toks[i];
        for (size_t p = 0; p < t.size();) {
          if (t.compare(p, d.replacement.size(), d.replacement) == 0) {
            if (!(i == 0 && d.prepend)) r.push_back(' ');
            p += d.replacement.size();
          } else {
            const size_t q = p + uc::sequence_length(static_cast<unsigned char>(t[p]));
            r.append(t, p, q - p);
            p = q;
          }
        }
        toks[i] = std::move(r);
      }
      break;
    }
    case Decoder::Kind::BPE: {
      for (size_t i = 0; i < toks.size(); ++i) {
        std::string& t = toks[i];
        const std::string with = i + 1 == toks.size() ? "" : " ";
        std::string r;
        size_t p = 0, q;
        while (!d.content.empty() && (q = t.find(d.content, p)) != std::string::npos) {
          r.append(t, p, q - p);
          r += with;
          p = q + d.content.size();
        }
        r.append(t, p, std::string::npos);
        t = std::move(r);
      }
      break;
    }
  }
}

// ---- added tokens -----------------------------------------------------------------------------

struct AddedToken {
  int32_t id = 0;
  std::string content;
  std::string match;  // what is searched: content, or its normalized form for normalized tokens
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

// Leftmost-longest search of a set of strings (a byte trie); matches do not overlap.
class Matcher {
 public:
  void add(const std::string& s, int32_t value) {
    if (s.empty()) return;
    int node = 0;
    for (unsigned char c : s) {
      int next = child(node, c);
      if (next < 0) {
        next = static_cast<int>(nodes_.size());
        nodes_[node].kids.emplace_back(c, next);
        nodes_.push_back({});
      }
      node = next;
    }
    nodes_[node].value = value;
    first_[static_cast<unsigned char>(s[0])] = true;
  }
  bool empty() const { return nodes_.size() == 1; }
  // f(begin, end, value) for each leftmost-longest match
  template <class F>
  void for_each(std::string_view s, F&& f) const {
    size_t i = 0;
    while (i < s.size()) {
      if (!first_[static_cast<unsigned char>(s[i])]) {
        ++i;
        continue;
      }
      int node = 0, best_value = -1;
      size_t best_end = 0;
      for (size_t k = i; k < s.size(); ++k) {
        node = child(node, static_cast<unsigned char>(s[k]));
        if (node < 0) break;
        if (nodes_[node].value >= 0) best_value = nodes_[node].value, best_end = k + 1;
      }
      if (best_value < 0) {
        ++i;
        continue;
      }
      f(i, best_end, best_value);
      i = best_end;
    }
  }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int>> kids;
    int value = -1;
  };
  int child(int node, unsigned char c) const {
    for (const auto& [k, n] : nodes_[node].kids)
      if (k == c) return n;
    return -1;
  }
  std::vector<Node> nodes_ = std::vector<Node>(1);
  bool first_[256] = {};
};

struct Piece {
  size_t b, e;
  int32_t id;  // -1: not an added token
};

// ---- the tokenizer ------------------------------------------------------------------------------

class HfTokenizer final : public Tokenizer {
 public:
  explicit HfTokenizer(const std::string& path);

  std::vector<int32_t> encode(const std::string& text) const override {
    std::vector<int32_t> out;
    encode_into(text, out);
    return out;
  }
  std::vector<int32_t> encode_with_specials(const std::string& text) const override {
    std::vector<int32_t> out(prefix_);
    encode_into(text, out);
    out.insert(out.end(), suffix_.begin(), suffix_.end());
    return out;
  }
  std::string decode(const std::vector<int32_t>& ids) const override { return decode_impl(ids, true); }
  std::string decode_with_specials(const std::vector<int32_t>& ids) const override { return decode_impl(ids, false); }
  int64_t vocab_size() const override { return static_cast<int64_t>(tokens_.size()); }
  int32_t bos() const override { return bos_; }
  int32_t eos() const override { return eos_; }
  int32_t pad() const override { return pad_; }
  std::string id_to_token(int32_t id) const override {
    const std::string* t = token_of(id);
    HZ_CHECK(t != nullptr, ValueError, path_, ": no token has id ", id, " (ids run from 0 to ", vocab_size() - 1, ")");
    return *t;
  }
  std::optional<int32_t> token_to_id(std::string_view token) const override {
    const auto it = added_by_content_.find(std::string(token));
    if (it != added_by_content_.end()) return it->second;
    return model_->token_to_id(token);
  }
  bool is_special(int32_t id) const override {
    const std::string* t = token_of(id);
    return t != nullptr && special_contents_.count(*t) > 0;
  }
  std::vector<int32_t> special_ids() const override { return special_ids_; }
  std::string name() const override { return path_; }
  std::string fingerprint() const override { return fingerprint_; }

 private:
  void encode_into(std::string_view text, std::vector<int32_t>& out) const;
  void pre_tokenize(size_t stage, std::string_view s, bool at_origin, std::vector<int32_t>& out) const;
  void find_added(std::string_view s, const Matcher& m, std::vector<Piece>& out) const;
  const std::string* token_of(int32_t id) const {
    if (id < 0 || id >= static_cast<int32_t>(tokens_.size()) || !has_token_[static_cast<size_t>(id)]) return nullptr;
    return &tokens_[static_cast<size_t>(id)];
  }
  std::string decode_impl(const std::vector<int32_t>& ids, bool skip_special) const;
  void resolve_roles(const Reader& rd, const std::string& config_path);

  std::string path_, fingerprint_;
  std::vector<Normalizer> normalizers_;
  std::vector<PreTokenizer> pre_;
  bool byte_level_ = false;  // the last pre-tokenizer is ByteLevel
  std::unique_ptr<BpeModel> model_;
  std::vector<Decoder> decoders_;
  bool has_decoder_ = false;
  std::vector<int32_t> prefix_, suffix_;  // post-processor, single sequence

  std::vector<AddedToken> added_;
  std::map<std::string, int32_t> added_by_content_;
  std::map<int32_t, size_t> added_by_id_;  // -> index in added_
  std::set<std::string> special_contents_;
  Matcher raw_matcher_, normalized_matcher_;

  std::vector<std::string> tokens_;  // id -> token (model vocab, then added tokens)
  std::vector<std::string> decode_form_;  // id -> the string decode() feeds the decoder
  std::vector<char> has_token_;
  std::vector<int32_t> special_ids_;
  int32_t bos_ = -1, eos_ = -1, pad_ = -1;
};

HfTokenizer::HfTokenizer(const std::string& path) : path_(path) {
  const json root = parse_json_file(path);
  const Reader rd{path};
  if (!root.is_object()) rd.fail("(top level)", "expected a JSON object (a tokenizer.json)");
  if (root.contains("version") && !(root["version"].is_string() && root["version"] == "1.0"))
    rd.fail("version", "unknown tokenizer.json version " + root["version"].dump() + " (Horizon reads version 1.0)");

  // model
  const json& m = rd.at(root, "model", "(top level)");
  if (!m.is_object()) rd.fail("model", "expected an object");
  const std::string mtype = m.contains("type") ? rd.str(m, "type", "model") : (m.contains("merges") ? "BPE" : "?");
  if (mtype != "BPE")
    rd.unsupported("model", "model " + mtype, "BPE models; give a SentencePiece .model file for Unigram models");
  if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"].get<double>() != 0.0)
    rd.fail("model.dropout", "BPE dropout " + m["dropout"].dump() + " makes encoding random; set it to null");
  BpeConfig cfg;
  const json& vocab = rd.at(m, "vocab", "model");
  if (!vocab.is_object()) rd.fail("model.vocab", "expected an object {token: id}");
  cfg.vocab.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer()) rd.fail("model.vocab." + it.key(), "expected an integer id");
    cfg.vocab.emplace(it.key(), it.value().get<int32_t>());
  }
  const json& merges = rd.at(m, "merges", "model");
  if (!merges.is_array()) rd.fail("model.merges", "expected a list");
  cfg.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& x = merges[i];
    if (x.is_string()) {  // legacy "a b" (a "#version" line is skipped, as the library does)
      const std::string s = x.get<std::string>();
      if (s.rfind("#version", 0) == 0) continue;
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        rd.fail("model.merges[" + std::to_string(i) + "]", "'" + s + "' is not two tokens separated by one space");
      cfg.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (x.is_array() && x.size() == 2 && x[0].is_string() && x[1].is_string()) {
      cfg.merges.emplace_back(x[0].get<std::string>(), x[1].get<std::string>());
    } else {
      rd.fail("model.merges[" + std::to_string(i) + "]", "expected \"a b\" or [\"a\", \"b\"], got " + x.dump());
    }
  }
  cfg.unk_token = rd.opt_str(m, "unk_token", "model");
  cfg.continuing_subword_prefix = rd.opt_str(m, "continuing_subword_prefix", "model");
  cfg.end_of_word_suffix = rd.opt_str(m, "end_of_word_suffix", "model");
  cfg.fuse_unk = rd.flag(m, "fuse_unk", false, "model");
  cfg.byte_fallback = rd.flag(m, "byte_fallback", false, "model");
  cfg.ignore_merges = rd.flag(m, "ignore_merges", false, "model");
  model_ = std::make_unique<BpeModel>(std::move(cfg), path);

  // pipeline
  if (root.contains("normalizer")) read_normalizer(rd, root["normalizer"], "normalizer", normalizers_);
  if (root.contains("pre_tokenizer")) read_pre_tokenizer(rd, root["pre_tokenizer"], "pre_tokenizer", pre_);
  byte_level_ = !pre_.empty() && pre_.back().kind == PreTokenizer::Kind::ByteLevel;
  has_decoder_ = root.contains("decoder") && !root["decoder"].is_null();
  if (has_decoder_) read_decoder(rd, root["decoder"], "decoder", decoders_);

  // added tokens: ids as the library assigns them on load
  int64_t next_id = model_->size();
  if (root.contains("added_tokens") && !root["added_tokens"].is_null()) {
    const json& list = root["added_tokens"];
    if (!list.is_array()) rd.fail("added_tokens", "expected a list");
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string p = "added_tokens[" + std::to_string(i) + "]";
      AddedToken t;
      t.content = rd.str(list[i], "content", p);
      t.special = rd.flag(list[i], "special", false, p);
      t.single_word = rd.flag(list[i], "single_word", false, p);
      t.lstrip = rd.flag(list[i], "lstrip", false, p);
      t.rstrip = rd.flag(list[i], "rstrip", false, p);
      t.normalized = rd.flag(list[i], "normalized", !t.special, p);
      if (t.content.empty()) continue;
      if (uc::invalid_utf8_offset(t.content) != uc::npos) rd.fail(p + ".content", "is not valid UTF-8");
      const auto existing = added_by_content_.find(t.content);
      if (existing != added_by_content_.end()) {
        t.id = existing->second;
      } else if (const auto mid = model_->token_to_id(t.content)) {
        t.id = *mid;
      } else {
        t.id = static_cast<int32_t>(next_id++);
      }
      bool unused = true;
      t.match = t.normalized && !normalizers_.empty() ? normalize(normalizers_, t.content, unused) : t.content;
      added_by_content_[t.content] = t.id;
      if (t.special) special_contents_.insert(t.content);
      const auto prev = added_by_id_.find(t.id);
      if (prev != added_by_id_.end()) added_[prev->second] = t;
      else {
        added_by_id_[t.id] = added_.size();
        added_.push_back(t);
      }
    }
  }
  for (const AddedToken& t : added_) (t.normalized ? normalized_matcher_ : raw_matcher_).add(t.match, t.id);

  // id -> token tables
  int32_t max_id = model_->max_id();
  for (const AddedToken& t : added_) max_id = std::max(max_id, t.id);
  tokens_.assign(static_cast<size_t>(max_id + 1), std::string());
  decode_form_ = tokens_;
  has_token_.assign(static_cast<size_t>(max_id + 1), 0);
  for (int32_t id = 0; id <= model_->max_id(); ++id)
    if (const std::string* tok = model_->id_to_token(id)) {
      tokens_[id] = decode_form_[id] = *tok;
      has_token_[id] = 1;
    }
  for (const AddedToken& t : added_) {
    tokens_[t.id] = t.content;
    decode_form_[t.id] = t.normalized ? t.match : t.content;
    has_token_[t.id] = 1;
  }
  for (int32_t id = 0; id <= max_id; ++id)
    if (has_token_[id] && special_contents_.count(tokens_[id])) special_ids_.push_back(id);

  // post-processor (single sequence)
  std::function<void(const json&, const std::string&)> read_post = [&](const json& j, const std::string& p) {
    if (j.is_null()) return;
    const std::string t = rd.type(j, p);
    std::vector<int32_t> pre, suf;
    if (t == "Sequence") {
      const json& list = rd.at(j, "processors", p);
      for (size_t i = 0; i < list.size(); ++i) read_post(list[i], p + ".processors[" + std::to_string(i) + "]");
      return;
    } else if (t == "ByteLevel") {
      return;
    } else if (t == "TemplateProcessing") {
      const json& single = rd.at(j, "single", p);
      const json& specials = rd.at(j, "special_tokens", p);
      bool seen_a = false;
      for (size_t i = 0; i < single.size(); ++i) {
        const json& item = single[i];
        const std::string ip = p + ".single[" + std::to_string(i) + "]";
        if (item.contains("Sequence")) {
          if (rd.str(item["Sequence"], "id", ip + ".Sequence") != "A" || seen_a)
            rd.fail(ip, "a single-sequence template must hold the sequence $A exactly once");
          seen_a = true;
        } else if (item.contains("SpecialToken")) {
          const std::string name = rd.str(item["SpecialToken"], "id", ip + ".SpecialToken");
          if (!specials.contains(name)) rd.fail(p + ".special_tokens", "has no entry for '" + name + "'");
          for (const json& id : rd.at(specials[name], "ids", p + ".special_tokens." + name))
            (seen_a ? suf : pre).push_back(id.get<int32_t>());
        } else {
          rd.fail(ip, "expected {\"SpecialToken\": ...} or {\"Sequence\": ...}");
        }
      }
      if (!seen_a) rd.fail(p + ".single", "the template has no $A");
    } else if (t == "RobertaProcessing" || t == "BertProcessing") {
      const json& cls = rd.at(j, "cls", p);
      const json& sep = rd.at(j, "sep", p);
      if (!cls.is_array() || cls.size() != 2 || !sep.is_array() || sep.size() != 2)
        rd.fail(p, "cls and sep must be [token, id] pairs");
      pre.push_back(cls[1].get<int32_t>());
      suf.push_back(sep[1].get<int32_t>());
    } else {
      rd.unsupported(p, "post-processor " + t,
                     "ByteLevel, TemplateProcessing, RobertaProcessing, BertProcessing and Sequence");
    }
    prefix_.insert(prefix_.begin(), pre.begin(), pre.end());
    suffix_.insert(suffix_.end(), suf.begin(), suf.end());
  };
  if (root.contains("post_processor")) read_post(root["post_processor"], "post_processor");
  for (int32_t id : prefix_) HZ_CHECK(token_of(id), ValueError, path, ": post_processor adds id ", id, ", which has no token");
  for (int32_t id : suffix_) HZ_CHECK(token_of(id), ValueError, path, ": post_processor adds id ", id, ", which has no token");

  const std::filesystem::path fp(path);
  const std::string config = fp.filename() == "tokenizer.json" ? (fp.parent_path() / "tokenizer_config.json").string() : "";
  resolve_roles(rd, config);
  fingerprint_ = "hf-bpe-" + file_fingerprint(path);
  if (!config.empty() && std::filesystem::exists(config)) fingerprint_ += "-" + file_fingerprint(config).substr(0, 8);
}

void HfTokenizer::resolve_roles(const Reader& rd, const std::string& config_path) {
  const auto id_of = [&](const std::string& t) -> int32_t {
    const auto id = token_to_id(t);
    return id ? *id : -1;
  };
  if (!config_path.empty() && std::filesystem::exists(config_path)) {
    const json cfg = parse_json_file(config_path);
    const Reader crd{config_path};
    const auto role = [&](const char* key, int32_t& slot) {
      if (!cfg.is_object() || !cfg.contains(key) || cfg[key].is_null()) return;
      const json& v = cfg[key];
      const std::string name = v.is_object() ? crd.str(v, "content", key) : v.is_string() ? v.get<std::string>() : "";
      if (!v.is_object() && !v.is_string()) crd.fail(key, "expected a token string or {\"content\": ...}");
      slot = id_of(name);
      if (slot < 0) crd.fail(key, "'" + name + "' is not a token of " + path_);
    };
    role("bos_token", bos_);
    role("eos_token", eos_);
    role("pad_token", pad_);
  }
  const auto by_name = [&](std::initializer_list<const char*> names) -> int32_t {
    for (const char* n : names) {
      const int32_t id = id_of(n);
      if (id >= 0 && is_special(id)) return id;
    }
    return -1;
  };
  if (eos_ < 0) eos_ = by_name({"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|im_end|>", "<|eot_id|>", "[SEP]"});
  if (bos_ < 0) bos_ = by_name({"<|begin_of_text|>", "<s>", "<bos>", "<|startoftext|>", "[CLS]"});
  if (pad_ < 0) pad_ = by_name({"<pad>", "<|pad|>", "[PAD]", "<|finetune_right_pad_id|>"});
  if (eos_ < 0 && !suffix_.empty()) eos_ = suffix_.back();
  if (eos_ < 0 && special_ids_.size() == 1) eos_ = special_ids_[0];
  if (bos_ < 0 && !prefix_.empty()) bos_ = prefix_.front();
  if (eos_ < 0) eos_ = bos_;
  if (eos_ < 0)
    rd.fail("added_tokens", "no special token can serve as end-of-document (EOS): Horizon separates documents with "
                            "EOS. Add one when building the tokenizer (e.g. special_tokens=[\"<|endoftext|>\"]) or "
                            "name it as eos_token in a tokenizer_config.json next to tokenizer.json");
  if (bos_ < 0) bos_ = eos_;
  if (pad_ < 0) pad_ = eos_;
}

void HfTokenizer::find_added(std::string_view s, const Matcher& m, std::vector<Piece>& out) const {
  out.clear();
  if (s.empty()) return;
  if (m.empty()) {
    out.push_back({0, s.size(), -1});
    return;
  }
  size_t start_offset = 0;
  m.for_each(s, [&](size_t b, size_t e, int32_t id) {
    const AddedToken& t = added_[added_by_id_.at(id)];
    if (t.single_word) {
      const bool start_space = b == 0 || !uc::is_word_char(uc::prev_codepoint(s, b));
      size_t k = e;
      const bool stop_space = e == s.size() || !uc::is_word_char(uc::next_codepoint(s, k));
      if (!start_space || !stop_space) return;
    }
    if (t.lstrip) {  // take the whitespace before it (not what a previous match took)
      size_t nb = b;
      while (nb > 0) {
        size_t j = nb - 1;
        while (j > 0 && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) --j;
        size_t k = j;
        if (!uc::is_whitespace(uc::next_codepoint(s, k))) break;
        nb = j;
      }
      b = std::max(nb, start_offset);
    }
    if (t.rstrip) {
      while (e < s.size()) {
        size_t k = e;
        if (!uc::is_whitespace(uc::next_codepoint(s, k))) break;
        e = k;
      }
    }
    if (start_offset < b) out.push_back({start_offset, b, -1});
    out.push_back({b, e, id});
    start_offset = e;
  });
  if (start_offset != s.size()) out.push_back({start_offset, s.size(), -1});
}

void HfTokenizer::encode_into(std::string_view text, std::vector<int32_t>& out) const {
  const size_t bad = uc::invalid_utf8_offset(text);
  HZ_CHECK(bad == uc::npos, ValueError, "text is not valid UTF-8 at byte ", bad, " (tokenizer ", path_,
           " works on Unicode text; re-encode the input as UTF-8)");
  std::vector<Piece> raw, norm;
  find_added(text, raw_matcher_, raw);
  for (const Piece& p : raw) {
    if (p.id >= 0) {
      out.push_back(p.id);
      continue;
    }
    bool at_origin = p.b == 0;
    std::string_view s = text.substr(p.b, p.e - p.b);
    std::string buf;
    if (!normalizers_.empty()) {
      buf = normalize(normalizers_, s, at_origin);
      s = buf;
    }
    find_added(s, normalized_matcher_, norm);
    for (const Piece& q : norm) {
      if (q.id >= 0) out.push_back(q.id);
      else pre_tokenize(0, s.substr(q.b, q.e - q.b), at_origin && q.b == 0, out);
    }
  }
}

void HfTokenizer::pre_tokenize(size_t stage, std::string_view s, bool at_origin, std::vector<int32_t>& out) const {
  if (s.empty()) return;
  if (stage == pre_.size()) {
    model_->encode_word(s, byte_level_, out);
    return;
  }
  // per-stage scratch (the recursion never reuses a stage's buffers before it is done with them)
  struct Scratch {
    std::string str;
    std::vector<Span> spans;
    std::vector<std::pair<size_t, size_t>> matches, pieces;
  };
  thread_local std::deque<Scratch> scratch;  // growing a deque keeps references to its elements
  if (scratch.size() <= stage) scratch.resize(stage + 1);
  Scratch& sc = scratch[stage];
  const PreTokenizer& p = pre_[stage];
  std::string_view cur = s;
  switch (p.kind) {
    case PreTokenizer::Kind::ByteLevel:
      if (p.add_prefix_space && s[0] != ' ') {
        sc.str.assign(1, ' ');
        sc.str.append(s.data(), s.size());
        cur = sc.str;
      }
      if (!p.regex) {
        pre_tokenize(stage + 1, cur, at_origin, out);
        return;
      }
      regex_spans(*p.regex, cur, false, sc.matches, sc.spans);
      apply_behavior(sc.spans, Behavior::Isolated, sc.pieces);
      break;
    case PreTokenizer::Kind::Split:
      regex_spans(*p.regex, cur, p.invert, sc.matches, sc.spans);
      apply_behavior(sc.spans, p.behavior, sc.pieces);
      break;
    case PreTokenizer::Kind::Digits:
      char_spans(cur, uc::is_numeric, sc.spans);
      apply_behavior(sc.spans, p.individual_digits ? Behavior::Isolated : Behavior::Contiguous, sc.pieces);
      break;
    case PreTokenizer::Kind::Punctuation:
      char_spans(cur, uc::is_punctuation, sc.spans);
      apply_behavior(sc.spans, p.behavior, sc.pieces);
      break;
    case PreTokenizer::Kind::WhitespaceSplit:
      char_spans(cur, uc::is_whitespace, sc.spans);
      apply_behavior(sc.spans, Behavior::Removed, sc.pieces);
      break;
    case PreTokenizer::Kind::Metaspace: {
      sc.str.clear();
      for (char c : s) {
        if (c == ' ') sc.str += p.replacement_str;
        else sc.str.push_back(c);
      }
      const bool starts = sc.str.compare(0, p.replacement_str.size(), p.replacement_str) == 0;
      if (!starts && (p.prepend == PreTokenizer::Prepend::Always || (p.prepend == PreTokenizer::Prepend::First && at_origin)))
        sc.str.insert(0, p.replacement_str);
      cur = sc.str;
      if (!p.split) {
        pre_tokenize(stage + 1, cur, at_origin, out);
        return;
      }
      const uint32_t rep = p.replacement;
      char_spans(cur, [rep](uint32_t c) { return c == rep; }, sc.spans);
      apply_behavior(sc.spans, Behavior::MergedWithNext, sc.pieces);
      break;
    }
  }
  for (const auto& [b, e] : sc.pieces) pre_tokenize(stage + 1, cur.substr(b, e - b), at_origin && b == 0, out);
}

std::string HfTokenizer::decode_impl(const std::vector<int32_t>& ids, bool skip_special) const {
  std::vector<std::string> toks;
  std::vector<char> literal;
  toks.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    const std::string* t = token_of(id);
    HZ_CHECK(t != nullptr, ValueError, path_, ": id ", id, " at position ", i, " is not a token (the vocabulary is [0, ",
             vocab_size(), ")); were these ids made by another tokenizer?");
    if (skip_special && special_contents_.count(*t)) continue;
    toks.push_back(decode_form_[static_cast<size_t>(id)]);
    literal.push_back(model_->id_to_token(id) == nullptr);
  }
  if (!has_decoder_) {
    std::string s;
    for (size_t i = 0; i < toks.size(); ++i) s += (i ? " " : "") + toks[i];
    return s;
  }
  for (const Decoder& d : decoders_) run_decoder(d, toks, literal);
  std::string s;
  for (const std::string& t : toks) s += t;
  return s;
}

}  // namespace

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& path) {
  try {
    return std::make_unique<HfTokenizer>(path);
  } catch (const nlohmann::json::exception& e) {  // a value of the wrong JSON type somewhere
    throw ValueError(detail::concat_msg(path, ": malformed tokenizer.json (", e.what(), ")"));
  }
}

}  // namespace hz::data
