#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/regex.h"

#include <pcre2.h>

#include "core/error.h"
#include "data/unicode.h"

namespace hz::data {

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

namespace {

std::string pcre2_message(int err) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(err, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

// One match-data block per thread: the overall match is all we read (no capture groups).
struct MatchData {
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  ~MatchData() { pcre2_match_data_free(md); }
};
pcre2_match_data* thread_match_data() {
  thread_local MatchData m;
  HZ_CHECK(m.md != nullptr, Error, "PCRE2: out of memory for match data");
  return m.md;
}

// Oniguruma's \s is the White_Space property; PCRE2's (with UCP) adds U+180E MONGOLIAN VOWEL
// SEPARATOR. Oniguruma's \w is letters, marks, numbers and connector punctuation; PCRE2's is
// letters, numbers and '_'. Rewrite these escapes as explicit classes so a pattern splits text
// exactly where the library splits it.
constexpr const char* kSpaceClass = "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
constexpr const char* kWordClass = "\\p{L}\\p{M}\\p{N}\\p{Pc}";

std::string onig_to_pcre2(const std::string& pat, const std::string& where) {
  std::string out;
  bool in_class = false;
  size_t class_start = 0;  // index just after '[' or '[^' (a ']' there is a literal)
  for (size_t i = 0; i < pat.size(); ++i) {
    const char c = pat[i];
    if (c == '\\' && i + 1 < pat.size()) {
      const char e = pat[i + 1];
      if (e == 'Q')
        throw ValueError(detail::concat_msg(where, ": the regular expression '", pat,
                                            "' uses \\Q...\\E quoting, which Horizon does not translate to PCRE2"));
      const char* cls = (e == 's' || e == 'S') ? kSpaceClass : (e == 'w' || e == 'W') ? kWordClass : nullptr;
      if (cls == nullptr) {
        out += pat.substr(i, 2);
      } else if (!in_class) {
        out += (e == 'S' || e == 'W') ? "[^" : "[";
        out += cls;
        out += "]";
      } else {
        HZ_CHECK(e == 's' || e == 'w', ValueError, where, ": the regular expression '", pat, "' uses \\", e,
                 " inside a character class, which Horizon does not translate to PCRE2");
        out += cls;
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      if (i + 1 < pat.size() && pat[i + 1] == '^') out.push_back(pat[++i]);
      class_start = i + 1;
      continue;
    }
    if (in_class && c == '[' && i + 1 < pat.size() && pat[i + 1] == ':') {  // [:alpha:]
      const size_t end = pat.find(":]", i + 2);
      HZ_CHECK(end != std::string::npos, ValueError, where, ": unterminated POSIX class in '", pat, "'");
      out += pat.substr(i, end + 2 - i);
      i = end + 1;
      continue;
    }
    if (in_class && c == ']' && i != class_start) in_class = false;
    out.push_back(c);
  }
  return out;
}

}  // namespace

Regex::Regex(const std::string& pattern, bool literal, const std::string& where)
    : pattern_(pattern), code_(std::make_unique<Code>()) {
  int err = 0;
  PCRE2_SIZE off = 0;
  const uint32_t opts = literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP;
  const std::string pcre = literal ? pattern : onig_to_pcre2(pattern, where);
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre.data()), pcre.size(), opts, &err, &off, nullptr);
  HZ_CHECK(code_->code != nullptr, ValueError, where, ": the regular expression '", pattern,
           "' does not compile with PCRE2 (", pcre2_message(err), " at offset ", off, ")");
  code_->jit = pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() = default;

void Regex::find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const {
  pcre2_match_data* md = thread_match_data();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  const size_t n = s.size();
  size_t from = 0;
  bool have_last = false;
  size_t last_end = 0;
  while (from <= n) {
    int rc = code_->jit ? pcre2_jit_match(code_->code, subject, n, from, PCRE2_NO_UTF_CHECK, md, nullptr)
                        : PCRE2_ERROR_JIT_BADOPTION;
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_JIT_BADOPTION)  // the interpreter has no such limit
      rc = pcre2_match(code_->code, subject, n, from, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    HZ_CHECK(rc >= 0, Error, "PCRE2 matching '", pattern_, "' failed: ", pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t b = ov[0], e = ov[1];
    if (b == e && have_last && e == last_end) {  // an empty match right after the last one: skip a character
      if (from >= n) return;
      from += unicode::sequence_length(static_cast<unsigned char>(s[from]));
      continue;
    }
    out.emplace_back(b, e);
    from = e;
    last_end = e;
    have_last = true;
  }
}

std::string Regex::replace_all(std::string_view s, std::string_view with) const {
  thread_local std::vector<std::pair<size_t, size_t>> matches;
  matches.clear();
  find_all(s, matches);
  std::string r;
  r.reserve(s.size());
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    r.append(s.data() + prev, b - prev);
    r.append(with.data(), with.size());
    prev = e;
  }
  r.append(s.data() + prev, s.size() - prev);
  return r;
}

}  // namespace hz::data
