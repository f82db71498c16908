// Horizon: bounds every JSON text a user feeds Horizon must satisfy before it is parsed.
//
// nlohmann::json parses iteratively and destroys values iteratively, but serialises (dump()),
// copies and compares them recursively: a value nested ~100,000 deep parses fine and then
// overflows the stack the first time it is printed in an error message. So every reader scans
// the text first and refuses nesting deeper than kMaxJsonDepth (64: Hugging Face files nest at
// most ~6 deep) before nlohmann sees it; no deep value ever exists. Whole files are read with a
// size cap (each format states its own in its header comment) so a file cannot make Horizon
// allocate more than the cap plus the parsed value.
//
// No dependency on nlohmann: callers throw their own hz::Error subclass with the message built
// here (it names the file).
#pragma once
#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>

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

// Reads the whole file at `path` into `out` when it holds at most max_bytes; otherwise returns
// what is wrong (cannot open, too large: naming the size and the cap). Empty on success.
inline std::string read_file_capped(const std::string& path, uint64_t max_bytes, std::string& out) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::string("cannot open: ") + std::strerror(errno);
  if (S_ISDIR(st.st_mode)) return "is a directory, not a file";
  if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) > max_bytes)
    return "the file holds " + std::to_string(st.st_size) + " bytes, more than the " + std::to_string(max_bytes) +
           " this format allows; refused (corrupt, or not the file you meant)";
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::string("cannot open: ") + std::strerror(errno);
  out.clear();
  char buf[1 << 16];
  while (in) {
    in.read(buf, sizeof buf);
    out.append(buf, static_cast<size_t>(in.gcount()));
    if (out.size() > max_bytes)
      return "the file holds more than the " + std::to_string(max_bytes) + " bytes this format allows; refused";
  }
  if (in.bad()) return std::string("read error: ") + std::strerror(errno);
  return {};
}

}  // namespace hz
