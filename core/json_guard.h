// Horizon: bounds every JSON text a user feeds Horizon must satisfy before it is parsed.
//
// nlohmann::json parses iteratively and destroys values iteratively, but serialises (dump()),
// copies and compares them recursively: a value nested ~100,000 deep parses fine and then
// overflows the stack the first time it is printed in an error message. So every reader scans
// the text first and refuses nesting deeper than kMaxJsonDepth (64: Hugging Face files nest at
// most ~6 deep) before nlohmann sees it; no deep value ever exists. Whole files are read with a
// size cap (core/file.h's read_file_capped; each format states its own in its header comment) so a
// file cannot make Horizon allocate more than the cap plus the parsed value.
//
// No dependency on nlohmann: callers throw their own hz::Error subclass with the message built
// here (it names the file).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "core/file.h"  // read_file_capped: every whole-file read, through the input check

namespace hz {

constexpr size_t kMaxJsonDepth = 64;

// Empty when `text` nests arrays/objects at most max_depth deep (brackets inside strings do not
// count); otherwise what is wrong ("JSON nested deeper than 64 levels at byte N").
inline std::string json_depth_problem(std::string_view text, size_t max_depth = kMaxJsonDepth) {
  size_t depth = 0;
  bool in_string = false, escape = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escape) escape = false;
      else if (c == '\\') escape = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        return "JSON nested deeper than " + std::to_string(max_depth) + " levels (at byte " + std::to_string(i) +
               "); refused: no file Horizon reads nests that deep, so the file is corrupt or hostile";
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return {};
}

}  // namespace hz
