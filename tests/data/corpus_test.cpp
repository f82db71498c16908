// Horizon data tests: the King James Bible corpus and text-file globs.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/corpus.h"
#include "tests/data/data_test_util.h"

namespace {

bool bible_on_path() {
  const char* p = std::getenv("PATH");
  std::string path = p ? p : "";
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    const std::string cand = path.substr(start, end - start) + "/bible";
    if (::access(cand.c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  return false;
}

TEST(BibleKjv, SixtySixBooksWithKnownTextAndSize) {
  if (!bible_on_path()) GTEST_SKIP() << "`bible` not on PATH: install package bible-kjv (scripts/setup.sh does)";
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
}

TEST(BibleKjv, MissingProgramSaysWhichPackageToInstall) {
  hzdt::TempDir empty;
  const char* old = std::getenv("PATH");
  const std::string saved = old ? old : "";
  ::setenv("PATH", empty.path().c_str(), 1);
  const std::string msg = hzdt::error_message<hz::ValueError>([] { hz::data::load_bible_kjv(); });
  ::setenv("PATH", saved.c_str(), 1);
  EXPECT_NE(msg.find("install package bible-kjv (scripts/setup.sh does)"), std::string::npos) << msg;
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
