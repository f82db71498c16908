// Horizon data tests: the embedded King James Bible corpus and text-file globs.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "data/corpus.h"
#include "data/shard.h"
#include "tests/data/data_test_util.h"

namespace {

// First in the file, so that it makes the process's first (uncached) load in a full run: the text
// is in the binary, no PATH, working directory or `bible` program (Debian's bible-kjv, which
// Horizon ran before the text was embedded) is consulted.
TEST(BibleKjv, EmbeddedNeedsNoProgram) {
  hzdt::TempDir empty;
  const char* old = std::getenv("PATH");
  const std::string saved = old ? old : "";
  ::setenv("PATH", empty.path().c_str(), 1);
  std::vector<hz::data::Document> docs;
  EXPECT_NO_THROW(docs = hz::data::load_bible_kjv());
  ::setenv("PATH", saved.c_str(), 1);
  ASSERT_EQ(docs.size(), 66u);
  EXPECT_EQ(docs.back().name, "Revelation");
}

TEST(BibleKjv, SixtySixBooksWithKnownTextAndSize) {
  const std::vector<hz::data::Document> docs = hz::data::load_bible_kjv();
  ASSERT_EQ(docs.size(), 66u);
  EXPECT_EQ(docs.front().name, "Genesis");
  EXPECT_EQ(docs[18].name, "Psalms");
  EXPECT_EQ(docs[39].name, "Matthew");
  EXPECT_EQ(docs.back().name, "Revelation");
  ASSERT_EQ(hz::data::bible_book_names().size(), 66u);
  size_t total = 0, verses = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    EXPECT_EQ(docs[i].name, hz::data::bible_book_names()[i]);
    EXPECT_FALSE(docs[i].text.empty()) << docs[i].name;
    EXPECT_NE(docs[i].text.back(), '\n') << docs[i].name;
    total += docs[i].text.size();
    size_t lines = 1;
    for (char c : docs[i].text) lines += c == '\n';
    verses += lines;
  }
  const std::string gen1 = "In the beginning God created the heaven and the earth.\n";
  EXPECT_EQ(docs.front().text.compare(0, gen1.size(), gen1), 0) << docs.front().text.substr(0, 80);
  // the second verse starts right after the '\n', without its "Ge1:2 " reference
  EXPECT_EQ(docs.front().text.compare(gen1.size(), 13, "And the earth"), 0);
  const std::string& rev = docs.back().text;
  ASSERT_GE(rev.size(), 5u);
  EXPECT_EQ(rev.substr(rev.size() - 5), "Amen.");
  EXPECT_GT(total, 4000000u);
  EXPECT_EQ(verses, 31102u);  // the KJV has 31,102 verses
  // a one-chapter book comes out whole
  EXPECT_EQ(docs[64].name, "Jude");
  EXPECT_EQ(docs[64].text.compare(0, 5, "Jude,"), 0);
  // Every byte: FNV-1a 64 of the 66 texts concatenated without separators, as computed by
  // scripts/fixtures/make_kjv_asset.py from the output of Debian's `bible -f` (bible-kjv 4.38), the program
  // this corpus was read from before it was embedded; assets/kjv/README.md gives its SHA-256.
  uint64_t h = hz::data::fnv1a64("", 0);
  for (const auto& d : docs) h = hz::data::fnv1a64(d.text.data(), d.text.size(), h);
  EXPECT_EQ(total, 4137784u);
  EXPECT_EQ(h, 0x9865f60d0d2571b7ull) << std::hex << h;
}

TEST(BibleKjv, ConcurrentCallsGetTheSameDocuments) {
  // the first call decompresses and parses once (a function-local static); needles and data
  // preparation may call from several threads
  std::vector<std::vector<hz::data::Document>> got(4);
  std::vector<std::thread> threads;
  for (auto& g : got) threads.emplace_back([&g] { g = hz::data::load_bible_kjv(); });
  for (auto& t : threads) t.join();
  const std::vector<hz::data::Document> a = hz::data::load_bible_kjv();
  ASSERT_EQ(a.size(), 66u);
  for (const auto& g : got) {
    ASSERT_EQ(g.size(), a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(g[i].name, a[i].name);
      EXPECT_EQ(g[i].text, a[i].text) << a[i].name;
    }
  }
}

// A well-formed text in the asset's format: the 66 headers, each followed by `verses`.
std::string kjv_text(const std::string& verses = "v1\nv2\n") {
  std::string t;
  for (const std::string& n : hz::data::bible_book_names()) t += "## " + n + "\n" + verses;
  return t;
}

TEST(BibleKjv, ParserReadsTheFormat) {
  const auto docs = hz::data::parse_kjv_text(kjv_text());
  ASSERT_EQ(docs.size(), 66u);
  for (size_t i = 0; i < docs.size(); ++i) {
    EXPECT_EQ(docs[i].name, hz::data::bible_book_names()[i]);
    EXPECT_EQ(docs[i].text, "v1\nv2");  // verses joined by '\n', no trailing newline
  }
  // "##" not followed by a space, or inside a line, is verse text
  const auto odd = hz::data::parse_kjv_text(kjv_text("##x\na ## b\n"));
  EXPECT_EQ(odd[0].text, "##x\na ## b");
}

TEST(BibleKjv, ParserRejectsAnyDeviation) {
  const auto error_of = [](const std::string& text) {
    return hzdt::error_message<hz::Error>([&] { hz::data::parse_kjv_text(text); });
  };
  const auto has = [](const std::string& msg, const std::string& part) {
    return msg.find(part) != std::string::npos;
  };
  const std::string good = kjv_text();
  const auto replace = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    const size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return t.replace(at, from.size(), to);
  };
  std::string msg = error_of("");
  EXPECT_TRUE(has(msg, "empty")) << msg;
  EXPECT_TRUE(has(msg, "scripts/fixtures/make_kjv_asset.py")) << msg;  // says how to get an intact file
  msg = error_of(good.substr(0, good.size() - 1));
  EXPECT_TRUE(has(msg, "does not end with a newline")) << msg;
  msg = error_of("v0\n" + good);
  EXPECT_TRUE(has(msg, "line 1: a verse before the first '## Genesis' header")) << msg;
  msg = error_of(replace("## Exodus\nv1\nv2\n", ""));  // a book missing
  EXPECT_TRUE(has(msg, "line 4: expected the header of book 2 '## Exodus', found '## Leviticus'")) << msg;
  msg = error_of(replace("## Exodus", "## Exodus "));  // a renamed book
  EXPECT_TRUE(has(msg, "expected the header of book 2 '## Exodus'")) << msg;
  msg = error_of(replace("## Exodus\nv1\nv2\n", "## Exodus\n"));  // a book without verses
  EXPECT_TRUE(has(msg, "line 5: book Exodus has no verses")) << msg;
  msg = error_of(good.substr(0, good.size() - 6));  // Revelation without verses
  EXPECT_TRUE(has(msg, "book Revelation has no verses")) << msg;
  msg = error_of(good + "## Genesis\nv\n");
  EXPECT_TRUE(has(msg, "a 67th book 'Genesis'")) << msg;
  msg = error_of(good.substr(0, good.rfind("## Revelation")));
  EXPECT_TRUE(has(msg, "ends after 65 books (Jude), expected 66 through Revelation")) << msg;
  msg = error_of(replace("v1\nv2\n", "v1\n\nv2\n"));
  EXPECT_TRUE(has(msg, "line 3 is blank")) << msg;
  msg = error_of(replace("v1\n", "v1\r\n"));
  EXPECT_TRUE(has(msg, "line 2 ends with a carriage return")) << msg;
}

TEST(TextFiles, GlobsAreSortedDeduplicatedAndRead) {
  hzdt::TempDir dir;
  hzdt::write_bytes(dir.file("b.txt"), "second\n");
  hzdt::write_bytes(dir.file("a.txt"), std::string("first\0with nul", 14));
  hzdt::write_bytes(dir.file("c.md"), "# third");
  hzdt::write_bytes(dir.file("empty.txt"), "");
  ASSERT_EQ(::mkdir(dir.file("sub.txt").c_str(), 0700), 0);  // a directory matching *.txt is ignored

  auto docs = hz::data::load_text_files({dir.path() + "/*.txt"});
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(docs[0].name, dir.file("a.txt"));
  EXPECT_EQ(docs[0].text, std::string("first\0with nul", 14));
  EXPECT_EQ(docs[1].name, dir.file("b.txt"));
  EXPECT_EQ(docs[1].text, "second\n");
  EXPECT_EQ(docs[2].name, dir.file("empty.txt"));
  EXPECT_EQ(docs[2].text, "");

  // two patterns: the union, sorted by path, each file once
  docs = hz::data::load_text_files({dir.path() + "/c.*", dir.path() + "/[ab].txt", dir.path() + "/a*"});
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(docs[0].name, dir.file("a.txt"));
  EXPECT_EQ(docs[1].name, dir.file("b.txt"));
  EXPECT_EQ(docs[2].name, dir.file("c.md"));
  EXPECT_EQ(docs[2].text, "# third");
}

TEST(TextFiles, PatternWithoutMatchesIsNamed) {
  hzdt::TempDir dir;
  hzdt::write_bytes(dir.file("a.txt"), "x");
  const std::string bad = dir.path() + "/*.json";
  const std::string msg =
      hzdt::error_message<hz::ValueError>([&] { hz::data::load_text_files({dir.path() + "/*.txt", bad}); });
  EXPECT_NE(msg.find(bad), std::string::npos) << msg;
  EXPECT_THROW(hz::data::load_text_files({}), hz::ValueError);
}

}  // namespace
