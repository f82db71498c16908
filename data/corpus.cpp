#include "data/corpus.h"

#include <glob.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>

#include "core/error.h"
#include "core/json_guard.h"

// The bytes of assets/kjv/kjv.txt.gz, embedded by data/kjv_blob.cpp (.incbin).
extern "C" {
__attribute__((visibility("hidden"))) extern const unsigned char hz_kjv_gz_begin[];
__attribute__((visibility("hidden"))) extern const unsigned char hz_kjv_gz_end[];
}

namespace hz::data {

namespace {

// The 66 books in canonical order, each the name of its Document and of its "## " header in
// assets/kjv/kjv.txt.gz (the same names as scripts/fixtures/make_kjv_asset.py's BOOKS).
constexpr const char* kBookNames[] = {
    "Genesis",         "Exodus",          "Leviticus",       "Numbers",         "Deuteronomy",
    "Joshua",          "Judges",          "Ruth",            "1 Samuel",        "2 Samuel",
    "1 Kings",         "2 Kings",         "1 Chronicles",    "2 Chronicles",    "Ezra",
    "Nehemiah",        "Esther",          "Job",             "Psalms",          "Proverbs",
    "Ecclesiastes",    "Song of Solomon", "Isaiah",          "Jeremiah",        "Lamentations",
    "Ezekiel",         "Daniel",          "Hosea",           "Joel",            "Amos",
    "Obadiah",         "Jonah",           "Micah",           "Nahum",           "Habakkuk",
    "Zephaniah",       "Haggai",          "Zechariah",       "Malachi",         "Matthew",
    "Mark",            "Luke",            "John",            "Acts",            "Romans",
    "1 Corinthians",   "2 Corinthians",   "Galatians",       "Ephesians",       "Philippians",
    "Colossians",      "1 Thessalonians", "2 Thessalonians", "1 Timothy",       "2 Timothy",
    "Titus",           "Philemon",        "Hebrews",         "James",           "1 Peter",
    "2 Peter",         "1 John",          "2 John",          "3 John",          "Jude",
    "Revelation",
};
constexpr size_t kBookCount = sizeof(kBookNames) / sizeof(kBookNames[0]);
static_assert(kBookCount == 66, "the Bible has 66 books");

constexpr std::string_view kHeader = "## ";  // starts a book's header line (no verse starts so)
constexpr const char* kRegenerate =
    "; rebuild Horizon from an intact assets/kjv/kjv.txt.gz (regenerate it with "
    "python3 scripts/fixtures/make_kjv_asset.py, see assets/kjv/README.md)";

// The bytes of one gzip member, decompressed with zlib; throws hz::Error when they are not one.
std::string gunzip(const unsigned char* data, size_t size, const std::string& what) {
  HZ_CHECK(size >= 18 && size <= UINT32_MAX, Error, what, " is not a gzip file (", size, " bytes)", kRegenerate);
  z_stream zs{};
  HZ_CHECK(inflateInit2(&zs, 16 + MAX_WBITS) == Z_OK, Error, "zlib could not start inflating ", what);  // 16+: gzip
  struct End {
    z_stream* z;
    ~End() { inflateEnd(z); }
  } end{&zs};
  zs.next_in = const_cast<Bytef*>(data);
  zs.avail_in = static_cast<uInt>(size);
  std::string out;
  // the gzip trailer's last 4 bytes hold the uncompressed size (mod 2^32): a capacity hint
  const uint32_t isize = uint32_t(data[size - 4]) | uint32_t(data[size - 3]) << 8 |
                         uint32_t(data[size - 2]) << 16 | uint32_t(data[size - 1]) << 24;
  out.reserve(std::min<uint32_t>(isize, 1u << 28));
  char buf[1 << 16];
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof(buf);
    rc = inflate(&zs, Z_NO_FLUSH);  // with fresh output space, Z_BUF_ERROR means the input ran out
    HZ_CHECK(rc == Z_OK || rc == Z_STREAM_END, Error, "cannot decompress ", what, ": ",
             rc == Z_BUF_ERROR ? std::string("the gzip stream is truncated")
                               : "zlib says " + (zs.msg ? std::string(zs.msg) : "error " + std::to_string(rc)),
             kRegenerate);
    out.append(buf, sizeof(buf) - zs.avail_out);
  }
  HZ_CHECK(zs.avail_in == 0, Error, what, " has ", zs.avail_in, " bytes after its gzip stream", kRegenerate);
  return out;
}

}  // namespace

std::vector<Document> parse_kjv_text(std::string_view text) {
  // One pass over the lines: a "## <name>" line starts the next book, which must be the next
  // name of kBookNames; every other line is a verse of the current book. The checks make any
  // edit that would change the corpus silently (a missing, extra, renamed, reordered or empty
  // book, a blank or CRLF line, a missing final newline) an error instead.
  std::vector<Document> docs;
  docs.reserve(kBookCount);
  size_t pos = 0;
  int64_t line_no = 0;
  const auto where = [&] { return "King James Bible text, line " + std::to_string(line_no); };
  HZ_CHECK(!text.empty(), Error, "the King James Bible text is empty", kRegenerate);
  HZ_CHECK(text.back() == '\n', Error, "the King James Bible text does not end with a newline", kRegenerate);
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);  // never npos: the text ends with '\n'
    const std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    HZ_CHECK(!line.empty(), Error, where(), " is blank (no book has blank lines)", kRegenerate);
    HZ_CHECK(line.back() != '\r', Error, where(), " ends with a carriage return (the file uses \\n line ends)",
             kRegenerate);
    if (line.compare(0, kHeader.size(), kHeader) == 0) {
      const std::string_view name = line.substr(kHeader.size());
      HZ_CHECK(docs.empty() || !docs.back().text.empty(), Error, where(), ": book ", docs.back().name,
               " has no verses", kRegenerate);
      HZ_CHECK(docs.size() < kBookCount, Error, where(), ": a 67th book '", name, "' (the Bible has 66)",
               kRegenerate);
      const char* expected = kBookNames[docs.size()];
      HZ_CHECK(name == expected, Error, where(), ": expected the header of book ", docs.size() + 1, " '## ",
               expected, "', found '", line.substr(0, 80), "'", kRegenerate);
      docs.push_back({expected, {}});
      continue;
    }
    HZ_CHECK(!docs.empty(), Error, where(), ": a verse before the first '## Genesis' header", kRegenerate);
    std::string& t = docs.back().text;
    if (!t.empty()) t.push_back('\n');
    t.append(line);
  }
  HZ_CHECK(!docs.empty() && !docs.back().text.empty(), Error, "book ",
           docs.empty() ? std::string(kBookNames[0]) : docs.back().name, " has no verses", kRegenerate);
  HZ_CHECK(docs.size() == kBookCount, Error, "the King James Bible text ends after ", docs.size(),
           " books (", docs.back().name, "), expected 66 through Revelation", kRegenerate);
  return docs;
}

const std::vector<std::string>& bible_book_names() {
  static const std::vector<std::string> names(std::begin(kBookNames), std::end(kBookNames));
  return names;
}

std::vector<Document> load_bible_kjv() {
  // Decompressed and parsed once per process (tens of ms), on the first call: needles and data
  // preparation ask again. A function-local static is initialized exactly once even when threads
  // race to it (C++11); if the initialization throws, the next call tries again.
  static const std::vector<Document> docs = parse_kjv_text(
      gunzip(hz_kjv_gz_begin, static_cast<size_t>(hz_kjv_gz_end - hz_kjv_gz_begin),
             "the embedded King James Bible (assets/kjv/kjv.txt.gz)"));
  return docs;
}

std::vector<std::string> expand_globs(const std::vector<std::string>& globs, const std::string& what) {
  HZ_CHECK(!globs.empty(), ValueError, "give at least one pattern of ", what);
  std::vector<std::string> paths;
  for (const std::string& pattern : globs) {
    glob_t g{};
    const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
    size_t found = 0;
    std::string skipped;  // the first match that is not a regular file, and why (core/file.h)
    if (rc == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) {
        if (const std::string why = input_problem(g.gl_pathv[i]); why.empty()) {
          paths.emplace_back(g.gl_pathv[i]);
          ++found;
        } else if (skipped.empty()) {
          skipped = std::string("; '") + g.gl_pathv[i] + "' " + why;
        }
      }
    }
    ::globfree(&g);
    HZ_CHECK(rc == 0 || rc == GLOB_NOMATCH, Error, "glob('", pattern, "') failed (code ", rc, ")");
    HZ_CHECK(found > 0, ValueError, "no ", what, " match the pattern '", pattern,
             "'; check the path (patterns use glob(3): *, ?, [...]) and that the files exist", skipped);
  }
  std::sort(paths.begin(), paths.end());
  paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
  return paths;
}

namespace {
std::string read_file(const std::string& p, const std::string& what) {
  std::string text;  // a regular file only (core/file.h); a corpus file has no cap of its own
  const std::string why = read_file_capped(p, std::numeric_limits<uint64_t>::max(), text);
  HZ_CHECK(why.empty(), ValueError, what, " '", p, "': ", why);
  return text;
}
}  // namespace

std::vector<Document> load_text_files(const std::vector<std::string>& globs) {
  std::vector<Document> docs;
  for (const std::string& p : expand_globs(globs, "text files")) docs.push_back({p, read_file(p, "text file")});
  return docs;
}

std::vector<Document> load_jsonl(const std::vector<std::string>& globs, const std::string& text_field) {
  using json = nlohmann::json;
  HZ_CHECK(!text_field.empty(), ValueError, "give the JSONL text field (data.text_field), e.g. text");
  std::vector<Document> docs;
  for (const std::string& p : expand_globs(globs, "JSONL files")) {
    const std::string bytes = read_file(p, "JSONL file");
    size_t pos = 0;
    int64_t line_no = 0;
    while (pos < bytes.size()) {
      size_t end = bytes.find('\n', pos);
      if (end == std::string::npos) end = bytes.size();
      ++line_no;
      const std::string_view line(bytes.data() + pos, end - pos);
      pos = end + 1;
      if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;  // blank line
      const std::string where = p + ":" + std::to_string(line_no);
      if (const std::string deep = json_depth_problem(line); !deep.empty()) throw ValueError(where + ": " + deep);
      json j;
      try {
        j = json::parse(line);
      } catch (const json::exception& e) {
        throw ValueError(where + ": not a JSON value (" + e.what() + "); a JSONL file holds one JSON object per line");
      }
      HZ_CHECK(j.is_object(), ValueError, where, ": expected a JSON object with a \"", text_field, "\" field, got a ",
               j.type_name());
      const auto it = j.find(text_field);
      if (it == j.end()) {
        std::string keys;
        for (auto k = j.begin(); k != j.end(); ++k) keys += (keys.empty() ? "" : ", ") + k.key();
        throw ValueError(where + ": the object has no field \"" + text_field + "\" (its keys: " +
                         (keys.empty() ? "none" : keys) + "); set data.text_field to the field holding the text");
      }
      HZ_CHECK(it->is_string(), ValueError, where, ": field \"", text_field, "\" is a ", it->type_name(),
               ", not a string");
      docs.push_back({where, it->get<std::string>()});
    }
  }
  return docs;
}

}  // namespace hz::data
