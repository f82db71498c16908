#include "data/corpus.h"

#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>

#include "core/error.h"

namespace hz::data {

namespace {

struct Book {
  const char* name;    // English name, the Document name
  const char* query;   // abbreviation passed to `bible` (checked against the program, all 66)
  const char* prefix;  // the reference prefix `bible -f` prints before "<chapter>:<verse>"
};

// Verified with bible-kjv 4.x (Debian 12): `bible -f "<query>1:1-<query>999:999"` prints exactly
// the verses of the book, each line starting with "<prefix><chapter>:<verse> ".
constexpr Book kBooks[] = {
    {"Genesis", "Gen", "Ge"},          {"Exodus", "Exod", "Exo"},
    {"Leviticus", "Lev", "Lev"},       {"Numbers", "Num", "Num"},
    {"Deuteronomy", "Deut", "Deu"},    {"Joshua", "Josh", "Josh"},
    {"Judges", "Judg", "Jdgs"},        {"Ruth", "Ruth", "Ruth"},
    {"1 Samuel", "1Sam", "1Sm"},       {"2 Samuel", "2Sam", "2Sm"},
    {"1 Kings", "1Kgs", "1Ki"},        {"2 Kings", "2Kgs", "2Ki"},
    {"1 Chronicles", "1Chr", "1Chr"},  {"2 Chronicles", "2Chr", "2Chr"},
    {"Ezra", "Ezra", "Ezra"},          {"Nehemiah", "Neh", "Neh"},
    {"Esther", "Esth", "Est"},         {"Job", "Job", "Job"},
    {"Psalms", "Ps", "Psa"},           {"Proverbs", "Prov", "Prv"},
    {"Ecclesiastes", "Eccl", "Eccl"},  {"Song of Solomon", "Song", "SSol"},
    {"Isaiah", "Isa", "Isa"},          {"Jeremiah", "Jer", "Jer"},
    {"Lamentations", "Lam", "Lam"},    {"Ezekiel", "Ezek", "Eze"},
    {"Daniel", "Dan", "Dan"},          {"Hosea", "Hos", "Hos"},
    {"Joel", "Joel", "Joel"},          {"Amos", "Amos", "Amos"},
    {"Obadiah", "Obad", "Obad"},       {"Jonah", "Jonah", "Jonah"},
    {"Micah", "Mic", "Mic"},           {"Nahum", "Nah", "Nahum"},
    {"Habakkuk", "Hab", "Hab"},        {"Zephaniah", "Zeph", "Zep"},
    {"Haggai", "Hag", "Hag"},          {"Zechariah", "Zech", "Zec"},
    {"Malachi", "Mal", "Mal"},         {"Matthew", "Matt", "Mat"},
    {"Mark", "Mark", "Mark"},          {"Luke", "Luke", "Luke"},
    {"John", "John", "John"},          {"Acts", "Acts", "Acts"},
    {"Romans", "Rom", "Rom"},          {"1 Corinthians", "1Cor", "1Cor"},
    {"2 Corinthians", "2Cor", "2Cor"}, {"Galatians", "Gal", "Gal"},
    {"Ephesians", "Eph", "Eph"},       {"Philippians", "Phil", "Phi"},
    {"Colossians", "Col", "Col"},      {"1 Thessalonians", "1Thess", "1Th"},
    {"2 Thessalonians", "2Thess", "2Th"}, {"1 Timothy", "1Tim", "1Tim"},
    {"2 Timothy", "2Tim", "2Tim"},     {"Titus", "Titus", "Titus"},
    {"Philemon", "Phlm", "Phmn"},      {"Hebrews", "Heb", "Heb"},
    {"James", "Jas", "Jas"},           {"1 Peter", "1Pet", "1Pet"},
    {"2 Peter", "2Pet", "2Pet"},       {"1 John", "1John", "1Jn"},
    {"2 John", "2John", "2Jn"},        {"3 John", "3John", "3Jn"},
    {"Jude", "Jude", "Jude"},          {"Revelation", "Rev", "Rev"},
};
static_assert(sizeof(kBooks) / sizeof(kBooks[0]) == 66, "the Bible has 66 books");

// Full path of an executable `prog` on $PATH, or "" when there is none.
std::string find_on_path(const std::string& prog) {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/local/bin:/usr/bin:/bin";
  std::stringstream ss(p);
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) dir = ".";
    const std::string cand = dir + "/" + prog;
    struct stat st {};
    if (::stat(cand.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(cand.c_str(), X_OK) == 0)
      return cand;
  }
  return {};
}

// Runs `cmd` through /bin/sh and returns its stdout; throws hz::Error on a non-zero exit.
std::string run_command(const std::string& cmd) {
  FILE* f = ::popen(cmd.c_str(), "r");
  HZ_CHECK(f != nullptr, Error, "could not run '", cmd, "' (popen failed)");
  std::string out;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  const int status = ::pclose(f);
  HZ_CHECK(status == 0, Error, "'", cmd, "' failed (status ", status, "); output begins: ",
           out.substr(0, 200));
  return out;
}

// "<prefix><digits>:<digits> <text>" -> text, or false when the line has another shape.
bool strip_reference(const std::string& line, const std::string& prefix, std::string& text) {
  if (line.compare(0, prefix.size(), prefix) != 0) return false;
  size_t i = prefix.size();
  const auto digits = [&]() {
    const size_t s = i;
    while (i < line.size() && std::isdigit(static_cast<unsigned char>(line[i]))) ++i;
    return i > s;
  };
  if (!digits() || i >= line.size() || line[i] != ':') return false;
  ++i;
  if (!digits() || i >= line.size() || line[i] != ' ') return false;
  text.assign(line, i + 1, std::string::npos);
  return true;
}

}  // namespace

const std::vector<std::string>& bible_book_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Book& b : kBooks) v.emplace_back(b.name);
    return v;
  }();
  return names;
}

std::vector<Document> load_bible_kjv() {
  const std::string prog = find_on_path("bible");
  HZ_CHECK(!prog.empty(), ValueError,
           "the King James Bible corpus needs the `bible` program, which is not on PATH: "
           "install package bible-kjv (scripts/setup.sh does)");
  std::vector<Document> docs;
  docs.reserve(66);
  for (const Book& b : kBooks) {
    const std::string ref = std::string(b.query) + "1:1-" + b.query + "999:999";
    const std::string cmd = "'" + prog + "' -f \"" + ref + "\" </dev/null 2>&1";
    const std::string out = run_command(cmd);
    Document doc;
    doc.name = b.name;
    std::stringstream ss(out);
    std::string line, text;
    int64_t verses = 0;
    while (std::getline(ss, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;
      HZ_CHECK(strip_reference(line, b.prefix, text), Error, "unexpected output from '", cmd,
               "' for ", b.name, " (expected lines like '", b.prefix, "1:1 <text>'): '",
               line.substr(0, 120), "'; is the bible-kjv package intact?");
      if (verses == 0) {
        HZ_CHECK(line.compare(0, std::string(b.prefix).size() + 4, std::string(b.prefix) + "1:1 ") == 0,
                 Error, "'", cmd, "' did not start at ", b.prefix, "1:1 but at '", line.substr(0, 40), "'");
      } else {
        doc.text.push_back('\n');
      }
      doc.text += text;
      ++verses;
    }
    HZ_CHECK(verses > 0, Error, "'", cmd, "' printed no verses for ", b.name,
             "; is the bible-kjv package intact?");
    docs.push_back(std::move(doc));
  }
  return docs;
}

std::vector<std::string> expand_globs(const std::vector<std::string>& globs, const std::string& what) {
  HZ_CHECK(!globs.empty(), ValueError, "give at least one pattern of ", what);
  std::vector<std::string> paths;
  for (const std::string& pattern : globs) {
    glob_t g{};
    const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
    size_t found = 0;
    if (rc == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) {
        struct stat st {};
        if (::stat(g.gl_pathv[i], &st) == 0 && S_ISREG(st.st_mode)) {
          paths.emplace_back(g.gl_pathv[i]);
          ++found;
        }
      }
    }
    ::globfree(&g);
    HZ_CHECK(rc == 0 || rc == GLOB_NOMATCH, Error, "glob('", pattern, "') failed (code ", rc, ")");
    HZ_CHECK(found > 0, ValueError, "no ", what, " match the pattern '", pattern,
             "'; check the path (patterns use glob(3): *, ?, [...]) and that the files exist");
  }
  std::sort(paths.begin(), paths.end());
  paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
  return paths;
}

namespace {
std::string read_file(const std::string& p, const std::string& what) {
  std::ifstream in(p, std::ios::binary);
  HZ_CHECK(in.good(), ValueError, "cannot open ", what, " '", p, "' for reading");
  std::ostringstream ss;
  ss << in.rdbuf();
  HZ_CHECK(!in.bad(), Error, "error while reading ", what, " '", p, "'");
  return ss.str();
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
      json j;
      try {
        j = json::parse(line);
      } catch (const json::parse_error& e) {
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
