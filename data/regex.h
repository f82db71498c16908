// Horizon data: regular expressions for tokenizer pipelines (PCRE2 with UTF + UCP, JIT-compiled).
//
// Patterns in tokenizer.json files are written for Oniguruma (the engine of the Hugging Face
// `tokenizers` library); the ones tokenizers use (GPT-2's, Llama 3's, Qwen2's: \p{L}, \p{N}, \s,
// (?i:...), (?!...), {1,3}) mean the same in PCRE2 with PCRE2_UCP, once \s \S \w \W are
// rewritten as Oniguruma's classes (its \s is White_Space, without the U+180E PCRE2 adds; its \w
// is letters, marks, numbers and connector punctuation). Matches are enumerated the way
// the library's Oniguruma binding does: left to right, each search starting where the previous
// match ended, and an empty match right after the previous match is skipped by advancing one
// character.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hz::data {

class Regex {
 public:
  // Throws hz::ValueError with PCRE2's message and the offset in the pattern. `literal`: the
  // pattern is a plain string (no metacharacters). `where` names the file and component for
  // error messages.
  Regex(const std::string& pattern, bool literal, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the [begin, end) byte ranges of the matches in s (valid UTF-8; not re-checked).
  void find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const;
  // s with every match (enumerated as find_all does) replaced by `with`.
  std::string replace_all(std::string_view s, std::string_view with) const;
  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::string pattern_;
  std::unique_ptr<Code> code_;
};

}  // namespace hz::data
