#include "data/hf_pipeline.h"

#include <algorithm>
#include <cctype>
#include <deque>
#include <filesystem>
#include <fstream>

#include "core/json_guard.h"
#include "data/regex.h"
#include "data/unicode.h"

namespace hz::data::hf {

namespace uc = unicode;

json parse_json_file(const std::string& path) {
  std::string text;
  const std::string why = read_file_capped(path, kMaxTokenizerJsonBytes, text);
  if (!why.empty()) {
    HZ_CHECK(why.rfind("cannot open", 0) != 0, ValueError, "cannot open tokenizer file '", path, "'",
             std::filesystem::path(path).is_relative() ? " (relative to " + std::filesystem::current_path().string() + ")" : "",
             "; give data.tokenizer as byte, a path to a tokenizer.json or to a SentencePiece .model");
    throw ValueError(path + ": " + why);
  }
  if (const std::string deep = json_depth_problem(text); !deep.empty()) throw ValueError(path + ": " + deep);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw ValueError(detail::concat_msg("'", path, "' is not valid JSON (", e.what(),
                                        "); is it a complete tokenizer.json?"));
  }
}

namespace {

// GPT-2's pre-tokenization regex, which the ByteLevel pre-tokenizer applies when use_regex is set.
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// The component's "pattern" ({"String": s} or {"Regex": r}), compiled.
std::unique_ptr<Regex> compile_pattern(const JsonReader& rd, const json& j, const std::string& path) {
  const auto [pat, literal] = rd.pattern(j, path);
  return std::make_unique<Regex>(pat, literal, rd.file + ": " + path);
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

Behavior parse_behavior(const JsonReader& rd, const json& j, const std::string& path) {
  const std::string b = rd.str(j, "behavior", path);
  if (b == "Removed") return Behavior::Removed;
  if (b == "Isolated") return Behavior::Isolated;
  if (b == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::MergedWithNext;
  if (b == "Contiguous") return Behavior::Contiguous;
  rd.fail(path + ".behavior", "unknown behavior '" + b + "'");
}

}  // namespace

// ---- normalizers ------------------------------------------------------------------------------

struct Normalizers::Step {
  enum class Kind { NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend, Strip, StripAccents } kind;
  std::unique_ptr<Regex> regex;
  std::string content;
  bool left = false, right = false;
};

Normalizers::Normalizers() = default;
Normalizers::~Normalizers() = default;

void Normalizers::read(const JsonReader& rd, const json& j, const std::string& path) {
  if (j.is_null()) return;
  const std::string t = rd.type(j, path);
  Step n{};
  if (t == "Sequence") {
    const json& list = rd.at(j, "normalizers", path);
    for (size_t i = 0; i < list.size(); ++i) read(rd, list[i], path + ".normalizers[" + std::to_string(i) + "]");
    return;
  }
  if (t == "NFC") n.kind = Step::Kind::NFC;
  else if (t == "NFD") n.kind = Step::Kind::NFD;
  else if (t == "NFKC") n.kind = Step::Kind::NFKC;
  else if (t == "NFKD") n.kind = Step::Kind::NFKD;
  else if (t == "Lowercase") n.kind = Step::Kind::Lowercase;
  else if (t == "StripAccents") n.kind = Step::Kind::StripAccents;
  else if (t == "Replace") {
    n.kind = Step::Kind::Replace;
    n.regex = compile_pattern(rd, j, path);
    n.content = rd.str(j, "content", path);
  } else if (t == "Prepend") {
    n.kind = Step::Kind::Prepend;
    n.content = rd.str(j, "prepend", path);
  } else if (t == "Strip") {
    n.kind = Step::Kind::Strip;
    n.left = rd.flag(j, "strip_left", false, path);
    n.right = rd.flag(j, "strip_right", false, path);
  } else {
    rd.unsupported(path, "normalizer " + t,
                   "NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend, Strip, StripAccents and Sequence; "
                   "for a SentencePiece 'Precompiled' normalizer give the .model file instead");
  }
  steps_.push_back(std::move(n));
}

std::string Normalizers::apply(std::string_view in, bool& at_origin) const {
  std::string s(in);
  for (const Step& n : steps_) {
    switch (n.kind) {
      case Step::Kind::NFC: s = uc::normalize(s, uc::NormalForm::NFC); break;
      case Step::Kind::NFD: s = uc::normalize(s, uc::NormalForm::NFD); break;
      case Step::Kind::NFKC: s = uc::normalize(s, uc::NormalForm::NFKC); break;
      case Step::Kind::NFKD: s = uc::normalize(s, uc::NormalForm::NFKD); break;
      case Step::Kind::Lowercase: s = uc::lowercase(s); break;
      case Step::Kind::Prepend:
        if (!s.empty()) s.insert(0, n.content);
        break;
      case Step::Kind::Replace: {
        if (n.content.empty() && !s.empty()) {  // a match at 0 replaced by nothing moves the origin
          std::vector<std::pair<size_t, size_t>> m;
          n.regex->find_all(s, m);
          if (!m.empty() && m[0].first == 0 && m[0].second > 0) at_origin = false;
        }
        s = n.regex->replace_all(s, n.content);
        break;
      }
      case Step::Kind::Strip: {
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
      case Step::Kind::StripAccents: {
        std::string r;
        size_t first = 0;
        if (!s.empty() && uc::is_combining_mark(uc::next_codepoint(s, first))) at_origin = false;
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

struct PreTokenizers::Step {
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

PreTokenizers::PreTokenizers() = default;
PreTokenizers::~PreTokenizers() = default;

bool PreTokenizers::byte_level() const { return !steps_.empty() && steps_.back().kind == Step::Kind::ByteLevel; }

void PreTokenizers::read(const JsonReader& rd, const json& j, const std::string& path) {
  if (j.is_null()) return;
  const std::string t = rd.type(j, path);
  if (t == "Sequence") {
    const json& list = rd.at(j, "pretokenizers", path);
    for (size_t i = 0; i < list.size(); ++i)
      read(rd, list[i], path + ".pretokenizers[" + std::to_string(i) + "]");
    return;
  }
  if (byte_level())
    rd.unsupported(path, "pre-tokenizer " + t + " after ByteLevel",
                   "pipelines whose ByteLevel pre-tokenizer is the last step, as every byte-level BPE has it");
  Step p{};
  if (t == "ByteLevel") {
    p.kind = Step::Kind::ByteLevel;
    p.add_prefix_space = rd.flag(j, "add_prefix_space", true, path);
    if (rd.flag(j, "use_regex", true, path)) p.regex = std::make_unique<Regex>(kGpt2Pattern, false, rd.file + ": " + path);
  } else if (t == "Split") {
    p.kind = Step::Kind::Split;
    p.regex = compile_pattern(rd, j, path);
    p.behavior = parse_behavior(rd, j, path);
    p.invert = rd.flag(j, "invert", false, path);
  } else if (t == "Digits") {
    p.kind = Step::Kind::Digits;
    p.individual_digits = rd.flag(j, "individual_digits", false, path);
  } else if (t == "Punctuation") {
    p.kind = Step::Kind::Punctuation;
    p.behavior = j.contains("behavior") ? parse_behavior(rd, j, path) : Behavior::Isolated;
  } else if (t == "WhitespaceSplit") {
    p.kind = Step::Kind::WhitespaceSplit;
  } else if (t == "Metaspace") {
    p.kind = Step::Kind::Metaspace;
    p.replacement_str = rd.str(j, "replacement", path);
    p.replacement = rd.single_char(p.replacement_str, path + ".replacement");
    if (j.contains("prepend_scheme")) {
      const std::string s = rd.str(j, "prepend_scheme", path);
      if (s == "always") p.prepend = Step::Prepend::Always;
      else if (s == "first") p.prepend = Step::Prepend::First;
      else if (s == "never") p.prepend = Step::Prepend::Never;
      else rd.fail(path + ".prepend_scheme", "unknown scheme '" + s + "'");
    } else {  // files written before prepend_scheme existed
      p.prepend = rd.flag(j, "add_prefix_space", true, path) ? Step::Prepend::Always : Step::Prepend::Never;
    }
    p.split = rd.flag(j, "split", true, path);
  } else {
    rd.unsupported(path, "pre-tokenizer " + t,
                   "ByteLevel, Split, Digits, Punctuation, WhitespaceSplit, Metaspace and Sequence");
  }
  steps_.push_back(std::move(p));
}

void PreTokenizers::split(std::string_view s, bool at_origin, const std::function<void(std::string_view)>& word) const {
  run(0, s, at_origin, word);
}

void PreTokenizers::run(size_t stage, std::string_view s, bool at_origin, const std::function<void(std::string_view)>& word) const {
  if (s.empty()) return;
  if (stage == steps_.size()) {
    word(s);
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
  const Step& p = steps_[stage];
  std::string_view cur = s;
  switch (p.kind) {
    case Step::Kind::ByteLevel:
      if (p.add_prefix_space && s[0] != ' ') {
        sc.str.assign(1, ' ');
        sc.str.append(s.data(), s.size());
        cur = sc.str;
      }
      if (!p.regex) {
        run(stage + 1, cur, at_origin, word);
        return;
      }
      regex_spans(*p.regex, cur, false, sc.matches, sc.spans);
      apply_behavior(sc.spans, Behavior::Isolated, sc.pieces);
      break;
    case Step::Kind::Split:
      regex_spans(*p.regex, cur, p.invert, sc.matches, sc.spans);
      apply_behavior(sc.spans, p.behavior, sc.pieces);
      break;
    case Step::Kind::Digits:
      char_spans(cur, uc::is_numeric, sc.spans);
      apply_behavior(sc.spans, p.individual_digits ? Behavior::Isolated : Behavior::Contiguous, sc.pieces);
      break;
    case Step::Kind::Punctuation:
      char_spans(cur, uc::is_punctuation, sc.spans);
      apply_behavior(sc.spans, p.behavior, sc.pieces);
      break;
    case Step::Kind::WhitespaceSplit:
      char_spans(cur, uc::is_whitespace, sc.spans);
      apply_behavior(sc.spans, Behavior::Removed, sc.pieces);
      break;
    case Step::Kind::Metaspace: {
      sc.str.clear();
      for (char c : s) {
        if (c == ' ') sc.str += p.replacement_str;
        else sc.str.push_back(c);
      }
      const bool starts = sc.str.compare(0, p.replacement_str.size(), p.replacement_str) == 0;
      if (!starts && (p.prepend == Step::Prepend::Always || (p.prepend == Step::Prepend::First && at_origin)))
        sc.str.insert(0, p.replacement_str);
      cur = sc.str;
      if (!p.split) {
        run(stage + 1, cur, at_origin, word);
        return;
      }
      const uint32_t rep = p.replacement;
      char_spans(cur, [rep](uint32_t c) { return c == rep; }, sc.spans);
      apply_behavior(sc.spans, Behavior::MergedWithNext, sc.pieces);
      break;
    }
  }
  for (const auto& [b, e] : sc.pieces) run(stage + 1, cur.substr(b, e - b), at_origin && b == 0, word);
}

// ---- decoders ---------------------------------------------------------------------------------

struct Decoders::Step {
  enum class Kind { ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, BPE } kind;
  std::unique_ptr<Regex> regex;
  std::string content;        // Replace: replacement; Strip: the character; BPE: suffix
  int64_t start = 0, stop = 0;
  std::string replacement;    // Metaspace
  bool prepend = true;        // Metaspace: prepend_scheme != never
};

Decoders::Decoders() = default;
Decoders::~Decoders() = default;

void Decoders::read(const JsonReader& rd, const json& j, const std::string& path) {
  if (j.is_null()) return;
  const std::string t = rd.type(j, path);
  if (t == "Sequence") {
    const json& list = rd.at(j, "decoders", path);
    for (size_t i = 0; i < list.size(); ++i) read(rd, list[i], path + ".decoders[" + std::to_string(i) + "]");
    return;
  }
  Step d{};
  if (t == "ByteLevel") d.kind = Step::Kind::ByteLevel;
  else if (t == "ByteFallback") d.kind = Step::Kind::ByteFallback;
  else if (t == "Fuse") d.kind = Step::Kind::Fuse;
  else if (t == "Replace") {
    d.kind = Step::Kind::Replace;
    d.regex = compile_pattern(rd, j, path);
    d.content = rd.str(j, "content", path);
  } else if (t == "Strip") {
    d.kind = Step::Kind::Strip;
    d.content = rd.str(j, "content", path);
    rd.single_char(d.content, path + ".content");
    d.start = rd.integer(j, "start", path);
    d.stop = rd.integer(j, "stop", path);
  } else if (t == "Metaspace") {
    d.kind = Step::Kind::Metaspace;
    d.replacement = rd.str(j, "replacement", path);
    rd.single_char(d.replacement, path + ".replacement");
    if (j.contains("prepend_scheme")) d.prepend = rd.str(j, "prepend_scheme", path) != "never";
    else d.prepend = rd.flag(j, "add_prefix_space", true, path);
  } else if (t == "BPEDecoder") {
    d.kind = Step::Kind::BPE;
    d.content = j.contains("suffix") ? rd.str(j, "suffix", path) : "</w>";
  } else {
    rd.unsupported(path, "decoder " + t, "ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, BPEDecoder and Sequence");
  }
  steps_.push_back(std::move(d));
}

// One decoder step over the token strings (the library's decode_chain), on bytes. literal[i]: token
// i is an added token outside the model's vocabulary, whose content is text, not byte-level
// characters (only read while the tokens are still one per id, i.e. by a leading ByteLevel step).
void Decoders::run_step(const Step& d, std::vector<std::string>& toks, const std::vector<char>& literal) {
  switch (d.kind) {
    case Step::Kind::ByteLevel: {
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
    case Step::Kind::Replace:
      for (std::string& t : toks) t = d.regex->replace_all(t, d.content);
      break;
    case Step::Kind::ByteFallback: {
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
    case Step::Kind::Fuse: {
      std::string all;
      for (const std::string& t : toks) all += t;
      toks.assign(1, std::move(all));
      break;
    }
    case Step::Kind::Strip: {
      const size_t c = d.content.size();
      for (std::string& t : toks) {
        size_t b = 0, e = t.size();
        for (int64_t k = 0; k < d.start && b + c <= e && t.compare(b, c, d.content) == 0; ++k) b += c;
        for (int64_t k = 0; k < d.stop && e >= b + c && t.compare(e - c, c, d.content) == 0; ++k) e -= c;
        t = t.substr(b, e - b);
      }
      break;
    }
    case Step::Kind::Metaspace: {
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
    case Step::Kind::BPE: {
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

std::string Decoders::decode(std::vector<std::string> toks, const std::vector<char>& literal) const {
  for (const Step& d : steps_) run_step(d, toks, literal);
  std::string s;
  for (const std::string& t : toks) s += t;
  return s;
}

// ---- added tokens -----------------------------------------------------------------------------

// Leftmost-longest search of a set of strings (a byte trie); matches do not overlap.
class AddedVocabulary::Matcher {
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

AddedVocabulary::AddedVocabulary() : raw_(std::make_unique<Matcher>()), normalized_(std::make_unique<Matcher>()) {}
AddedVocabulary::~AddedVocabulary() = default;

void AddedVocabulary::add(const AddedToken& t) {
  by_content_[t.content] = t.id;
  if (t.special) special_.insert(t.content);
  const auto prev = by_id_.find(t.id);
  if (prev != by_id_.end()) {
    tokens_[prev->second] = t;
  } else {
    by_id_[t.id] = tokens_.size();
    tokens_.push_back(t);
  }
}

void AddedVocabulary::build() {
  raw_ = std::make_unique<Matcher>();
  normalized_ = std::make_unique<Matcher>();
  for (const AddedToken& t : tokens_) (t.normalized ? *normalized_ : *raw_).add(t.match, t.id);
}

std::optional<int32_t> AddedVocabulary::id_of(const std::string& content) const {
  const auto it = by_content_.find(content);
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

void AddedVocabulary::split(std::string_view s, bool normalized, std::vector<Piece>& out) const {
  const Matcher& m = normalized ? *normalized_ : *raw_;
  out.clear();
  if (s.empty()) return;
  if (m.empty()) {
    out.push_back({0, s.size(), -1});
    return;
  }
  size_t start_offset = 0;
  m.for_each(s, [&](size_t b, size_t e, int32_t id) {
    const AddedToken& t = tokens_[by_id_.at(id)];
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

}  // namespace hz::data::hf
